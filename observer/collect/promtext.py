"""Parser of the Prometheus text exposition format (0.0.4) and the OpenMetrics text subset vLLM emits."""

from __future__ import annotations

from dataclasses import dataclass, field

from observer.errors import ParseError

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One sample line: full sample name (e.g. `vllm:x_bucket`), sorted labels, value."""

    name: str
    labels: Labels
    value: float


@dataclass
class Family:
    """A metric family: name as given on # TYPE (or the sample name when untyped), type, help, samples."""

    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[Sample] = field(default_factory=list)


def parse(text: str) -> list[Family]:
    """Parse an exposition body; raise ParseError naming the first bad line."""
    raise ParseError("not implemented yet")
