"""``kube-gpu-extender``: serve, check-config, simulate, workload."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from app.config import ConfigError, ExtenderConfiguration, load_config
from simulator.cli import add_simulate_parser, run_simulate
from simulator.workload_cli import add_workload_parser, run_workload

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kube-gpu-extender", description="A kube-scheduler extender for GPU clusters."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP extender")
    serve.add_argument("--config", help="extender configuration (YAML); built-in defaults when omitted")
    source = serve.add_mutually_exclusive_group()
    source.add_argument("--snapshot", help="fill the cache from a file of Nodes and Pods instead of a cluster")
    source.add_argument("--kubeconfig", help="kubeconfig to watch a cluster; in-cluster config when omitted")
    serve.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1: sidecar on loopback)")
    serve.add_argument("--port", type=int, default=8888, help="listen port (default 8888)")
    serve.add_argument(
        "--allow-unauthenticated-debug",
        action="store_true",
        help="serve /debug and /metrics to anyone off loopback (demo containers only)",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="info (default): state changes only (binds, watches, configuration); debug: also one line per request",
    )
    serve.add_argument("--log-format", default="json", choices=["json", "text"])

    check = commands.add_parser("check-config", help="validate a configuration file and print the effective config")
    check.add_argument("--config", required=True)
    add_simulate_parser(commands)
    add_workload_parser(commands)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from app.cluster.kube import CredentialsError
    from app.cluster.snapshot import SnapshotError
    from app.http.auth import exposure_error
    from app.http.serving import build_server
    from app.operator.logs import configure_logging
    from app.runtime import build_cluster_runtime, build_snapshot_runtime

    configure_logging(args.log_level, args.log_format)
    config = load_config(args.config)
    tls = config.server.tls
    problem = exposure_error(args.host, tls.clientCAFile if tls else None, config.server.debugTokenFile)
    if problem and not args.allow_unauthenticated_debug:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.snapshot:
            runtime = build_snapshot_runtime(config, args.snapshot)
        else:
            runtime = build_cluster_runtime(config, args.kubeconfig)
    except (SnapshotError, CredentialsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _log_configuration(args, config)
    server = build_server(runtime.app(), config.server, args.host, args.port)
    server.run()
    return 0 if server.started else 1


def _log_configuration(args: argparse.Namespace, config: ExtenderConfiguration) -> None:
    """One INFO line: where the cluster comes from, the listen address, and the effective configuration."""
    import msgspec

    if args.snapshot:
        source = f"snapshot {args.snapshot}"
    else:
        source = f"cluster ({f'kubeconfig {args.kubeconfig}' if args.kubeconfig else 'in-cluster config'})"
    logging.getLogger("kube_gpu_extender").info(
        "serving %s on %s:%d; configuration from %s: %s",
        source,
        args.host,
        args.port,
        args.config or "built-in defaults",
        msgspec.json.encode(config.model_dump(mode="json")).decode(),
    )


def _check_config(args: argparse.Namespace) -> int:
    import yaml

    config = load_config(args.config)
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "simulate":
            return run_simulate(args)
        if args.command == "workload":
            return run_workload(args)
        return _check_config(args)
    except ConfigError as exc:
        print(f"error: invalid configuration: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
