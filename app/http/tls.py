"""HTTPS for the extender: one live ``SSLContext`` whose certificates follow their files.

kube-scheduler's extender ``tlsConfig`` verifies our certificate and may present its own; the
client CA turns that into mTLS. Certificates are rotated in place (cert-manager, projected Secrets),
so a poller reloads them into the context uvicorn's listener already holds: new handshakes get the
new certificate, open connections keep theirs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable

__all__ = ["RELOAD_INTERVAL", "CertificateReloader", "check_readable", "check_tls_files", "server_context"]

log = logging.getLogger("kube_gpu_extender.tls")
RELOAD_INTERVAL = 5.0


def check_readable(path: str) -> None:
    """Raise ``ValueError`` unless ``path`` is a readable file (the config validator names the field)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None


def check_tls_files(cert_file: str, key_file: str, client_ca_file: str | None) -> None:
    """Parse the files as the server will, so a bad certificate fails at load, not at the first handshake."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cafile=cert_file)
    except ssl.SSLError as exc:
        raise ValueError(f"certFile: {cert_file} holds no PEM certificate: {exc.reason}") from None
    try:
        server_context(cert_file, key_file, None)
    except ssl.SSLError as exc:
        raise ValueError(f"keyFile: {key_file} is not a PEM private key matching certFile: {exc.reason}") from None
    if client_ca_file is not None:
        try:
            probe.load_verify_locations(cafile=client_ca_file)
        except ssl.SSLError as exc:
            raise ValueError(f"clientCAFile: {client_ca_file} holds no PEM certificate: {exc.reason}") from None


def server_context(cert_file: str, key_file: str, client_ca_file: str | None) -> ssl.SSLContext:
    """TLS 1.2+ server context; with a client CA, a verified client certificate is required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _signature(path: str) -> tuple[int, int, int] | None:
    # Projected Secrets swap a symlink: stat follows it, so inode and mtime change with the content.
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class CertificateReloader:
    """Owns the live context; ``reload_if_changed`` loads changed files into it.

    A half-written or mismatched pair is logged and skipped (the old certificate keeps serving) and
    retried on the next change. A changed client CA file adds its CAs to the trust store: OpenSSL
    cannot drop CAs from a live context, so removing a CA needs a restart.
    """

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.context = server_context(cert_file, key_file, client_ca_file)
        self._pair = self._pair_signature()
        self._ca = _signature(client_ca_file) if client_ca_file else None

    def _pair_signature(self) -> tuple[tuple[int, int, int] | None, ...]:
        return _signature(self.cert_file), _signature(self.key_file)

    def reload_if_changed(self) -> bool:
        """Reload what changed since the last successful load; True when something was reloaded."""
        reloaded = False
        pair = self._pair_signature()
        if pair != self._pair and self._load(lambda: self.context.load_cert_chain(self.cert_file, self.key_file)):
            self._pair = pair
            reloaded = True
            log.info("reloaded the serving certificate from %s", self.cert_file)
        if self.client_ca_file is not None:
            ca = _signature(self.client_ca_file)
            ca_file = self.client_ca_file
            if ca != self._ca and self._load(lambda: self.context.load_verify_locations(cafile=ca_file)):
                self._ca = ca
                reloaded = True
                log.info("reloaded the client CA bundle from %s", ca_file)
        return reloaded

    @staticmethod
    def _load(load: Callable[[], None]) -> bool:
        try:
            load()
        except (OSError, ssl.SSLError) as exc:
            log.error("certificate reload failed, still serving the previous one: %s", exc)
            return False
        return True

    async def run(self, interval: float = RELOAD_INTERVAL) -> None:
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()
