"""Structured logs: one JSON object per line, so decisions can be grepped and shipped as they are.

Levels: INFO is for state changes and the decisions that make them (binds, preemption outcomes, watch
synced / restored, configuration); WARNING and ERROR for what went wrong (bind failures, broken
watches, pods bound without the extender's /bind). Anything said once per request — every API
request of the client, every filter and prioritize decision — is DEBUG, so ``--log-level info``
stays quiet however busy the scheduler is.
"""

from __future__ import annotations

import logging
import time
from typing import Any, TextIO

import msgspec

__all__ = ["PER_REQUEST_LOGGERS", "TRACE_LOGGERS", "configure_logging"]

# The API client logs its own requests at DEBUG (kube_gpu_extender.api). httpx is no longer the
# service's client, but an httpx in the same process (an embedding, the test harness) logs a line per
# request at INFO: those lines are DEBUG here, and httpcore's transport trace never shows.
PER_REQUEST_LOGGERS = ("httpx",)
# (uvicorn's access log is off altogether: app/http/serving.py passes access_log=False.)
TRACE_LOGGERS = ("httpcore",)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        decision = getattr(record, "decision", None)
        if decision is not None:
            entry["decision"] = decision
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


class PerRequestFilter(logging.Filter):
    """Turns a library's per-request INFO record into a DEBUG one (the handler's level decides)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO:
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


def configure_logging(level: str = "info", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Log to ``stream`` (stderr) at ``level``; per-request library lines only at ``debug``."""
    threshold = logging.getLevelName(level.upper())
    if not isinstance(threshold, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(stream)
    handler.setLevel(threshold)  # also drops the records PerRequestFilter demoted, unless at debug
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # Neither format shows the caller, thread, process or task: do not look them up for every record
    # (the logging HOWTO's "Optimization"; about a fifth of a record's CPU, and a bind writes one).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # type: ignore[attr-defined]  # read from Python 3.12
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(threshold)
    for name in PER_REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        # Below debug, do not even build the records; at debug, build them and demote them.
        logger.setLevel(logging.NOTSET if threshold <= logging.DEBUG else max(threshold, logging.WARNING))
        if not any(isinstance(f, PerRequestFilter) for f in logger.filters):
            logger.addFilter(PerRequestFilter())
    for name in TRACE_LOGGERS:
        logging.getLogger(name).setLevel(max(threshold, logging.INFO))
