"""Deterministic YAML text for generated files: key order kept, multi-line strings as literal blocks."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes multi-line strings as `|` blocks and never emits aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(data: Any, *, width: int = 1000) -> str:
    """YAML text of plain data (dicts keep their insertion order; lines fold past `width`)."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=width,
                     default_flow_style=False)
