"""Pieces of the demo that need no processes: the Prometheus link and the game-day hook."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from observer_dev import demo


def test_graph_url_opens_both_ttft_queries() -> None:
    url = demo.graph_url("http://127.0.0.1:9090", demo.TTFT_P95_QUERY, demo.WINDOW_TTFT_P95_QUERY)
    parts = urlsplit(url)
    assert parts.path == "/graph"
    q = parse_qs(parts.query)
    assert q["g0.expr"] == [demo.TTFT_P95_QUERY] and q["g1.expr"] == [demo.WINDOW_TTFT_P95_QUERY]


def test_gameday_hook_returns_the_game_day_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    from observer_dev.gameday import Expect, Row, runner

    for ok, code in ((True, 0), (False, 1)):
        rows = [Row(scenario="healthy", title="healthy canary", expected=Expect.PASS, ok=ok)]
        monkeypatch.setattr(runner, "play", lambda kind, rows=rows: rows)
        assert demo._gameday(None) == code  # type: ignore[arg-type]


def test_a_bad_config_fails_with_its_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("fleet:\n  versions:\n    - name: Stable!\n")
    assert demo.run(["--config", str(path), "--duration", "1"]) == 1
    assert "fleet.versions.0.name" in capsys.readouterr().err


def test_a_sigterm_stops_the_real_game_day_as_ctrl_c_does() -> None:
    """`observer gameday --real` starts vLLM servers that only `finally` blocks stop; Python's default SIGTERM
    skips them, so the command maps SIGTERM to KeyboardInterrupt first."""
    import os
    import signal

    from observer_dev.vllmproc import sigterm_stops

    before = signal.getsignal(signal.SIGTERM)
    try:
        sigterm_stops()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)  # let the handler run before the block ends
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_demo_takes_all_three_running_servers_or_none() -> None:
    assert demo._given_servers([]) == {}
    given = demo._given_servers(["stable=http://127.0.0.1:1/", "canary=http://127.0.0.1:2", "embedder=http://x:3"])
    assert given["stable"].url == "http://127.0.0.1:1"
    with pytest.raises(demo.DemoError, match="exactly stable, canary and embedder"):
        demo._given_servers(["stable=http://127.0.0.1:1"])
    with pytest.raises(demo.DemoError, match="NAME=URL"):
        demo._given_servers(["stable"])
