"""VERSION_INFO: one series per (version, served model) with a fingerprint of what serves."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.canary.inventory import VersionInfoCollector, inventory
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
