"""The base of every config spec model: strict (unknown keys refused), immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A section of the YAML config. Unknown keys are refused; instances are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
