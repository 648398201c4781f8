"""HTTPS: config validation, serving, mTLS, and certificates reloaded into the live listener."""

from __future__ import annotations

import os
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import ConfigError, parse_config
from app.http.server import create_app
from app.http.serving import ExtenderServer, build_server
from app.http.tls import CertificateReloader
from tests.app.pki import Pki, make_pki
from tests.app.serverutil import running
from tests.conftest import filter_body, make_service, node_obj, pod_obj


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server_config(cert: Path, key: str | Path, client_ca: Path | None = None) -> dict[str, Any]:
    tls: dict[str, Any] = {"certFile": str(cert), "keyFile": str(key)}
    if client_ca is not None:
        tls["clientCAFile"] = str(client_ca)
    return {"server": {"tls": tls}}


def _client_context(pki: Pki, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    return context


def _peer_certificate(port: int, context: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        peer = tls.getpeercert(binary_form=True)
        assert peer is not None
        return peer


def _der(path: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(path.read_text())


def _serve(config: dict[str, Any], **kwargs: Any) -> ExtenderServer:
    service = make_service([node_obj("g1", gpus=4)], config=config)
    return build_server(create_app(service), service.config.server, "127.0.0.1", 0, **kwargs)


def test_tls_files_are_validated_at_load_naming_the_field(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.server("validated")
    _, other_key = pki.client("other")
    with pytest.raises(ConfigError, match=r"server\.tls\.keyFile: cannot read .*missing\.key"):
        parse_config(_server_config(cert, tmp_path / "missing.key"))
    with pytest.raises(ConfigError, match=r"server\.tls: certFile: .* holds no PEM certificate"):
        parse_config(_server_config(key, key))
    with pytest.raises(ConfigError, match=r"server\.tls: keyFile: .* not a PEM private key matching certFile"):
        parse_config(_server_config(cert, other_key))
    with pytest.raises(ConfigError, match=r"server\.tls: clientCAFile: .* holds no PEM certificate"):
        parse_config(_server_config(cert, key, client_ca=key))
    with pytest.raises(ConfigError, match=r"server\.tls\.certFile: Field required"):
        parse_config({"server": {"tls": {"keyFile": str(key)}}})


def test_https_serves_the_verbs(pki: Pki) -> None:
    cert, key = pki.server("https")
    with running(_serve(_server_config(cert, key))) as server:
        url = f"https://127.0.0.1:{server.port}"
        with httpx.Client(base_url=url, verify=_client_context(pki), timeout=5) as client:
            answer = client.post("/filter", content=filter_body(pod_obj("p", gpus=1), ["g1"])).json()
            assert answer["Error"] == "" and answer["NodeNames"] == ["g1"]
        with pytest.raises(httpx.TransportError), httpx.Client(base_url=url.replace("https", "http"), timeout=5) as c:
            c.get("/healthz")  # plain HTTP on the TLS port gets no answer


def test_mtls_requires_a_client_certificate_from_the_ca(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.server("mtls")
    client_cert = pki.client("scheduler")
    stranger = make_pki(tmp_path / "other", name="other-ca").client("stranger")
    with running(_serve(_server_config(cert, key, client_ca=pki.ca))) as server:
        url = f"https://127.0.0.1:{server.port}"
        with httpx.Client(base_url=url, verify=_client_context(pki, client_cert), timeout=5) as client:
            assert client.get("/metrics").status_code == 200
            body = filter_body(pod_obj("p", gpus=1), ["g1"])
            assert client.post("/filter", content=body).json()["NodeNames"] == ["g1"]
        for refused in (_client_context(pki), _client_context(pki, stranger)):
            # TLS 1.3 reports the refusal after the handshake: the first request fails.
            with pytest.raises(httpx.TransportError), httpx.Client(base_url=url, verify=refused, timeout=5) as client:
                client.get("/healthz")


def _replace(target: Path, source: Path) -> None:
    """Swap the file's content atomically, as a projected Secret update does."""
    staging = target.with_suffix(".new")
    staging.write_bytes(source.read_bytes())
    os.replace(staging, target)


def _mount(directory: Path, pair: tuple[Path, Path]) -> tuple[Path, Path]:
    """``tls.crt`` and ``tls.key`` in ``directory`` holding ``pair``, as a mounted TLS Secret."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    _replace(cert, pair[0])
    _replace(key, pair[1])
    return cert, key


def _rotate(cert: Path, key: Path, pair: tuple[Path, Path]) -> None:
    """The Secret updated to ``pair``, key first: a reload in between sees a mismatched pair."""
    _replace(key, pair[1])
    _replace(cert, pair[0])


def test_new_handshakes_get_the_rotated_certificate(pki: Pki, tmp_path: Path) -> None:
    first = pki.server("first")
    second = pki.server("second")
    cert, key = _mount(tmp_path, first)
    with running(_serve(_server_config(cert, key), reload_interval=0.05)) as server:
        context = _client_context(pki)
        assert _peer_certificate(server.port, context) == _der(first[0])
        _rotate(cert, key, second)
        deadline = time.monotonic() + 10
        while _peer_certificate(server.port, context) != _der(second[0]):
            assert time.monotonic() < deadline, "the rotated certificate was never served"
            time.sleep(0.02)


def test_a_broken_rotation_keeps_the_previous_certificate(pki: Pki, tmp_path: Path) -> None:
    first = pki.server("kept")
    _, other_key = pki.client("mismatched")
    second = pki.server("later")
    cert, key = _mount(tmp_path, first)
    # No polling here: the test drives the reloader itself.
    with running(_serve(_server_config(cert, key), reload_interval=3600)) as server:
        reloader = server.reloader
        assert isinstance(reloader, CertificateReloader)
        context = _client_context(pki)
        assert reloader.reload_if_changed() is False  # nothing changed yet
        _replace(key, other_key)  # the key of another certificate: refused, the old pair keeps serving
        assert reloader.reload_if_changed() is False
        assert _peer_certificate(server.port, context) == _der(first[0])
        _rotate(cert, key, second)
        assert reloader.reload_if_changed() is True
        assert _peer_certificate(server.port, context) == _der(second[0])


def test_a_debug_token_beside_mtls_is_refused(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.server("both")
    token = tmp_path / "token"
    token.write_text("t")
    config = _server_config(cert, key, client_ca=pki.ca)
    config["server"]["debugTokenFile"] = str(token)
    with pytest.raises(ConfigError, match=r"server: debugTokenFile: not used with tls\.clientCAFile"):
        parse_config(config)
