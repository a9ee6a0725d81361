"""Every rollout source is one row (observer/config/sources.py), and every place that must know the sources
reads the rows: the config's validation, the readers, the reflectors' collections, the chart's RBAC, the docs
table. A source added to the rows and missing from one of them, or a place that names a source's collection
by hand, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from observer.config.discovery import PrimitiveRef
from observer.config.sources import BY_KEY, POOLS, PRIMITIVES, SOURCES
from observer.discover.planned import READERS, resources
from observer.render.helm import CHART, sources_rbac
from observer_dev import docsgen

ROOT = Path(__file__).resolve().parents[2]


def _ref(key: str) -> PrimitiveRef:
    return PrimitiveRef.model_validate({"kind": key, "name": "x", **({"model": "m"} if BY_KEY[key].needs_model
                                                                       else {})})


def test_each_primitive_row_has_a_reader_and_the_config_takes_exactly_the_rows() -> None:
    assert set(READERS) == set(PRIMITIVES)
    assert {s.key for s in SOURCES} == {*PRIMITIVES, "rollout", "labels"}
    for key in PRIMITIVES:
        _ref(key)
    with pytest.raises(ValidationError, match=f"not a source the observer reads: {', '.join(PRIMITIVES)}"):
        PrimitiveRef.model_validate({"kind": "flux_capacitor", "name": "x"})
    assert PrimitiveRef.model_json_schema()["properties"]["kind"]["enum"] == list(PRIMITIVES)


@pytest.mark.parametrize("key", PRIMITIVES)
def test_the_reflectors_watch_each_rows_collections_and_every_version_it_reads_is_accepted(key: str) -> None:
    row = BY_KEY[key]
    watched = resources(_ref(key))
    assert row.own is not None
    assert {p for _, p in watched} == {c.plural for c in row.collections()}
    assert {a for a, p in watched if p == row.own.plural} == set(row.own.watched())
    for api in row.own.api_versions:  # every version the reader accepts may be named in the config
        PrimitiveRef.model_validate({"kind": key, "name": "x", "api_version": api,
                                     **({"model": "m"} if row.needs_model else {})})
    with pytest.raises(ValidationError, match="is not one the observer reads"):
        PrimitiveRef.model_validate({"kind": key, "name": "x", "api_version": "example.com/v9",
                                     **({"model": "m"} if row.needs_model else {})})


def test_the_charts_rbac_and_the_docs_table_are_generated_from_the_rows() -> None:
    on_disk = yaml.safe_load((ROOT / CHART / "files" / "sources.yaml").read_text())
    assert on_disk == sources_rbac(), "deploy/helm/observer/files/sources.yaml is stale: run `observer render`"
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    assert docsgen.rendered("docs/kubernetes.md", "sources", text) == text, (
        "docs/kubernetes.md's sources table is stale: run `python -m observer_dev.docsgen`")
    for s in SOURCES:
        assert s.title in text


def test_no_collection_of_a_source_is_named_by_hand_outside_the_rows() -> None:
    plurals = {c.plural for s in SOURCES for c in s.collections()} | {POOLS.plural}
    groups = {g for s in SOURCES for c in s.collections() for g in c.groups} | set(POOLS.groups)
    names = "|".join(sorted(plurals))
    # As an API names a collection: a path segment, a string, a YAML list item, or plural.group.
    pattern = re.compile(rf"""(?:/|["'\[]\s*)({names})(?![-\w])|\b({names})\.({"|".join(map(re.escape, groups))})""")
    places = [*(ROOT / "observer").rglob("*.py"), *(ROOT / CHART / "templates").glob("*")]
    named = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in places if p.name != "sources.py"
             for m in pattern.finditer(p.read_text())]
    assert not named, "a source's collection written by hand (derive it from observer.config.sources):\n" + \
        "\n".join(named)
