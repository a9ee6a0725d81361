"""One runner for every game-day rig.

A scenario is a row of its rig's catalogue (observer_dev.gameday.scenarios.Catalogue); a rig is a context manager
that starts what its rows run against once and plays one row at a time. `play` picks the rows (an unknown name
costs nothing: it is refused before anything starts), starts the rig, plays each row in it, and turns a row that
could not run into a failed row so that the rest still run. Adding a scenario is adding a row to a catalogue;
adding a rig is adding a line to RIGS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import httpx
from rich.console import Console

from observer_dev.gameday import SingleRig, print_report, single_rig
from observer_dev.gameday.cluster import CLUSTER, ClusterRig, cluster_rig, print_cluster
from observer_dev.gameday.primitive_scenarios import PRIMITIVES, PrimitiveRig, primitive_rig, print_primitives
from observer_dev.gameday.real import REAL, RealRig, real_rig
from observer_dev.gameday.scenarios import FULL, SHORT, SINGLE, Catalogue, GamedayError, Named, Plan, Report

S = TypeVar("S", bound=Named)
R = TypeVar("R")
S_contra = TypeVar("S_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class Rig(Protocol[S_contra, R_co]):
    """What a started rig does with a row."""

    def play(self, scenario: S_contra) -> R_co:
        """Play one row; GamedayError (or an HTTP error) when it cannot."""

    def could_not_run(self, scenario: S_contra, reason: str) -> R_co:
        """The failed row of a scenario that could not run."""


def play_rows(catalogue: Catalogue[S], rig: Callable[[Plan], AbstractContextManager[Rig[S, R]]], *,
              short: bool = False, only: Sequence[str] | None = None) -> list[R]:
    """Play the chosen rows of `catalogue` in one rig started for them; GamedayError if a name is unknown or the
    rig cannot start."""
    chosen = catalogue.choose(only, short=short)
    rows: list[R] = []
    with rig(SHORT if short else FULL) as playing:
        for s in chosen:
            try:
                rows.append(playing.play(s))
            except (GamedayError, httpx.HTTPError) as e:
                rows.append(playing.could_not_run(s, f"could not run: {e}"))
    return rows


class Kind(StrEnum):
    """The rigs a game day can play in."""

    SINGLE = "single"  # the simulator, one observer per scenario, Prometheus, the Argo and Flagger gates
    CLUSTER = "cluster"  # discovered from a scripted Argo Rollout, two replicas on PostgreSQL, a kill, a partition
    PRIMITIVES = "primitives"  # rollouts through KServe, Gateway API, llm-d, OME, Dynamo and Flagger objects
    REAL = "real"  # real vLLM servers (make real-vllm)


@dataclass(frozen=True)
class Rigs:
    """A kind's catalogue, how its rig starts, and how its rows are printed (True when every row matched)."""

    catalogue: Catalogue[Any]
    start: Callable[[Plan, int], AbstractContextManager[Any]]
    show: Callable[[list[Any], Console, bool], bool]


def _report(rows: list[Any], console: Console, json_line: bool) -> bool:
    report = Report(rows=rows)
    print_report(report, console)
    return report.ok


def _single(plan: Plan, seed: int) -> AbstractContextManager[SingleRig]:
    return single_rig(plan, seed=seed)


def _cluster(plan: Plan, seed: int) -> AbstractContextManager[ClusterRig]:
    return cluster_rig(plan, seed=seed)


def _primitives(plan: Plan, seed: int) -> AbstractContextManager[PrimitiveRig]:
    return primitive_rig(plan, seed=seed)


def _real(plan: Plan, seed: int) -> AbstractContextManager[RealRig]:
    return real_rig(plan, seed=seed)


RIGS: dict[Kind, Rigs] = {
    Kind.SINGLE: Rigs(SINGLE, _single, _report),
    Kind.CLUSTER: Rigs(CLUSTER, _cluster, lambda rows, console, json_line: print_cluster(rows, console,
                                                                                        json_line=json_line)),
    Kind.PRIMITIVES: Rigs(PRIMITIVES, _primitives, lambda rows, console, json_line: print_primitives(rows, console)),
    Kind.REAL: Rigs(REAL, _real, _report),
}


def play(kind: Kind, *, short: bool = False, only: Sequence[str] | None = None, seed: int = 7) -> list[Any]:
    """Play `kind`'s scenarios (its short form with `short`, or `only`) in its rig; GamedayError if a name is
    unknown or the rig cannot start."""
    rigs = RIGS[kind]
    return play_rows(rigs.catalogue, lambda plan: rigs.start(plan, seed), short=short, only=only)


def show(kind: Kind, rows: list[Any], console: Console, *, json_line: bool = False) -> bool:
    """Print `kind`'s table (and, where it has one, its JSON line); True when every row matched."""
    return RIGS[kind].show(rows, console, json_line)
