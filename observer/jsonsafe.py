"""JSON that can never carry NaN or Infinity: one encoder for every API body, report and CLI `--json`."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from enum import Enum
from typing import Any


def finite(x: float | None) -> float | None:
    """`x` if finite, else None (JSON and gauges must never carry NaN/Infinity)."""
    return x if x is not None and math.isfinite(x) else None


def strict(value: Any) -> Any:
    """`value` made JSON-safe: dataclasses and enums unpacked, non-finite floats replaced by None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: strict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return strict(value.value)
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, Mapping):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [strict(v) for v in value]
    return str(value)


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `strict(value)`; allow_nan=False, so a non-finite float that slipped through raises."""
    return json.dumps(strict(value), allow_nan=False, **kwargs)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def loads_strict(text: str) -> Any:
    """Parse exactly one JSON value, refusing NaN/Infinity and duplicate keys (ValueError)."""
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
