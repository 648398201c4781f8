"""The module graph keeps its layers: the domain packages import the standard library, their own
lower layers and the few third-party libraries named here, never app/, an HTTP stack, the
Kubernetes client or each other sideways. Checked on every import statement, lazy ones included."""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Domain package -> the domain packages it may import (lower layers).
LAYERS: dict[str, set[str]] = {
    "k8s_semantics": set(),
    "scoring": {"k8s_semantics"},
    "allocator": {"scoring", "k8s_semantics"},
    "fairshare": {"scoring", "allocator", "k8s_semantics"},
    "gang": {"scoring", "allocator", "fairshare", "k8s_semantics"},
}
# Third-party libraries a domain package may use (speed or what it implements, not I/O).
THIRD_PARTY: dict[str, set[str]] = {
    "k8s_semantics": set(),
    "scoring": {"numpy"},
    "allocator": {"cel_expr_python"},
    "fairshare": set(),
    "gang": set(),
}


def _imports(path: Path) -> set[str]:
    """Top-level names of the absolute imports in one module."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_domain_package_imports_only_its_layers(package: str) -> None:
    allowed = {package, "__future__"} | LAYERS[package] | THIRD_PARTY[package] | set(sys.stdlib_module_names)
    assert not _outside(ROOT / package, _imports, allowed)


def _outside(folder: Path, imports: Callable[[Path], set[str]], allowed: set[str]) -> list[str]:
    """ "module: import" for every import of the folder's modules outside ``allowed``."""
    modules = sorted(folder.rglob("*.py"))
    assert modules, folder
    return sorted(f"{m.relative_to(ROOT)}: {name}" for m in modules for name in imports(m) - allowed)


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    import httpx\n    from app.cluster.cache import ClusterCache\n")
    assert _imports(module) == {"os", "httpx", "app"}


# The pipeline's participants (app/pipeline): each depends on the framework and the domain, never on
# another participant, so adding or switching one off touches no other.
PARTICIPANTS = ("fit", "claims", "queues", "gangs")


@pytest.mark.parametrize("participant", PARTICIPANTS)
def test_participants_do_not_import_each_other(participant: str) -> None:
    tree = ast.parse((ROOT / "app" / "pipeline" / f"{participant}.py").read_text(encoding="utf-8"))
    modules = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app.pipeline")
    }
    others = {f"app.pipeline.{other}" for other in PARTICIPANTS if other != participant} | {"app.pipeline"}
    assert not modules & others, sorted(modules & others)


# The rooms of app/ -> the other parts of app/ each may import ("app" = the top-level modules that
# compose them: cli, runtime, service, config, yamlfile). The Kubernetes side knows nothing of the
# verbs; the pipeline reads the cluster and the wire vocabulary, never the HTTP server.
ROOMS: dict[str, set[str]] = {
    "cluster": {"app.operator"},  # watch and bind-less counters
    "pipeline": {"app.cluster", "app.http.wire", "app"},  # app: the configuration it is built from
    "http": {"app.operator", "app"},  # the verbs' service, the server's configuration
    "operator": {"app"},  # /debug reads the service
}


def _room_of(module: str) -> str:
    """The part of app/ a module is in: "app.cluster.cache" -> "app.cluster"; the HTTP room's wire
    vocabulary is its own part ("app.http.wire"); top-level modules -> "app"."""
    parts = module.split(".")
    if module == "app.http.wire" or module.startswith("app.http.wire."):
        return "app.http.wire"
    return f"app.{parts[1]}" if len(parts) > 1 and parts[1] in ROOMS else "app"


def _room_imports(path: Path) -> set[str]:
    """The parts of app/ one module imports (``from app.http import wire`` names the module)."""
    parts: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "app":
            parts.update(_room_of(f"{node.module}.{alias.name}") for alias in node.names)
    return parts


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_rooms_of_app_import_only_what_they_may(room: str) -> None:
    allowed = {f"app.{room}"} | ROOMS[room] | ({"app.http.wire"} if room == "http" else set())
    assert not _outside(ROOT / "app" / room, _room_imports, allowed)


def test_the_room_checker_sees_what_a_module_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from app.http import wire\nfrom app.http.server import create_app\nfrom app.service import X\n")
    assert _room_imports(module) == {"app.http.wire", "app.http", "app"}
