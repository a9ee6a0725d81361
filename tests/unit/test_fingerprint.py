"""Observed version identity (issue 18 item 1): the hashes, the two-window check on a real SQLite store,
the exported gauges, and `observer fingerprint`."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from observer import conventions as names
from observer.analyse.fingerprint import FingerprintCollector, FingerprintWatch, Window
from observer.cli.main import app
from observer.config.fleet import VersionSpec
from observer.config.sampling import FingerprintSpec
from observer.conventions import fingerprint as fp
from observer.fleetview import LiveFleet
from observer.sample.capture import Capture, to_record
from observer.store.base import SampleRecord
from observer.store.sqlite import SqliteStore
from tests.support.scripted_openai import json_body

OLD, NEW = "You are a support agent for ACME. Answer briefly.", "You are a pirate. Answer in rhymes."


def chat(system: str | None, **params: object) -> dict[str, object]:
    messages = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": "where is my order?"}]
    return {"model": "m", "messages": messages, **params}


def test_template_hash_follows_system_and_developer_text_only() -> None:
    a = fp.request_fingerprint(chat(OLD, temperature=0.2), chat=True)
    # Other users' turns, max_tokens, seed, stream, user: the same build.
    b = fp.request_fingerprint({**chat(OLD, temperature=0.2, max_tokens=9, seed=4, stream=True, user="u1"),
                                "messages": [{"role": "system", "content": OLD},
                                             {"role": "user", "content": "something else"}]}, chat=True)
    assert a == b
    assert fp.request_fingerprint(chat(NEW, temperature=0.2), chat=True)[0] != a[0]
    assert fp.request_fingerprint(chat(OLD, temperature=0.7), chat=True) == (a[0], fp.sampling_hash(
        {"temperature": 0.7}))
    # A typed-parts system message hashes like the same text as a string; a developer message counts too.
    parts = {"model": "m", "messages": [{"role": "system", "content": [{"type": "text", "text": OLD}]}]}
    assert fp.request_fingerprint(parts, chat=True)[0] == a[0] == fp.template_hash([OLD])
    dev = {"messages": [{"role": "developer", "content": OLD}]}
    assert fp.request_fingerprint(dev, chat=True)[0] == a[0]
    # No system prompt, a completion, or malformed messages: the empty-template hash, never an exception.
    assert fp.request_fingerprint(chat(None), chat=True)[0] == fp.NO_TEMPLATE
    assert fp.request_fingerprint({"prompt": "x", "temperature": 0.2}, chat=False) == (fp.NO_TEMPLATE, a[1])
    assert fp.messages_template_hash([None, 3, {"role": 5}]) == fp.NO_TEMPLATE
    assert fp.messages_template_hash("not a list") == fp.NO_TEMPLATE
    # A per-request chat template is part of the template.
    assert fp.request_fingerprint({**chat(OLD), "chat_template": "{{ x }}"}, chat=True)[0] != a[0]


def test_sampling_hash_is_canonical() -> None:
    assert fp.sampling_hash({"temperature": 1.0}) == fp.sampling_hash({"temperature": 1})
    assert fp.sampling_hash({"top_p": 0.9, "temperature": 0.2}) == fp.sampling_hash({"temperature": 0.2,
                                                                                     "top_p": 0.9})
    assert fp.sampling_hash({"temperature": None, "max_tokens": 5}) == fp.DEFAULT_SAMPLING
    assert fp.sampling_hash({"stop": ["\n"]}) != fp.DEFAULT_SAMPLING
    assert fp.sampling_hash({"temperature": float("nan")}) == fp.sampling_hash({"temperature": float("nan")})
    for h in (fp.NO_TEMPLATE, fp.DEFAULT_SAMPLING, fp.sampling_hash({"n": 2})):
        assert len(h) == fp.HASH_HEX and int(h, 16) >= 0  # a bounded label value, never text


def test_proxy_capture_carries_both_hashes() -> None:
    request = chat(OLD, temperature=0.2)
    record = to_record(Capture(version="stable", kind="chat", request=json.dumps(request).encode(),
                               response=json_body(request, chat=True), content_type="application/json", ts=5.0,
                               ttft_s=0.1, latency_s=0.2))
    assert (record.template_hash, record.sampling_hash) == fp.request_fingerprint(request, chat=True)


def test_window_needs_enough_samples_and_a_majority() -> None:
    assert Window({("a", "s"): 19}, 20, 0.5).dominant() is None
    assert Window({("a", "s"): 20}, 20, 0.5).dominant() == ("a", "s")
    assert Window({("a", "s"): 10, ("b", "s"): 10, ("c", "s"): 10}, 20, 0.5).dominant() is None
    assert Window({}, 1, 0.5).top(3) == []
    assert [p for p, _ in Window({("a", "s"): 5, ("b", "s"): 9, ("c", "s"): 1}, 1, 0.5).top(2)] == \
        [("b", "s"), ("a", "s")]


def _fleet(declared_template: str | None = None) -> LiveFleet:
    return LiveFleet([VersionSpec(name="stable", role="stable"),
                      VersionSpec(name="canary", role="canary", prompt_template_hash=declared_template)])


def _fill(store: SqliteStore, version: str, system: str, *, start: float, n: int, temperature: float = 0.2) -> None:
    template, sampling = fp.request_fingerprint(chat(system, temperature=temperature), chat=True)
    store.add([SampleRecord(version=version, prompt=f"p{i}", output="o", ts=start + i, template_hash=template,
                            sampling_hash=sampling) for i in range(n)])


def _scrape(watch: FingerprintWatch) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    registry = CollectorRegistry()
    registry.register(FingerprintCollector(watch))
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_rollback_that_kept_the_new_template_is_seen_in_one_check(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    spec = FingerprintSpec(window_seconds=600, reference_seconds=3600, min_samples=20)
    watch = FingerprintWatch(_fleet(), store, spec)
    now = 100_000.0
    # Both versions served OLD for the reference hour; then canary's weights were rolled back, NEW kept.
    for version in ("stable", "canary"):
        _fill(store, version, OLD, start=now - 3000, n=200)
    _fill(store, "stable", OLD, start=now - 500, n=100)
    _fill(store, "canary", NEW, start=now - 500, n=100)
    store.add([SampleRecord(version="canary", prompt="x", output="y", ts=now - 10)])  # no hashes: not counted
    results = watch.check(now)
    assert results["canary"].changed() == {"template": True, "sampling": False}
    assert results["stable"].changed() == {"template": False, "sampling": False}
    got = _scrape(watch)
    changed = got[names.FINGERPRINT_CHANGED]
    assert changed[(("part", "template"), ("version", "canary"))] == 1.0
    assert changed[(("part", "template"), ("version", "stable"))] == 0.0
    new_t, new_s = fp.request_fingerprint(chat(NEW, temperature=0.2), chat=True)
    assert got[names.FINGERPRINT_SHARE][(("sampling_hash", new_s), ("template_hash", new_t),
                                         ("version", "canary"))] == 1.0
    assert got[names.FINGERPRINT_SAMPLES][(("version", "canary"), ("window", "current"))] == 100.0
    assert names.FINGERPRINT_MISMATCH not in got or not got[names.FINGERPRINT_MISMATCH]  # nothing declared
    # Once the new template is the reference's too, the signal clears.
    assert watch.check(now + 3600 + 600)["canary"].changed() in ({}, {"template": False, "sampling": False})
    store.close()


def test_declared_hash_mismatch_and_match(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    now = 100_000.0
    _fill(store, "canary", NEW, start=now - 100, n=50)
    spec = FingerprintSpec(window_seconds=600, reference_seconds=3600, min_samples=20)
    declared_old = fp.template_hash([OLD])
    got = FingerprintWatch(_fleet(declared_old), store, spec).check(now)["canary"]
    assert got.mismatch() == {"template": True} and got.changed() == {}  # no reference window yet
    full = __import__("hashlib").sha256(NEW.encode()).hexdigest()  # a full SHA-256 declared matches too
    assert FingerprintWatch(_fleet(full), store, spec).check(now)["canary"].mismatch() == {"template": False}
    store.close()


def test_top_k_bounds_the_exported_pairs(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    now = 100_000.0
    for i in range(30):  # thirty different system prompts (e.g. per-tenant): at most top_k series
        _fill(store, "stable", f"tenant {i}", start=now - 100, n=2)
    watch = FingerprintWatch(_fleet(), store, FingerprintSpec(top_k=3))
    watch.check(now)
    shares = _scrape(watch)[names.FINGERPRINT_SHARE]
    assert len(shares) == 3 and all(v == 2 / 60 for v in shares.values())
    assert watch.results["stable"].changed() == {}  # no majority: no fingerprint, no claim
    store.close()


def test_cli_prints_the_hashes_the_observer_computes(tmp_path: Path) -> None:
    system = tmp_path / "system.txt"
    system.write_text(OLD, encoding="utf-8")
    result = CliRunner().invoke(app, ["fingerprint", "--system-file", str(system), "--sampling",
                                      '{"temperature": 0.2, "max_tokens": 64}'])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"prompt_template_hash: {fp.template_hash([OLD])}",
        f"sampling_defaults_hash: {fp.sampling_hash({'temperature': 0.2})}"]
    bad = CliRunner().invoke(app, ["fingerprint", "--sampling", "[1, 2]"])
    assert bad.exit_code == 2 and "JSON object" in bad.output
