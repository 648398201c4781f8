"""The API client's credential header is read through the loaders' refresh hook at most once per
``AUTHORIZATION_TTL`` seconds (the hook reruns the kubeconfig loader on every call)."""

from __future__ import annotations

from app.cluster.kube import AUTHORIZATION_TTL, _kept_for


def test_the_header_is_read_again_only_after_the_ttl() -> None:
    now = [100.0]
    tokens = iter(["first", "rotated"])
    reads: list[str] = []

    def read() -> tuple[str, str]:
        reads.append(token := next(tokens))
        return ("authorization", f"Bearer {token}")

    header = _kept_for(AUTHORIZATION_TTL, read, clock=lambda: now[0])
    assert header() == header() == ("authorization", "Bearer first")
    now[0] += AUTHORIZATION_TTL - 0.01
    assert header() == ("authorization", "Bearer first") and reads == ["first"]
    now[0] += 0.01  # a rotated token is sent from then on
    assert header() == ("authorization", "Bearer rotated") and reads == ["first", "rotated"]
    assert 0 < AUTHORIZATION_TTL <= 10  # far below a projected token's renewal margin (minutes)


def test_no_credential_is_kept_as_none() -> None:
    calls = []
    header = _kept_for(5.0, lambda: calls.append(1), clock=lambda: 0.0)  # type: ignore[func-returns-value]
    assert header() is None and header() is None and calls == [1]
