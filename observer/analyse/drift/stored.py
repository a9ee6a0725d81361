"""Drift checks as stored in the shared store: an ungated report, or why the check could not run.

Every replica reads them back in commit order and gates them itself (DriftState.record), so replicas that
read the same feed hold the same streaks and export the same drift state. Non-finite floats (a field
without data has NaN statistics) are stored as the strings "NaN" / "Infinity" / "-Infinity", which JSON
and PostgreSQL's jsonb accept, and read back as floats.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from observer.analyse.drift.state import DriftReport

FORMAT = 1
"""Stored body format; a body of another format is skipped with a log line, never guessed at."""

_REPORT = TypeAdapter(DriftReport)


@dataclass(frozen=True)
class CheckFailed:
    """A check that could not run (a broken baseline, a down embedder, the store): every replica records the
    version's drift as `error`, keeping its last results, as the replica that ran it did."""

    version: str
    reason: str
    message: str
    checked_at: float


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def encode(outcome: DriftReport | CheckFailed) -> dict[str, Any]:
    """The stored body of one check's outcome."""
    if isinstance(outcome, CheckFailed):
        return {"format": FORMAT, "failed": _plain(outcome)}
    return {"format": FORMAT, "report": _plain(outcome)}


def decode(body: Mapping[str, Any]) -> DriftReport | CheckFailed:
    """A stored body back; ValueError naming what is wrong when it cannot be read."""
    if body.get("format") != FORMAT:
        raise ValueError(f"stored drift report of format {body.get('format')!r}; this observer reads {FORMAT}")
    try:
        if "failed" in body:
            f = body["failed"]
            return CheckFailed(version=str(f["version"]), reason=str(f["reason"]), message=str(f["message"]),
                               checked_at=float(f["checked_at"]))
        report: DriftReport = _REPORT.validate_python(body["report"])
        return report
    except (KeyError, TypeError, ValidationError) as e:
        raise ValueError(f"stored drift report not readable: {e}") from e
