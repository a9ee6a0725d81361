"""How a sampled reply's checked tool calls are recorded in its stored output: one marker line per call.

Written by the sampling area (observer.sample.tool_calls), read by the quality area's `tool_call` live check:
the stored output stays text, and the marker cannot be confused with model text (the model would have to
produce the exact marker and a JSON object after it on its own line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

MARKER = "[[observer:tool_call "
_LINE = re.compile(r"^\[\[observer:tool_call (\{.*\})\]\]$", re.M)


def render(results: Sequence[Mapping[str, Any]]) -> str:
    """The marker lines appended to the stored output."""
    return "".join(f"\n{MARKER}{json.dumps(dict(r), ensure_ascii=False, separators=(',', ':'))}]]"
                   for r in results)


def read(output: str) -> list[dict[str, Any]]:
    """The checked tool calls recorded in a stored output (none: [])."""
    out = []
    for m in _LINE.finditer(output):
        try:
            value = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
