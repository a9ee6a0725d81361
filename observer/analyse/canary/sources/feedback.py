"""Users' feedback on one arm's sampled answers over the window, read from the sample store: totals, the
conversations the events came from, and (negatives, events) per slice by when users gave them. Both arms are
cut on the same slice edges (the window and step decide them), so the slice test pairs them slice by slice."""

from __future__ import annotations

import math

from observer.analyse.canary.results import FeedbackWindow
from observer.analyse.signals import MAX_SLICES
from observer.errors import StoreError
from observer.store.feedback import FeedbackStore

MAX_EVENTS = 200_000
"""Most events of one arm's window read per look (a bound on memory and time; said in the result when hit)."""


class StoreFeedback:
    """A FeedbackReader over the sample store."""

    def __init__(self, store: FeedbackStore, *, max_events: int = MAX_EVENTS) -> None:
        self.store = store
        self.max_events = max_events

    def window(self, version: str, *, since: float, now: float, step: float) -> FeedbackWindow:
        # Past MAX_SLICES slices, the newest MAX_SLICES of them: coarser slices would pool a step's sparse events
        # into a handful of units (a game day's minute of events in a compressed hour-long window read as 4), and
        # the slices with events are the test's units. Both arms are read with the same since and now.
        late = now - since > step * MAX_SLICES
        if late:
            since = now - step * MAX_SLICES
        try:
            events = self.store.feedback(version, since=since, until=now, limit=self.max_events)
            responses = self.store.answered(version, since=since, until=now)
        except StoreError as err:  # the metric says nodata with the reason; the rest of the verdict stands
            return FeedbackWindow(events=0, negatives=0, responses=0, units=0, error=str(err))
        # On the clock's grid (multiples of `step`), not from `since`: a later look with the same events puts
        # each in the same slice (a grid moving with the window re-cut bursts of events at every look). The
        # first slice is the part of its grid slice inside the window.
        base = math.floor(since / step)
        slices = [[0, 0] for _ in range(max(0, math.floor(now / step) - base))]
        for e in events:
            i = math.floor(e.ts / step) - base
            if 0 <= i < len(slices):
                slices[i][0] += int(e.negative)
                slices[i][1] += 1
        notes = [f"only the first {self.max_events} events of the window read"] if len(events) >= self.max_events \
            else []
        if late:
            notes.append(f"the newest {MAX_SLICES} slices of the window read")
        return FeedbackWindow(events=len(events), negatives=sum(e.negative for e in events),
                              responses=responses,
                              units=len({e.unit for e in events}),
                              slices=tuple((neg, n) for neg, n in slices), note="; ".join(notes), truncated=late)
