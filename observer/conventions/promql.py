"""The one PromQL selector builder: rules, dashboards, Argo templates and the Prometheus source use it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def selector(metric: str, matchers: Mapping[str, str] | None = None, *, regex: Mapping[str, str] | None = None,
             exclude: Mapping[str, str] | None = None) -> str:
    """A PromQL selector `metric{a="x",b=~"y|z",c!="w"}` (`metric` may be "" for the label set alone, to
    append to a name built elsewhere); values escaped as PromQL string literals."""
    parts = [matcher(k, "=", v) for k, v in (matchers or {}).items()]
    parts += [matcher(k, "=~", v) for k, v in (regex or {}).items()]
    parts += [matcher(k, "!=", v) for k, v in (exclude or {}).items()]
    return f"{metric}{{{','.join(parts)}}}" if parts else metric


def matcher(label: str, op: str, value: str) -> str:
    """One label matcher `label<op>"value"` (op `=`, `=~` or `!=`), the value escaped as a PromQL string."""
    return f'{label}{op}"{escape(value)}"'


def one_of(values: Sequence[str]) -> str:
    """A regex alternation matching exactly these label values."""
    return "|".join(re.escape(v) for v in values)


def escape(value: str) -> str:
    """`value` as the inside of a double-quoted PromQL string."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
