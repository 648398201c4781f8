"""/debug and /metrics off loopback: the bearer-token guard and the refusal to expose them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.config import ConfigError, parse_config
from app.http.auth import BearerTokenGuard, exposure_error, is_loopback
from app.http.server import create_app
from tests.conftest import filter_body, make_service, node_obj, pod_obj

TOKEN = "s3cret-token"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")  # Secrets often end in a newline; it is not part of the token
    return path


@pytest.fixture
def guarded(token_file: Path) -> Any:
    service = make_service([node_obj("g1", gpus=4)], config={"server": {"debugTokenFile": str(token_file)}})
    with TestClient(BearerTokenGuard(create_app(service), str(token_file))) as client:
        yield client


@pytest.mark.parametrize("path", ["/debug", "/metrics", "/debug/"])
def test_protected_paths_need_the_token(guarded: Any, path: str) -> None:
    assert guarded.get(path).status_code == 401
    assert guarded.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert guarded.get(path, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    answer = guarded.get(path, headers={"Authorization": f"Bearer {TOKEN}"}, follow_redirects=True)
    assert answer.status_code == 200


def test_explain_needs_the_token(guarded: Any) -> None:
    body = filter_body(pod_obj("p", gpus=1), ["g1"])
    refused = guarded.post("/debug/explain", content=body)
    assert refused.status_code == 401 and "server.debugTokenFile" in refused.json()["error"]
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert guarded.post("/debug/explain", content=body, headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_verbs_and_probes_stay_open(guarded: Any) -> None:
    assert guarded.get("/healthz").status_code == 200
    assert guarded.get("/readyz").status_code == 200
    assert guarded.post("/filter", content=filter_body(pod_obj("p", gpus=1), ["g1"])).json()["NodeNames"] == ["g1"]


def test_a_rotated_token_applies_at_once_and_an_unreadable_file_refuses_all(guarded: Any, token_file: Path) -> None:
    token_file.write_text("rotated")
    assert guarded.get("/debug", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401
    assert guarded.get("/debug", headers={"Authorization": "Bearer rotated"}).status_code == 200
    token_file.unlink()
    assert guarded.get("/debug", headers={"Authorization": "Bearer rotated"}).status_code == 401


def test_token_file_is_validated_at_load(tmp_path: Path, token_file: Path) -> None:
    with pytest.raises(ConfigError, match=r"server\.debugTokenFile: cannot read"):
        parse_config({"server": {"debugTokenFile": str(tmp_path / "missing")}})
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(ConfigError, match=r"server\.debugTokenFile: .* is empty"):
        parse_config({"server": {"debugTokenFile": str(empty)}})


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("::", False), ("10.0.0.5", False), ("extender.example", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert (exposure_error(host, None, None) is None) is loopback
    assert exposure_error(host, "ca.crt", None) is None
    assert exposure_error(host, None, "token") is None


def test_serve_off_loopback_without_protection_refuses_to_start(capsys: Any) -> None:
    assert main(["serve", "--snapshot", "examples/cluster.yaml", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "not a loopback address" in err and "server.debugTokenFile" in err and "server.tls.clientCAFile" in err


def test_the_opt_out_is_named_in_the_refusal(capsys: Any) -> None:
    # The demo image's CMD passes --allow-unauthenticated-debug; here only the message is checked,
    # as starting would need a real server (tests/app/test_shutdown.py covers serving).
    assert main(["serve", "--snapshot", "examples/cluster.yaml", "--host", "10.0.0.1"]) == 2
    assert "--allow-unauthenticated-debug" in capsys.readouterr().err
