"""`observer baseline …` and `observer drift …` through the real CLI (real model, real SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from observer.cli.drift import parse_time
from observer.cli.main import app
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from tests.support.drift_corpus import load_corpus

runner = CliRunner()


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


def test_drift_test_json_contract_and_verdicts(tmp_path: Path) -> None:
    corpus = load_corpus()
    rng = np.random.default_rng(0)
    ref, same = corpus.draw("none", 120, rng)
    _, shifted = corpus.draw("language", 120, rng)
    a = _jsonl(tmp_path / "a.jsonl", ref)
    shifted_heavy = shifted[:60] + list(corpus.pools["foreign"][:60])
    result = runner.invoke(app, ["drift", "test", "--reference", str(a), "--current",
                                 str(_jsonl(tmp_path / "b.jsonl", shifted_heavy)), "--json", "--permutations", "199"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert list(out) == ["statistic", "p_value", "drift", "n_reference", "n_current", "method"]
    assert out["drift"] is True and out["p_value"] == pytest.approx(1 / 200) and out["n_current"] == 120
    result = runner.invoke(app, ["drift", "test", "--reference", str(a), "--current",
                                 str(_jsonl(tmp_path / "c.jsonl", same)), "--json", "--fail-on-drift"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["drift"] is False


@pytest.mark.parametrize(
    ("content", "message"),
    [("{\"text\": \"ok\"}\n{broken\n", "b.jsonl:2: not valid JSON"),
     ("{\"text\": \"ok\"}\n{\"txt\": \"x\"}\n", "b.jsonl:2: each line must be a JSON object"),
     ("{\"text\": \"only one\"}\n", "need at least 2 texts")],
    ids=["json", "field", "too-few"],
)
def test_drift_test_bad_files_fail_precisely(tmp_path: Path, content: str, message: str) -> None:
    a = _jsonl(tmp_path / "a.jsonl", ["x", "y", "z"])
    b = tmp_path / "b.jsonl"
    b.write_text(content)
    result = runner.invoke(app, ["drift", "test", "--reference", str(a), "--current", str(b)])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


def test_parse_time_forms() -> None:
    assert parse_time("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_time("1700000000", now=0) == 1_700_000_000.0
    assert parse_time("2023-11-14T22:13:20Z", now=0) == 1_700_000_000.0
    assert parse_time(None, now=0) is None


def test_baseline_lifecycle_check_and_report(tmp_path: Path) -> None:
    cfg = tmp_path / "observer.yaml"
    cfg.write_text(f"""
fleet:
  versions:
    - {{name: stable, role: stable, model: llama}}
    - {{name: canary, role: canary, model: llama}}
sampling:
  store: {{path: {tmp_path / 'samples.db'}}}
drift:
  baseline_dir: {tmp_path / 'baselines'}
  min_samples: 30
  permutations: 999
  window_seconds: 3600
  embedder: {{cache_dir: {tmp_path / 'cache'}, max_cache_entries: 1000}}
""")
    import time

    now = time.time()
    corpus = load_corpus()
    rng = np.random.default_rng(1)
    ref, _ = corpus.draw("none", 150, rng)
    _, cur = corpus.draw("none", 60, rng)
    store = SqliteStore(tmp_path / "samples.db")
    store.add([SampleRecord(version="stable", prompt=t, output="ok: " + t, ts=now - 86400 * 2 + i, model="llama",
                            output_tokens=len(t), finish_reason="stop", conversation=f"s{i}")
               for i, t in enumerate(ref)])
    foreign = list(corpus.pools["foreign"][:40])
    store.add([SampleRecord(version="canary", prompt=t, output="ok: " + t, ts=now - 600 + i, model="llama",
                            output_tokens=len(t), finish_reason="length" if i % 3 == 0 else "stop",
                            conversation=f"c{i}")
               for i, t in enumerate(cur[:40] + foreign)])
    store.close()

    r = runner.invoke(app, ["drift", "check", "--version", "canary", "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "no_baseline"

    r = runner.invoke(app, ["baseline", "pin", "--version", "stable", "--since", "3d", "--until", "1d",
                            "--config", str(cfg), "--by", "alice"])
    assert r.exit_code == 0, r.output
    digest = r.output.split("pinned baseline ")[1].split()[0]
    assert len(digest) == 64 and "promote" in r.output
    r = runner.invoke(app, ["baseline", "promote", digest[:10], "--config", str(cfg), "--reason", "launch"])
    assert r.exit_code == 0 and "none -> " + digest[:12] in r.output, r.output
    r = runner.invoke(app, ["baseline", "list", "--config", str(cfg), "--json"])
    listed = json.loads(r.stdout)
    assert [(b["hash"], b["active"], b["n"], b["created_by"]) for b in listed] == [(digest, True, 150, "alice")]
    r = runner.invoke(app, ["baseline", "show", digest[:8], "--config", str(cfg)])
    shown = json.loads(r.stdout)
    assert shown["verified"] and shown["embedder_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert shown["dim"] == 384 and shown["fields"] == ["outputs", "prompts"]

    r = runner.invoke(app, ["drift", "check", "--version", "canary", "--config", str(cfg), "--json",
                            "--fail-on-drift"])
    assert r.exit_code == 1, r.output  # shifted → non-zero with --fail-on-drift
    report = json.loads(r.stdout)
    assert report["status"] == "ok" and "prompts" in report["shifted"] and "finish_reason" in report["shifted"]
    assert report["results"]["prompts"]["n_baseline"] == 150 and report["baseline_hash"] == digest
    assert report["examples"]["prompts"][0]["text"] in foreign

    out = tmp_path / "report.html"
    r = runner.invoke(app, ["drift", "report", "--version", "canary", "--out", str(out), "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "Drift of version canary" in page and "finish_reason" in page and "evidently" in page.lower()

    r = runner.invoke(app, ["baseline", "promote", "abcdef12", "--config", str(cfg)])
    assert r.exit_code == 2 and "no baseline" in r.output
    r = runner.invoke(app, ["drift", "check", "--version", "canry", "--config", str(cfg)])
    assert r.exit_code == 2 and "unknown version 'canry'" in r.output
