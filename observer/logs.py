"""The observer's own log lines: text for a terminal, or one JSON object per line for a log pipeline
(`--log-format json` or OBSERVER_LOG_FORMAT=json), so an on-call can join them with the traces and series.

A JSON line carries `timestamp`, `level`, `logger` and `message`; `version` where the line is about one version;
`trace_id` and `span_id` where a request has them (a forwarded request's traceparent, passed as `extra`) or,
otherwise, from the current OpenTelemetry span (the observer's own jobs). An exception adds `exc_info`.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

from observer.errors import ConfigError

LOG_FORMAT_ENV = "OBSERVER_LOG_FORMAT"
FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class _Json(JsonFormatter):
    """python-json-logger's formatter plus the current span's ids when the record brings none."""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        if "trace_id" not in log_data:
            ctx = trace.get_current_span().get_span_context()
            if ctx.is_valid:
                log_data["trace_id"] = format(ctx.trace_id, "032x")
                log_data["span_id"] = format(ctx.span_id, "016x")


def formatter(fmt: str) -> logging.Formatter:
    """The formatter of log format `fmt` (text or json)."""
    if fmt == "json":
        return _Json("{levelname}{name}{message}", style="{", timestamp=True,
                     rename_fields={"levelname": "level", "name": "logger"})
    return logging.Formatter(TEXT)


def chosen_format(fmt: str | None = None) -> str:
    """`fmt`, else OBSERVER_LOG_FORMAT, else text; ConfigError naming the choices for anything else."""
    chosen = (fmt or os.environ.get(LOG_FORMAT_ENV) or "text").strip().lower()
    if chosen not in FORMATS:
        raise ConfigError(f"log format {chosen!r} is not one of {', '.join(FORMATS)} (--log-format or "
                          f"{LOG_FORMAT_ENV})")
    return chosen


def configure(level: str, fmt: str | None = None) -> None:
    """Log at `level` to stderr in format `fmt` (chosen_format), unless the process's logging is already set
    up (as logging.basicConfig: an embedding program, or a test runner, keeps its own)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(chosen_format(fmt)))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def request_fields(version: str, traceparent: str) -> dict[str, str]:
    """`extra` for a log line about one forwarded request: its version and its traceparent's ids."""
    parts = traceparent.strip().split("-")
    out = {"version": version}
    if len(parts) == 4:
        out["trace_id"], out["span_id"] = parts[1], parts[2]
    return out
