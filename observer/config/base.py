"""The base of every config spec model: strict (unknown keys refused), immutable."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A section of the YAML config. Unknown keys are refused; instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def compiled_pattern(pattern: str, what: str = "pattern") -> str:
    """`pattern` unchanged if it compiles as a Python regular expression, else ValueError naming `what`."""
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{what} does not compile ({pattern!r}): {e}") from e
    return pattern
