"""Configs that building the observer refuses, one per reason a build can raise ConfigError, each with the words
its message carries. `tests/unit/test_validate_once.py` checks that `observer check-config` reports every one
(the bench `bench/topology.py` counts the misses); the architecture test keeps `raise ConfigError` out of the
builds, so a new refusal has to be written in an area's validation function, where check-config sees it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from observer.config import ObserverConfig, parse_config

ROOT = Path(__file__).resolve().parents[2]
JUDGE = {"url": "http://127.0.0.1:9/v1", "model": "j", "prompt_path": str(ROOT / "evals" / "judge_prompt.yaml"),
         "rubric_dir": str(ROOT / "evals" / "rubrics")}


@dataclass(frozen=True)
class BadConfig:
    name: str
    message: str  # words the refusal's message carries, in check-config and in the build alike
    data: dict[str, Any]


def _fleet(canary_url: str | None = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    return {"versions": [{"name": "stable", "role": "stable", "openai": "http://127.0.0.1:9/v1"},
                         {"name": "canary", "role": "canary", **({"openai": canary_url} if canary_url else {})}]}


def corpus(tmp: Path) -> list[BadConfig]:
    """Every build-time refusal, as a config; files it needs are written under `tmp`."""
    store = {"store": {"path": str(tmp / "s.db")}}
    golden = str(ROOT / "golden_sets")
    judged = tmp / "judged"
    judged.mkdir(exist_ok=True)
    (judged / "j.yaml").write_text("items:\n  - {id: a, prompt: q, assertions: [{type: judge, rubric: nope}]}\n")

    def q(**quality: Any) -> dict[str, Any]:
        return {"fleet": _fleet(), "sampling": store, "quality": {"golden_dirs": [golden], **quality}}

    return [
        BadConfig("live judge rubric", "unknown rubric 'no-such-rubric'",
                  q(judge=JUDGE, live={"judge_fraction": 0.1, "judge_rubric": "no-such-rubric"})),
        BadConfig("pairwise rubric", "unknown rubric 'nope'",
                  q(judge=JUDGE, shadow={"enabled": True, "pairwise": {"rubric": "nope"}})),
        BadConfig("golden item rubric", "uses unknown rubric 'nope'",
                  {"fleet": _fleet(), "quality": {"golden_dirs": [str(judged)], "judge": JUDGE}}),
        BadConfig("judge prompt file", "judge_prompt_missing.yaml",
                  q(judge={**JUDGE, "prompt_path": str(tmp / "judge_prompt_missing.yaml")})),
        BadConfig("rubric dir", "no_rubrics_here", q(judge={**JUDGE, "rubric_dir": str(tmp / "no_rubrics_here")})),
        BadConfig("anchors", "anchors_missing.jsonl",
                  q(judge=JUDGE, reliability={"anchors_path": str(tmp / "anchors_missing.jsonl")})),
        BadConfig("golden dir", "does not exist",
                  {"fleet": _fleet(), "quality": {"golden_dirs": [str(tmp / "nodir")]}}),
        BadConfig("golden set name", "golden set(s) nosuch not found", q(golden_sets=["nosuch"])),
        BadConfig("shadow without the store", "turn sampling on",
                  {"fleet": _fleet(), "sampling": {"enabled": False},
                   "quality": {"golden_dirs": [golden], "shadow": {"enabled": True}}}),
        BadConfig("shadow without a URL", "version 'canary' has no URL to replay prompts to",
                  {"fleet": _fleet(canary_url=None), "sampling": store,
                   "quality": {"golden_dirs": [golden], "shadow": {"enabled": True}}}),
        BadConfig("shadow target", "unknown version(s) ghost",
                  q(shadow={"enabled": True, "targets": {"ghost": "http://y/v1"}})),
        BadConfig("sampling override", "version 'blue' is not in fleet.versions",
                  {"fleet": _fleet(), "sampling": {**store, "versions": {"blue": {"fraction": 1}}}}),
        BadConfig("proxy without upstream", "has no openai URL",
                  {"fleet": _fleet(canary_url=None),
                   "sampling": {**store, "versions": {"canary": {"listen": "127.0.0.1:0"}}}}),
        BadConfig("canary pair", "unknown version 'ghost'",
                  {"fleet": _fleet(), "canary": {"pairs": [{"canary": "ghost", "baseline": "stable"}]}}),
        BadConfig("kubeconfig", "cannot set up the Kubernetes API client",
                  {"discovery": {"kubernetes": {"kubeconfig": str(tmp / "kubeconfig_missing"),
                                                "models": [{"name": "llm", "selector": {"app": "llm"}}]}}}),
    ]


def parse(bad: BadConfig) -> ObserverConfig:
    return parse_config(yaml.safe_dump(bad.data), environ={})
