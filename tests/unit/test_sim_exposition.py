"""The simulator's vLLM and DCGM expositions match the real formats (fixtures from vLLM 0.33 and
dcgm-exporter), and the observer's own parsers read them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from observer.collect.dcgm import parse_dcgm
from observer.collect.vllm import parse_vllm
from observer_dev.sim import dcgm_exposition, vllm_exposition
from observer_dev.sim.dcgm_exposition import GpuIdentity, SimGpu
from observer_dev.sim.engine import SimEngine
from observer_dev.sim.profile import build_profile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VLLM_FIXTURE = FIXTURES / "vllm" / "generated_vllm-0.33.0_single-engine.prom"
DCGM_FIXTURE = next((FIXTURES / "dcgm").glob("SYNTHETIC_*.prom"))


def _families(text: str, prefix: str) -> dict[str, tuple[str, str, list[str], list[str]]]:
    """name → (type, HELP, label names in order of first sample, bucket `le` texts)."""
    out = {}
    for f in text_string_to_metric_families(text):
        if not f.name.startswith(prefix):
            continue
        labels: list[str] = []
        les: list[str] = []
        for s in f.samples:
            if s.name.endswith("_created"):
                continue
            labels += [k for k in s.labels if k not in labels and k != "le"]
            if "le" in s.labels and s.labels["le"] not in les:
                les.append(s.labels["le"])
        out[f.name] = (f.type, f.documentation, labels, les)
    return out


@pytest.fixture(scope="module")
def sim_text() -> str:
    engine = SimEngine(model="demo-model", profile=build_profile("healthy"), seed=3)
    for _ in range(30):
        engine.tick(0.5)
    return vllm_exposition.render(vllm_exposition.build_registry(engine.snapshot)).decode()


def test_vllm_family_set_types_help_labels_and_buckets_match_the_fixture(sim_text: str) -> None:
    fixture = _families(VLLM_FIXTURE.read_text(), "vllm:")
    sim = _families(sim_text, "vllm:")
    assert set(sim) == set(fixture), (set(sim) ^ set(fixture))
    for name, (kind, help_text, labels, les) in fixture.items():
        s_kind, s_help, s_labels, s_les = sim[name]
        assert (s_kind, s_help) == (kind, help_text), name
        assert sorted(s_labels) == sorted(labels), name
        assert s_les == les, f"{name}: bucket edges differ"


def test_vllm_header_lines_and_label_order_are_byte_identical(sim_text: str) -> None:
    fixture = VLLM_FIXTURE.read_text().splitlines()
    headers = [line for line in fixture if line.startswith("# ") and "vllm:" in line]
    sim_headers = [line for line in sim_text.splitlines() if line.startswith("# ") and "vllm:" in line]
    assert sim_headers == headers  # same HELP/TYPE text and the same family order, `_created` gauges included
    sample = next(line for line in sim_text.splitlines() if line.startswith("vllm:request_success_total{"))
    assert sample.startswith('vllm:request_success_total{engine="0",finished_reason="stop",model_name="demo-model"}')
    bucket = next(line for line in sim_text.splitlines() if line.startswith("vllm:e2e_request_latency_seconds_bucket"))
    assert bucket.startswith('vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="demo-model"}')


def test_every_counter_and_histogram_has_a_created_series(sim_text: str) -> None:
    names = {line.split("{")[0] for line in sim_text.splitlines() if line.startswith("vllm:")}
    for f in text_string_to_metric_families(VLLM_FIXTURE.read_text()):
        if f.name.startswith("vllm:") and f.type in {"counter", "histogram"}:
            assert f"{f.name}_created" in names, f.name


def test_the_observer_parser_reads_the_simulator(sim_text: str) -> None:
    scrape = parse_vllm(sim_text)
    model = scrape.models["demo-model"]
    ttft = model.histograms["time_to_first_token_seconds"]
    assert ttft.count > 0 and ttft.cumulative[-1] == ttft.count
    assert set(model.labelled_counters["request_success"]) >= {"stop", "length", "abort", "error"}
    assert model.counters["prompt_tokens"] > model.counters["prefix_cache_hits"] > 0
    assert 0 <= model.gauges["kv_cache_usage_perc"] <= 1


def test_content_type_is_text_format_0_0_4() -> None:
    assert vllm_exposition.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert dcgm_exposition.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def _gpus(xid: int = 0, *, load: float = 8.0, pods: bool = True) -> list[SimGpu]:
    gpus = []
    for i, version in enumerate(("stable", "canary")):
        engine = SimEngine(model=f"m-{version}", profile=build_profile({"load_rps": load, "xid": xid}), seed=i)
        engine.tick(1.0)
        identity = GpuIdentity.make(i, key=version, namespace="llm-serving" if pods else None,
                                    pod=f"sim-{version}-0" if pods else None)
        gpus.append(SimGpu(identity, engine.snapshot))
    return gpus


def test_dcgm_format_matches_the_exporter_fixture() -> None:
    text = dcgm_exposition.render(_gpus()).decode()
    fixture = DCGM_FIXTURE.read_text()
    extra = {name for name, _, _ in dcgm_exposition.EXTRA_FIELDS}  # enabled beyond the default counters
    assert [line for line in text.splitlines() if line.startswith("#") and line.split()[2] not in extra] == \
           [line for line in fixture.splitlines() if line.startswith("#")]
    label_order = [part.split("=")[0] for part in fixture.splitlines()[2].split("{")[1].split("}")[0].split('",')]
    sim_order = [part.split("=")[0] for part in text.splitlines()[2].split("{")[1].split("}")[0].split('",')]
    assert sim_order == label_order
    # The exporter prints integer fields without a decimal point and ratios/power with six decimals.
    assert all(re.search(r"\} \d+$", line) for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL"))
    assert all(re.search(r"\} \d+\.\d{6}$", line) for line in text.splitlines()
               if line.startswith("DCGM_FI_DEV_POWER_USAGE"))


def test_dcgm_is_parsed_with_pods_and_follows_load_and_xid() -> None:
    busy = parse_dcgm(dcgm_exposition.render(_gpus(xid=79)).decode())
    assert {g.pod for g in busy.gpus} == {"sim-stable-0", "sim-canary-0"}
    assert all(g.xid == 79 for g in busy.gpus)
    assert all(g.gpu_util_percent is not None and g.gpu_util_percent > 15 for g in busy.gpus)
    assert all(g.fb_used_mib and g.fb_free_mib and g.fb_used_mib > g.fb_free_mib for g in busy.gpus)
    idle = parse_dcgm(dcgm_exposition.render(_gpus(load=0.0, pods=False)).decode())
    assert all(g.gpu_util_percent == 0 and g.xid == 0 for g in idle.gpus)
    assert all(g.pod is None and g.namespace is None for g in idle.gpus)
    assert all(g.power_w is not None and g.power_w < 100 for g in idle.gpus)
