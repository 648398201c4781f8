"""``serve --snapshot`` whose binds wait for a gate file: the SIGTERM test's server (test-only wiring).

Run as ``python -m tests.app.gated_bind_server SNAPSHOT PORT GATE_DIR [CONFIG]``. Each bind creates
``GATE_DIR/started`` and then waits until ``GATE_DIR/release`` exists before binding.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from app.config import load_config
from app.http.serving import build_server
from app.operator.logs import configure_logging
from app.runtime import build_snapshot_runtime
from app.service import Binder


class GatedBinder:
    def __init__(self, inner: Binder, gate: Path) -> None:
        self.inner = inner
        self.gate = gate

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        (self.gate / "started").touch()
        while not (self.gate / "release").exists():
            await asyncio.sleep(0.01)
        await self.inner.bind(namespace, name, uid, node)


def main(argv: list[str]) -> int:
    snapshot, port, gate, *rest = argv
    configure_logging("info", "text")
    config = load_config(rest[0] if rest else None)
    runtime = build_snapshot_runtime(config, snapshot)
    runtime.service.binder = GatedBinder(runtime.service.binder, Path(gate))
    server = build_server(runtime.app(), config.server, "127.0.0.1", int(port))
    server.run()
    return 0 if server.started else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
