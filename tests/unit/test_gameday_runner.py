"""The one game-day runner: rows chosen from a catalogue, one rig started for them, a row that cannot run turned
into a failed row while the rest still play; every kind of rig is a line of one table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from observer_dev.gameday.runner import RIGS, Kind, play_rows
from observer_dev.gameday.scenarios import SCENARIOS, SINGLE, Catalogue, Expect, GamedayError, Plan, Scenario


@dataclass
class FakeRig:
    """Plays a row by recording it; rows named in `broken` raise what a rig raises when it cannot run them."""

    broken: dict[str, Exception] = field(default_factory=dict)
    played: list[str] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)

    def play(self, s: Scenario) -> str:
        self.played.append(s.name)
        if s.name in self.broken:
            raise self.broken[s.name]
        return f"played {s.name}"

    def could_not_run(self, s: Scenario, reason: str) -> str:
        return f"{s.name}: {reason}"


def rig_of(fake: FakeRig, started: list[Plan]):  # type: ignore[no-untyped-def]
    @contextmanager
    def start(plan: Plan) -> Iterator[FakeRig]:
        started.append(plan)
        yield fake

    return start


CATALOGUE = Catalogue("test", (Scenario("a", "one", Expect.PASS), Scenario("b", "two", Expect.FAIL),
                               Scenario("c", "three", Expect.NODATA)),
                      full=frozenset({"a", "b"}), short=frozenset({"a"}), elsewhere=" (try the other rig)")


def test_rows_are_chosen_in_catalogue_order_short_full_or_named() -> None:
    assert [s.name for s in CATALOGUE.choose(None, short=True)] == ["a"]
    assert [s.name for s in CATALOGUE.choose(None, short=False)] == ["a", "b"]
    assert [s.name for s in CATALOGUE.choose(["c", "a"], short=True)] == ["a", "c"]  # named: any row, in order
    with pytest.raises(GamedayError, match=r"unknown scenario\(s\) x, y in the test game day; it plays: a, b, c "
                                           r"\(try the other rig\)"):
        CATALOGUE.choose(["y", "a", "x"], short=False)


def test_a_row_that_cannot_run_is_a_failed_row_and_the_rest_still_play() -> None:
    fake = FakeRig(broken={"b": GamedayError("no Prometheus"), "c": httpx.ConnectError("refused")})
    started: list[Plan] = []
    rows = play_rows(CATALOGUE, rig_of(fake, started), only=["a", "b", "c"], short=True)
    assert rows == ["played a", "b: could not run: no Prometheus", "c: could not run: refused"]
    assert fake.played == ["a", "b", "c"] and len(started) == 1  # one rig for every row


def test_an_unknown_name_is_refused_before_the_rig_starts() -> None:
    started: list[Plan] = []
    with pytest.raises(GamedayError, match="unknown scenario"):
        play_rows(CATALOGUE, rig_of(FakeRig(), started), only=["nope"])
    assert started == []


def test_a_fault_of_the_runner_itself_is_not_swallowed() -> None:
    fake = FakeRig(broken={"a": KeyError("bug")})
    with pytest.raises(KeyError):
        play_rows(CATALOGUE, rig_of(fake, []), short=True)


def test_a_new_row_is_played_without_touching_the_runner() -> None:
    grown = Catalogue("test", (*CATALOGUE.rows, Scenario("d", "four", Expect.INCONCLUSIVE)))
    fake = FakeRig()
    assert play_rows(grown, rig_of(fake, []))[-1] == "played d"


def test_every_kind_has_a_rig_and_its_rows_are_named_once_with_a_typed_outcome() -> None:
    assert set(RIGS) == set(Kind)
    for kind, rigs in RIGS.items():
        names = [s.name for s in rigs.catalogue.rows]
        assert names and len(names) == len(set(names)), kind
        assert all(isinstance(s.expect, Expect) for s in rigs.catalogue.rows), kind
        for chosen in (rigs.catalogue.full, rigs.catalogue.short):
            assert chosen is None or chosen <= set(names), kind


def test_the_single_process_short_form_leaves_out_the_embedder_and_the_cluster_only_rows() -> None:
    short = {s.name for s in SINGLE.choose(None, short=True)}
    assert short == {s.name for s in SCENARIOS if s.needs != "drift" and not s.pending_pods}
    with pytest.raises(GamedayError, match=r"--cluster"):
        SINGLE.choose(["unschedulable"], short=True)  # a Pending pod is an API object: the cluster rig's row
