"""The configuration example of docs/sampling.md is valid config (docs that run)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from observer.config import parse_config
from observer.sample.checks import check_versions
from observer.sample.redact import Redactor

DOC = Path(__file__).parents[2] / "docs" / "sampling.md"


def test_config_example_validates_against_the_example_fleet() -> None:
    block = re.search(r"```yaml\n(sampling:.*?)```", DOC.read_text(), re.S)
    assert block is not None
    example = yaml.safe_load(block.group(1))
    base = yaml.safe_load((DOC.parents[1] / "deploy" / "observer.yaml").read_text())
    base["sampling"] = example["sampling"]
    config = parse_config(yaml.safe_dump(base), environ={})
    check_versions(config)
    assert config.sampling.fraction_for("canary") == 0.5
    redactor = Redactor.build(kinds=config.sampling.redaction.kinds, patterns=config.sampling.redaction.patterns)
    assert redactor.redact("EMP-123456").text == "<EMPLOYEE_ID>"
