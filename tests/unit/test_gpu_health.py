"""Silent GPU degradation and restarts (#18 item 2): DCGM's ECC, row-remap and violation counters read into
signals and exported per version; vLLM restarts (counter resets between scrapes) counted and exported."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from observer.analyse.signals import SignalStore
from observer.collect.dcgm import parse_dcgm
from observer.collect.scraper import ScrapeResult, Target, TargetHealth, TargetKind
from observer.config.fleet import PodRef, VersionSpec
from observer.export.collector import ScrapeCollector
from tests.unit.test_signals_window import V033, feed, scrape

DCGM = "\n".join([
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",pod="p0",namespace="ns",modelName="H100"} 90',
    'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",pod="p0",namespace="ns",modelName="H100"} 90',
    'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-a",pod="p0",namespace="ns"} 0',
    'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="1",UUID="GPU-b",pod="p0",namespace="ns"} 2',
    'DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="0",UUID="GPU-a",pod="p0",namespace="ns"} 40',
    'DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="1",UUID="GPU-b",pod="p0",namespace="ns"} 1',
    'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{gpu="1",UUID="GPU-b",pod="p0",namespace="ns"} 3',
    'DCGM_FI_DEV_THERMAL_VIOLATION{gpu="0",UUID="GPU-a",pod="p0",namespace="ns"} 1.5e9',
    'DCGM_FI_DEV_THERMAL_VIOLATION{gpu="1",UUID="GPU-b",pod="p0",namespace="ns"} 0.5e9',
    'DCGM_FI_DEV_POWER_VIOLATION{gpu="1",UUID="GPU-b",pod="p0",namespace="ns"} NaN',
    'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-a",pod="p0",namespace="ns"} 68',  # 0x40 | 0x4
    'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="1",UUID="GPU-b",pod="p0",namespace="ns"} 1',  # idle (DCGM ≥ 3.3 name)
    ""])


def test_dcgm_health_fields_are_parsed() -> None:
    gpus = {g.uuid: g for g in parse_dcgm(DCGM).gpus}
    assert gpus["GPU-b"].ecc_dbe_volatile == 2 and gpus["GPU-b"].row_remap_failure == 1
    assert gpus["GPU-a"].ecc_sbe_volatile == 40 and gpus["GPU-a"].thermal_violation_ns == 1.5e9
    assert gpus["GPU-a"].ecc_dbe_aggregate is None  # not exported by this exporter: unknown, not 0


def test_memory_errors_throttling_and_restarts_are_exported_per_version() -> None:
    spec = VersionSpec(name="stable", vllm=["http://a/metrics"], dcgm=["http://d/metrics"],
                       pods=[PodRef(namespace="ns", pod="p0")])
    store = SignalStore([spec], window_seconds=300.0, stale_after_seconds=60.0)
    dcgm_target = Target(TargetKind.DCGM, "http://d/metrics")
    for ts, k in ((0.0, 1), (15.0, 4), (30.0, 1), (45.0, 2), (60.0, 1)):  # two restarts: at 30 s and 60 s
        feed(store, ts, a=scrape(V033, k))
        store.record({dcgm_target: ScrapeResult(dcgm_target, ts, 0.01, dcgm=parse_dcgm(DCGM))}, ts=ts)
    s = store.latest("stable")
    assert s is not None and s.gpu is not None
    assert dict(s.gpu.memory_errors) == {"dbe_volatile": 2.0, "sbe_volatile": 40.0, "remapped_uncorrectable": 3.0,
                                         "remap_failures": 1.0}
    assert dict(s.gpu.throttle_seconds) == {"thermal": 2.0}  # the NaN power reading is left out
    registry = CollectorRegistry()
    registry.register(ScrapeCollector(store, TargetHealth(store.bindings())))
    text = generate_latest(registry).decode()
    assert 'observer_engine_restarts_total{version="stable"} 2.0' in text
    assert 'observer_gpu_memory_errors{kind="dbe_volatile",version="stable"} 2.0' in text
    assert 'observer_gpu_throttle_seconds_total{reason="thermal",version="stable"} 2.0' in text
    # NVML clock throttle reasons: GPU-a slowed by the hardware (0x40) and the power cap (0x4); GPU-b idle only.
    assert dict(s.gpu.clock_throttled) == {"sw_power_cap": 1, "hw_slowdown": 0, "sw_thermal": 0, "hw_thermal": 1,
                                           "hw_power_brake": 0}
    assert 'observer_gpu_clock_throttled_gpus{reason="hw_thermal",version="stable"} 1.0' in text
