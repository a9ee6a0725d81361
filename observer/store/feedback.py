"""Users' feedback on answers (thumbs, ratings, regenerate, abandon), each event joined to the sampled response
it is about: stored once per event id, with the version that answered and the unit its events depend within
(the conversation, else the response itself).

A response is found by the id the engine gave it (`samples.response_id`) or by the trace its request carried
(`samples.traceparent`'s trace id): feedback on a response the observer did not sample has no version to count
for, and is refused by the ingest with a reason rather than guessed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

FeedbackKind = Literal["thumbs", "rating", "regenerate", "abandon"]
FEEDBACK_KINDS: tuple[FeedbackKind, ...] = ("thumbs", "rating", "regenerate", "abandon")


@dataclass(frozen=True)
class FeedbackRecord:
    """One user event on one answered response."""

    event_id: str
    version: str
    sample_id: int
    unit: str
    """The conversation key of the response, else `sample:<id>`: events of one unit are not independent."""
    answered: float
    """When the response was answered (the sample's ts)."""
    ts: float
    """When the user gave the event."""
    kind: FeedbackKind
    value: float | None
    negative: bool
    comment: str | None = None
    """Redacted before it is stored; never exported."""


@dataclass(frozen=True)
class Response:
    """A sampled response a feedback event can join: its sample, version, time and unit."""

    sample_id: int
    version: str
    ts: float
    unit: str


@runtime_checkable
class FeedbackStore(Protocol):
    """Where feedback lives (both sample stores)."""

    def add_feedback(self, events: Sequence[FeedbackRecord]) -> list[bool]:
        """Store events in one transaction; per event, False when its id was stored before (nothing written)."""
        ...

    def responses(self, *, response_ids: Collection[str], trace_ids: Collection[str]
                  ) -> tuple[dict[str, Response], dict[str, Response]]:
        """The sampled responses with these engine response ids, and with these trace ids (the newest each)."""
        ...

    def unit_feedback(self, units: Collection[str], *, since: float) -> dict[str, int]:
        """Events stored per unit with ts >= since (the flood bound)."""
        ...

    def stored_feedback_ids(self, ids: Collection[str]) -> set[str]:
        """The event ids among `ids` stored before (a retried batch's events)."""
        ...

    def feedback(self, version: str, *, since: float, until: float, limit: int) -> list[FeedbackRecord]:
        """A version's events with since <= ts < until on responses answered at or after `since`, oldest first."""
        ...

    def answered(self, version: str, *, since: float, until: float) -> int:
        """The version's sampled live responses (not golden replays) answered with since <= ts < until."""
        ...

    def judged_feedback(self, scorer: str, *, since: float, limit: int) -> list[tuple[bool, bool | None]]:
        """Per answer with feedback given since `since` and a `scorer` result: (the users passed it: no negative
        event, the scorer's pass or None for an undecided score), newest answers first, at most `limit`."""
        ...
