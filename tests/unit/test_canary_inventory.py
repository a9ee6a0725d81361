"""VERSION_INFO: one series per (version, served model) with a fingerprint of what serves."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.canary.inventory import VersionInfo, VersionInfoCollector, inventory
from observer.config import parse_config
from observer.fleetview import LiveFleet

CONFIG = """
fleet:
  versions:
    - {name: stable, role: stable, prompt_template_hash: tpl-a, sampling_defaults_hash: samp-1}
    - {name: canary, role: canary, prompt_template_hash: tpl-b}
    - {name: unseen}
"""


class Served:
    """A stand-in for the signal store's served_models (contract 2)."""

    def __init__(self, served: dict[str, dict[str, dict[str, str]]]) -> None:
        self.served = served

    def served_models(self, version: str) -> dict[str, dict[str, str]]:
        return self.served.get(version, {})


def _series(config_text: str, served: Served) -> list[dict[str, str]]:
    registry = CollectorRegistry()
    registry.register(VersionInfoCollector(LiveFleet(parse_config(config_text, environ={}).fleet.versions), served))
    fams = text_string_to_metric_families(generate_latest(registry).decode())
    return [s.labels for f in fams if f.name == names.VERSION_INFO for s in f.samples]


def test_fingerprints_show_template_rollback_and_old_pods() -> None:
    served = Served({"stable": {"llm": {"max_model_len": "8192"}},
                     "canary": {"llm": {"max_model_len": "8192"}, "llm-old": {"max_model_len": "4096"}}})
    series = _series(CONFIG, served)
    by = {(s[names.VERSION], s[names.MODEL]): s for s in series}
    assert set(by) == {("stable", "llm"), ("canary", "llm"), ("canary", "llm-old")}  # unseen: no series
    assert by[("stable", "llm")][names.PROMPT_TEMPLATE_HASH] == "tpl-a"
    assert by[("stable", "llm")][names.MAX_MODEL_LEN] == "8192"
    # same model, other prompt template → other fingerprint
    assert by[("stable", "llm")][names.FINGERPRINT] != by[("canary", "llm")][names.FINGERPRINT]
    # two fingerprints for one version: old pods still serving
    assert len({s[names.FINGERPRINT] for s in series if s[names.VERSION] == "canary"}) == 2


def test_fingerprint_is_stable_and_depends_on_every_fact() -> None:
    cfg = parse_config(CONFIG, environ={})
    a = inventory(LiveFleet(cfg.fleet.versions), Served({"stable": {"llm": {"max_model_len": "8192"}}}))[0]
    b = inventory(LiveFleet(cfg.fleet.versions), Served({"stable": {"llm": {"max_model_len": "8192"}}}))[0]
    c = inventory(LiveFleet(cfg.fleet.versions), Served({"stable": {"llm": {"max_model_len": "4096"}}}))[0]
    assert a.fingerprint == b.fingerprint != c.fingerprint and len(a.fingerprint) == 12
    assert inventory(LiveFleet(cfg.fleet.versions), None) == []


def test_parity_names_each_fact_the_fleet_source_leaves_out() -> None:
    from observer.analyse.canary.results import ArmData, PairCounts
    from observer_dev.parity import fields_missing

    own = ArmData(requests={"stop": 1.0}, replicas=2, environment={"gpu_model": "H100"}, note="x",
                  paired={"judge": PairCounts(1, 0, 0, 0, 0)})
    assert fields_missing(own, ArmData(requests={"stop": 1.0})) == ["replicas", "environment", "paired"]
    assert fields_missing(own, own) == []


def test_the_tokenizer_probe_hashes_token_ids_and_names_what_it_cannot_say() -> None:
    from observer.analyse.signals.identity import UNKNOWN, combined, probe_body, tokenize_url, tokenizer_hash

    assert tokenize_url("http://10.0.0.7:8000/metrics") == "http://10.0.0.7:8000/tokenize"
    body = probe_body("llm")
    assert body["model"] == "llm" and body["add_generation_prompt"] is True and len(body["messages"]) == 2
    h = tokenizer_hash({"count": 3, "tokens": [2, 105, 2364]})
    assert len(h) == 12 and h == tokenizer_hash({"tokens": [2, 105, 2364]}) != tokenizer_hash({"tokens": [2, 105]})
    for bad in ({"detail": "Not Found"}, {"tokens": []}, {"tokens": ["a"]}, [1, 2], None):
        assert tokenizer_hash(bad) == UNKNOWN
    assert combined([h, h, UNKNOWN]) == h and combined([UNKNOWN]) == UNKNOWN and combined([]) == UNKNOWN
    assert combined([h, "000000000000"]) == "mixed"


def test_the_fingerprint_covers_the_server_side_facts_only_where_the_engine_reports_them() -> None:
    base = VersionInfo(version="v", model="m", max_model_len="2048", prompt_template_hash="",
                       sampling_defaults_hash="")
    assert base.fingerprint == VersionInfo(**{**base.__dict__, "tokenizer": "unknown"}).fingerprint
    changed = {VersionInfo(**{**base.__dict__, k: x}).fingerprint
               for k, x in (("tokenizer", "aaa"), ("tokenizer", "bbb"), ("root", "/models/m"),
                            ("engine_args", "block_size=16"))}
    assert len(changed) == 4 and base.fingerprint not in changed


def test_prompts_near_the_context_limit_are_a_share_over_a_named_bucket_edge() -> None:
    from observer.analyse.signals.pressure import near_limit
    from observer.collect.model import Histogram

    edges = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)
    counts = (0, 0, 0, 0, 0, 0, 10, 40, 60, 80, 95, 99, 100)  # cumulative, +Inf last
    h = Histogram(bounds=edges, cumulative=tuple(float(c) for c in counts), sum=0.0, count=100.0)
    assert near_limit(h, 8192) == (5000.0, 0.01)   # 0.9 × 8192 = 7373: the edge at 5000
    assert near_limit(h, 2048) == (1000.0, 0.2)   # 0.9 × 2048 = 1843: the edge at 1000
    assert near_limit(h, 1) is None  # no edge at or under 0.9 tokens
    few = Histogram(bounds=edges, cumulative=tuple(float(c // 10) for c in counts), sum=0.0, count=10.0)
    assert near_limit(few, 8192) is None  # ten prompts are no trend
