"""The observer's log lines (observer/logs.py): JSON a log pipeline can join with traces and series — timestamp,
level, logger, message, the version and the request's trace and span ids — or text; a bad format is refused.
The formatter is tested on a logger of its own, as configure() leaves logging set up by another (pytest) alone."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider

from observer.errors import ConfigError
from observer.logs import LOG_FORMAT_ENV, chosen_format, formatter, request_fields


@pytest.fixture
def lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter("json"))
    logger = logging.getLogger("observer.test-logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, out
    logger.removeHandler(handler)


def test_json_lines_carry_the_version_and_the_requests_trace(lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = lines
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    logger.warning("proxy %s: upstream request failed (%s)", "canary", "refused",
                   extra=request_fields("canary", traceparent))
    line = json.loads(out.getvalue().strip().splitlines()[-1])
    assert line["level"] == "WARNING" and line["logger"] == "observer.test-logs"
    assert line["message"] == "proxy canary: upstream request failed (refused)" and "timestamp" in line
    assert (line["version"], line["trace_id"], line["span_id"]) == ("canary", "4bf92f3577b34da6a3ce929d0e0e4736",
                                                                   "00f067aa0ba902b7")


def test_json_lines_inside_a_job_span_carry_its_ids(lines: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = lines
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("canary.judge") as span:
        logger.info("judged")
        ctx = span.get_span_context()
    logger.info("outside")
    inside, outside = (json.loads(x) for x in out.getvalue().strip().splitlines()[-2:])
    assert inside["trace_id"] == format(ctx.trace_id, "032x") and inside["span_id"] == format(ctx.span_id, "016x")
    assert "trace_id" not in outside and "version" not in outside


def test_the_format_comes_from_the_flag_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert chosen_format() == "text"
    monkeypatch.setenv(LOG_FORMAT_ENV, "JSON")
    assert chosen_format() == "json" and chosen_format("text") == "text"
    with pytest.raises(ConfigError, match="text, json"):
        chosen_format("logfmt")
    text = formatter("text").format(logging.LogRecord("observer", logging.INFO, __file__, 1, "hello", None, None))
    assert text.endswith("INFO observer hello")


@pytest.mark.parametrize("command", [["serve"], ["proxy", "--version", "canary"]])
def test_serve_and_proxy_refuse_an_unknown_log_format_before_starting(command: list[str]) -> None:
    from typer.testing import CliRunner

    from observer.cli.main import app

    res = CliRunner().invoke(app, [*command, "--log-format", "logfmt"])
    assert res.exit_code != 0 and "log format 'logfmt' is not one of text, json" in res.output
