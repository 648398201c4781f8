"""Reading one YAML file, with errors that name the file (configuration files of both kinds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["read_yaml"]


def read_yaml(path: str | Path, what: str, error: type[Exception]) -> Any:
    """The document in ``path``; ``error`` (a ValueError-like class) says "cannot read <what> <path>"
    or "<path>: invalid YAML" otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{path}: invalid YAML: {exc}") from None
