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
    from observer_dev import gameday

    for ok, code in ((True, 0), (False, 1)):
        rows = [gameday.Row(scenario="healthy", title="healthy canary", expected="pass", ok=ok)]
        monkeypatch.setattr(gameday, "run_gameday", lambda short=False, rows=rows: gameday.Report(rows=rows))
        assert demo._gameday(None) == code  # type: ignore[arg-type]


def test_a_bad_config_fails_with_its_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("fleet:\n  versions:\n    - name: Stable!\n")
    assert demo.run(["--config", str(path), "--duration", "1"]) == 1
    assert "fleet.versions.0.name" in capsys.readouterr().err
