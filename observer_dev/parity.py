"""Fleet-mode parity: which ArmData facts the own source gives that the Prometheus source does not.

Both sources must hand the judge the same facts (the fairness checks and paired comparisons run only on what
is there), so a fact the own source fills and Prometheus leaves empty is a check fleet mode silently skips.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from observer.analyse.canary.results import ArmData

# Explanations, not facts: they differ by design (the source's own words).
TEXT_FIELDS = frozenset({"note", "paired_note"})


def _filled(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, dict | tuple | list) or hasattr(value, "keys"):
        return len(value) > 0
    return True


def fields_missing(own: ArmData, fleet: ArmData) -> list[str]:
    """The ArmData fields `own` fills and `fleet` leaves empty (None, or an empty mapping or tuple)."""
    return [f.name for f in dataclasses.fields(ArmData) if f.name not in TEXT_FIELDS
            and _filled(getattr(own, f.name)) and not _filled(getattr(fleet, f.name))]
