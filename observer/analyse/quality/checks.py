"""The quality section's one validation: everything building the area can refuse, found without a network.

`observer check-config` reports what `validate` raises, and the quality build calls it and builds from what it
loaded (golden sets, judge prompts, rubrics, anchors), so the two cannot disagree about a config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from observer.analyse.pairs import resolve_pairs
from observer.analyse.quality.calibrate import LabelledItem, load_labels
from observer.analyse.quality.golden import GoldenSet, discover
from observer.analyse.quality.prompts import JudgePrompt, Rubric, load_prompt, load_rubrics
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError


@dataclass(frozen=True)
class JudgeInputs:
    """What a configured judge needs from files: its prompt, rubrics and (optionally) anchors."""

    prompt: JudgePrompt
    rubrics: Mapping[str, Rubric]
    pairwise_prompt: JudgePrompt | None  # shadow replay's pairwise judge
    anchors: Sequence[LabelledItem] | None  # reliability's labelled anchor set


@dataclass(frozen=True)
class QualityInputs:
    golden: Sequence[GoldenSet]
    judge: JudgeInputs | None  # None: no judge configured


def _known(rubrics: Mapping[str, Rubric]) -> str:
    return ", ".join(sorted(rubrics)) or "none"


def check_rubrics(golden: Sequence[GoldenSet], rubrics: Mapping[str, Rubric]) -> None:
    """Every rubric a judged golden item names must exist (checked only when a judge is configured)."""
    for gs in golden:
        for item in gs.items:
            for a in item.assertions:
                if a.type == "judge" and (name := a.rubric or item.rubric) not in rubrics:
                    raise ConfigError(f"item {item.id!r} uses unknown rubric {name!r}; known: {_known(rubrics)}",
                                      source=gs.path, line=item.line)


def judge_inputs(config: ObserverConfig, golden: Sequence[GoldenSet]) -> JudgeInputs | None:
    """Load and cross-check the judge's files; None when `quality.judge` is not set."""
    spec = config.quality
    j = spec.judge
    if j.url is None or j.model is None:
        return None
    prompt, rubrics = load_prompt(j.prompt_path), load_rubrics(j.rubric_dir)
    check_rubrics(golden, rubrics)
    if spec.live.judge_fraction > 0 and spec.live.judge_rubric not in rubrics:
        raise ConfigError(f"unknown rubric {spec.live.judge_rubric!r}; known: {_known(rubrics)}",
                          path="quality.live.judge_rubric")
    pairwise = None
    if spec.shadow.enabled and spec.shadow.judge:
        if spec.shadow.pairwise.rubric not in rubrics:
            raise ConfigError(f"unknown rubric {spec.shadow.pairwise.rubric!r}; known: {_known(rubrics)}",
                              path="quality.shadow.pairwise.rubric")
        pairwise = load_prompt(spec.shadow.pairwise.prompt_path)
    anchors = load_labels(spec.reliability.anchors_path) if spec.reliability.anchors_path else None
    return JudgeInputs(prompt=prompt, rubrics=rubrics, pairwise_prompt=pairwise, anchors=anchors)


def check_shadow(config: ObserverConfig) -> None:
    """Shadow replay needs the sample store; a configured version of a pair needs a URL to be asked at, and a
    target must name a version (unless discovery may still bring it)."""
    spec = config.quality.shadow
    if not spec.enabled:
        return
    if not config.sampling.enabled:
        raise ConfigError("shadow replay reads stable's sampled prompts from the sample store: turn sampling on "
                          "(sampling.enabled) or quality.shadow off", path="quality.shadow.enabled")
    by_name = {v.name: v for v in config.fleet.versions}
    for p in resolve_pairs(config):
        for name in (p.canary, p.baseline) if spec.baseline == "replay" else (p.canary,):
            if not (spec.targets.get(name) or by_name[name].openai):
                raise ConfigError(f"version {name!r} has no URL to replay prompts to: set "
                                  f"quality.shadow.targets.{name} (a shadow replica) or its openai URL",
                                  path=f"quality.shadow.targets.{name}")
    discovering = config.discovery.kubernetes is not None and bool(config.discovery.kubernetes.models)
    unknown = sorted(set(spec.targets) - set(by_name))
    if unknown and not discovering:
        raise ConfigError(f"unknown version(s) {', '.join(unknown)}; the fleet has: {', '.join(sorted(by_name))}",
                          path="quality.shadow.targets")


def named_files(config: ObserverConfig) -> list[tuple[str, str, str]]:
    """(key, path, what it is) of every file the quality area will read with this config; a directory's
    description ends in "directory"."""
    spec = config.quality
    files = [(f"quality.golden_dirs.{i}", d, "golden-set directory") for i, d in enumerate(spec.golden_dirs)]
    if spec.judge.url is not None:
        files += [("quality.judge.prompt_path", spec.judge.prompt_path, "judge prompt"),
                  ("quality.judge.rubric_dir", spec.judge.rubric_dir, "rubric directory")]
        if spec.shadow.enabled and spec.shadow.judge:
            files.append(("quality.shadow.pairwise.prompt_path", spec.shadow.pairwise.prompt_path, "pairwise prompt"))
        if spec.reliability.anchors_path:
            files.append(("quality.reliability.anchors_path", spec.reliability.anchors_path, "anchor set"))
    return files


def check_files(config: ObserverConfig) -> None:
    """Every file the area reads exists where the process will look, found before the first golden replay."""
    for key, path, what in named_files(config):
        p = Path(path)
        if p.is_dir() if what.endswith("directory") else p.is_file():
            continue
        raise ConfigError(f"{what} {str(p.absolute())!r} does not exist: mount it there (a ConfigMap or volume), "
                          f"name an absolute path, or remove the key to use what the package ships; a relative "
                          f"path is read from the config file's directory", path=key)


def validate(config: ObserverConfig) -> QualityInputs | None:
    """The quality area's inputs, checked; None when the area is off. ConfigError names the key or file line."""
    if not config.quality.enabled:
        return None
    check_files(config)
    golden = discover(config.quality.golden_dirs, names=config.quality.golden_sets)
    judge = judge_inputs(config, golden)
    check_shadow(config)
    return QualityInputs(golden=golden, judge=judge)
