"""Throwaway certificates for the TLS tests, made with the openssl CLI (no extra Python dependency)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Pki", "make_pki"]

_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path

    def issue(self, name: str, *, extensions: str, subject: str | None = None) -> tuple[Path, Path]:
        """A key and a certificate signed by this CA, valid for a day (subject /CN=name unless given)."""
        (self.dir / f"{name}.ext").write_text(extensions + "\n")
        _openssl("req", *_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject or f"/CN={name}",
                 cwd=self.dir)  # fmt: skip
        _openssl(
            "x509", "-req", "-in", f"{name}.csr", "-CA", self.ca.name, "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=self.dir,
        )  # fmt: skip
        return self.dir / f"{name}.crt", self.dir / f"{name}.key"

    def server(self, name: str = "server") -> tuple[Path, Path]:
        return self.issue(name, extensions="subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")

    def client(self, name: str = "client") -> tuple[Path, Path]:
        return self.issue(name, extensions="extendedKeyUsage=clientAuth")


def make_pki(directory: Path, name: str = "ca") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", *_KEY, "-keyout", "ca.key", "-out", "ca.crt", "-subj", f"/CN={name}", "-days", "1",
             cwd=directory)  # fmt: skip
    return Pki(directory, directory / "ca.crt")
