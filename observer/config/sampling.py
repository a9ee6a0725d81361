"""Live output sampling, mirror ingest, sample store and redaction (issue 3). Owned by that area; the root config includes it."""

from __future__ import annotations

from pydantic import Field  # noqa: F401

from observer.config.base import Spec


class SamplingSpec(Spec):
    """Live output sampling, mirror ingest, sample store and redaction (issue 3)."""

    enabled: bool = Field(True, description="Turn this area on or off.")
