"""Every bench has a smoke row: a new bench without one fails here, before its figures reach the docs."""

from __future__ import annotations

from tests.support.bench_smoke import SMOKE, benches


def test_every_bench_has_a_smoke_row_and_every_row_a_bench() -> None:
    assert benches() - set(SMOKE) == set(), "benches without a smoke row in tests/support/bench_smoke.py"
    assert set(SMOKE) - benches() == set(), "smoke rows for benches that are gone"


def test_a_bench_left_out_of_the_suite_says_why() -> None:
    for name, smoke in SMOKE.items():
        assert not smoke.real or not smoke.args, f"{name}: a row that never runs carries no sizes"
        assert not smoke.slow or smoke.args, f"{name}: a row for `make bench-smoke` carries its sizes"
    # Most run in every `make test`; a row moves out only with its reason, and the suite keeps the rest.
    assert sum(1 for s in SMOKE.values() if not s.slow and not s.real) >= 20
