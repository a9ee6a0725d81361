"""The observer's log lines (observer/logs.py): JSON a log pipeline can join with traces and series — timestamp,
level, logger, message, the version and the request's trace and span ids — or text; a bad format is refused."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

from observer.errors import ConfigError
from observer.logs import LOG_FORMAT_ENV, configure, request_fields


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_version_and_the_requests_trace(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    logging.getLogger("observer.proxy").warning("proxy %s: upstream request failed (%s)", "canary", "refused",
                                                extra=request_fields("canary", traceparent))
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["level"] == "WARNING" and line["logger"] == "observer.proxy"
    assert line["message"] == "proxy canary: upstream request failed (refused)" and "timestamp" in line
    assert (line["version"], line["trace_id"], line["span_id"]) == ("canary", "4bf92f3577b34da6a3ce929d0e0e4736",
                                                                   "00f067aa0ba902b7")


def test_json_lines_inside_a_job_span_carry_its_ids(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("canary.judge") as span:
        logging.getLogger("observer.canary").info("judged")
        ctx = span.get_span_context()
    logging.getLogger("observer.canary").info("outside")
    inside, outside = (json.loads(x) for x in capsys.readouterr().err.strip().splitlines()[-2:])
    assert inside["trace_id"] == format(ctx.trace_id, "032x") and inside["span_id"] == format(ctx.span_id, "016x")
    assert "trace_id" not in outside and "version" not in outside


def test_the_format_comes_from_the_environment_and_a_bad_one_is_refused(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LOG_FORMAT_ENV, "json")
    configure("info")
    logging.getLogger("observer").info("hello")
    assert json.loads(capsys.readouterr().err.strip())["message"] == "hello"
    configure("info", "text")
    logging.getLogger("observer").info("hello")
    assert capsys.readouterr().err.strip().endswith("INFO observer hello")
    with pytest.raises(ConfigError, match="text, json"):
        configure("info", "logfmt")


@pytest.mark.parametrize("command", [["serve"], ["proxy", "--version", "canary"]])
def test_serve_and_proxy_refuse_an_unknown_log_format_before_starting(command: list[str]) -> None:
    from typer.testing import CliRunner

    from observer.cli.main import app

    res = CliRunner().invoke(app, [*command, "--log-format", "logfmt"])
    assert res.exit_code != 0 and "log format 'logfmt' is not one of text, json" in res.output
