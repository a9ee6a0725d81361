"""Tenants as a bounded label: allow-listed and the busiest up to top_n, the rest `other`; a tenant header only
from a trusted peer; the label set within its cap under a flood of distinct keys; a client-set header ignored."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from observer.config.sampling import TenantSpec
from observer.sample.metrics import SamplingMetrics, families
from observer.sample.proxy import ProxyApp, build_client
from observer.sample.server import start_server
from observer.sample.tenants import NONE, OTHER, SpaceSaving, Tenants
from tests.support.scripted_openai import ScriptedUpstream


def test_a_flood_of_distinct_keys_stays_within_the_cap_and_the_busy_tenants_get_labels() -> None:
    tenants = Tenants(TenantSpec(allow=["acme"], top_n=3, min_requests=50))
    labels = tenants.labels
    for i in range(100_000):
        key = ("bigco" if i % 10 == 0 else "midco" if i % 25 == 1 else f"flood-{i}")
        tenants.metrics.observe("stable", labels.label(key), code=200, ttft_s=0.1)
    tenants.metrics.observe("stable", labels.label("acme"), code=500, ttft_s=None)
    assert labels.labels() == sorted({"acme", "bigco", "midco", OTHER, NONE})
    series = {tuple(sorted(s.labels.items())) for f in families(tenants.collector()) for s in f.samples
              if s.name == "observer_tenant_requests_total"}
    assert len(series) == 4  # bigco, midco, other (200) and acme (500): within allow + top_n + other
    # the 86,000 one-off keys, never labelled, and the 49 requests each busy tenant had before its label
    assert labels.overflow["other"] == 100_000 - 10_000 - 4_000 + 2 * 49
    assert len(labels.sketch.counts) <= 3 * 10  # the sketch is bounded too


def test_the_sketch_never_labels_one_off_keys_even_after_many() -> None:
    sketch = SpaceSaving(size=10)
    assert max(sketch.add(f"k{i}") for i in range(10_000)) == 1  # each key surely has one request, no more


def test_reserved_long_and_empty_keys() -> None:
    labels = Tenants(TenantSpec(top_n=5, min_requests=1, max_key_chars=8)).labels
    assert labels.label(None) == NONE and labels.label("") == NONE
    assert labels.label("other") == OTHER and labels.label("none") == OTHER  # a tenant cannot claim them
    assert labels.label("x" * 9) == OTHER and labels.overflow["too_long"] == 1
    assert labels.label("small") == "small"


def test_trusted_peers_must_be_addresses() -> None:
    with pytest.raises(ValueError, match="not an address or CIDR"):
        TenantSpec(trusted_peers=["gateway.local"])


@pytest.mark.parametrize(("peers", "want"), [(["127.0.0.1"], "bigco"), (["10.0.0.0/8"], NONE)])
async def test_the_proxy_takes_the_tenant_header_only_from_a_trusted_peer(tmp_path: Path, peers: list[str],
                                                                          want: str) -> None:
    up = ScriptedUpstream().start()
    tenants = Tenants(TenantSpec(header="X-Tenant", trusted_peers=peers, allow=["bigco"]))
    client = build_client(connect_timeout=2.0, read_timeout=10.0, max_connections=10)
    app = ProxyApp(version="stable", upstream=up.url, client=client, metrics=SamplingMetrics(), pipeline=None,
                   tenants=tenants)
    server = await start_server(app, host="127.0.0.1", port=0)
    try:
        async with httpx.AsyncClient(timeout=10) as c:
            for _ in range(3):
                r = await c.post(f"http://127.0.0.1:{server.port}/v1/chat/completions", headers={"x-tenant": "bigco"},
                                 json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
                assert r.status_code == 200
    finally:
        await server.stop()
        await client.aclose()
        up.stop()
    assert tenants.metrics.requests == {("stable", want, "2xx"): 3}
    assert tenants.labels.overflow["untrusted"] == (0 if want == "bigco" else 3)


async def test_mirror_ingest_names_tenants_and_a_sender_that_names_none_makes_no_series(tmp_path: Path) -> None:
    from fastapi import FastAPI

    from observer.export import errors
    from observer.sample.ingest import ingest_router
    from observer.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.db")
    tenants = Tenants(TenantSpec(allow=["team-a"]))
    app = FastAPI()
    errors.install(app)
    app.include_router(ingest_router(store=store, metrics=SamplingMetrics(), redactor=None, versions={"stable"},
                                     guard=lambda: None, max_request_bytes=1 << 20, max_batch_samples=100,
                                     clock=lambda: 1_700_000_000.0, tenants=tenants))
    sample = {"version": "stable", "prompt": "q", "output": "a", "ttft_s": 0.2, "prompt_tokens": 10,
              "output_tokens": 30}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            r = await c.post("/api/v1/samples", json={"samples": [
                {**sample, "tenant": "team-a"}, {**sample, "tenant": "team-a", "finish_reason": "error"}, sample]})
            assert r.status_code == 200, r.text
    finally:
        store.close()
    m = tenants.metrics
    assert m.requests == {("stable", "team-a", "2xx"): 1, ("stable", "team-a", "5xx"): 1}
    assert m.tokens == {("stable", "team-a", "prompt"): 20, ("stable", "team-a", "generation"): 60}
    assert sum(m.ttft[("stable", "team-a")].counts) == 2
