"""The GPUs of each version: which fresh DCGM readings belong to which versions, the XID errors newly seen,
and the GPU signals of a version (utilisation, memory, temperature, power, ECC, throttling, identity)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from observer.analyse.signals.model import GpuSignals, VersionState, mean
from observer.collect.model import GpuMetrics
from observer.collect.scraper import ScrapeResult, Target
from observer.conventions import CLOCK_THROTTLE_REASONS

Owners = dict[str, tuple[GpuMetrics, set[str]]]  # GPU uuid → (its reading, the versions it serves)


MEMORY_ERROR_FIELDS: Mapping[str, str] = {
    "dbe_volatile": "ecc_dbe_volatile", "sbe_volatile": "ecc_sbe_volatile", "dbe_aggregate": "ecc_dbe_aggregate",
    "sbe_aggregate": "ecc_sbe_aggregate", "remapped_uncorrectable": "remapped_rows_uncorrectable",
    "remapped_correctable": "remapped_rows_correctable", "remap_failures": "row_remap_failure"}
THROTTLE_FIELDS: Mapping[str, str] = {"power": "power_violation_ns", "thermal": "thermal_violation_ns"}



def owners(versions: Mapping[str, VersionState], fresh: Callable[[Target], ScrapeResult | None]) -> Owners:
    """uuid → (GPU, versions it serves) from every fresh DCGM scrape, joined on the versions' pods."""
    out: Owners = {}
    for name, v in versions.items():
        pods = {(p.namespace, p.pod) for p in v.spec.pods}
        for t in v.dcgm:
            r = fresh(t)
            if r is None or r.dcgm is None:
                continue
            for g in r.dcgm.gpus:
                if pods and (g.namespace, g.pod) not in pods:
                    continue
                key = g.uuid or f"{t.url}#{g.gpu}"
                out.setdefault(key, (g, set()))[1].add(name)
    return out


@dataclass
class XidCounter:
    """Counts each GPU's XID code changes onto the versions it serves."""

    last: dict[str, float] = field(default_factory=dict)  # GPU → its last XID code

    def count(self, gpus: Owners, versions: Mapping[str, VersionState]) -> None:
        for key, (g, served) in gpus.items():
            if g.xid is None or not math.isfinite(g.xid):
                continue
            before = self.last.get(key)
            self.last[key] = g.xid
            # The first reading is a baseline: a stale code from before the observer started is not news.
            if before is not None and g.xid != 0 and g.xid != before:
                for name in served:
                    versions[name].xid_seen += 1


def gpu_signals(gpus: Sequence[GpuMetrics], *, xid_seen: int) -> GpuSignals | None:
    """A version's GPU signals from its GPUs' readings (None: no GPU)."""
    if not gpus:
        return None

    def stats(values: Iterable[float | None], scale: float = 1.0) -> tuple[float | None, float | None]:
        xs = [x * scale for x in values if x is not None and math.isfinite(x)]
        return (mean(xs), max(xs) if xs else None)

    fb: list[float | None] = []
    for g in gpus:
        if g.fb_used_mib is None or g.fb_free_mib is None:
            fb.append(None)
            continue
        total = g.fb_used_mib + g.fb_free_mib + (g.fb_reserved_mib or 0.0)
        fb.append(g.fb_used_mib / total if total > 0 else None)
    util = stats((g.gpu_util_percent for g in gpus), 0.01)
    fbs = stats(fb)
    temp = stats(g.temperature_c for g in gpus)
    power = stats(g.power_w for g in gpus)
    return GpuSignals(
        gpus=len(gpus), utilization_mean=util[0], utilization_max=util[1],
        framebuffer_used_mean=fbs[0], framebuffer_used_max=fbs[1],
        temperature_celsius_mean=temp[0], temperature_celsius_max=temp[1],
        power_watts_mean=power[0], power_watts_max=power[1],
        tensor_active_mean=stats(g.tensor_active for g in gpus)[0],
        dram_active_mean=stats(g.dram_active for g in gpus)[0],
        gpus_with_xid=sum(1 for g in gpus if g.xid),
        xid_errors_seen=xid_seen,
        models=tuple(sorted({g.model_name[:64] for g in gpus if g.model_name})),
        drivers=tuple(sorted({g.driver_version[:32] for g in gpus if g.driver_version})),
        memory_errors=gpu_sums(gpus, MEMORY_ERROR_FIELDS),
        throttle_seconds={k: x / 1e9 for k, x in gpu_sums(gpus, THROTTLE_FIELDS).items()},
        clock_throttled=clock_reasons(gpus),
    )


def clock_reasons(gpus: Sequence[GpuMetrics]) -> dict[str, int]:
    """Per NVML slowdown reason, the GPUs whose current throttle bitmask has it (empty: no GPU reports it)."""
    masks = [int(x) for g in gpus if (x := g.clock_event_reasons) is not None and math.isfinite(x) and x >= 0]
    if not masks:
        return {}
    return {reason: sum(1 for m in masks if m & bit) for reason, bit in CLOCK_THROTTLE_REASONS.items()}


def gpu_sums(gpus: Sequence[GpuMetrics], fields: Mapping[str, str]) -> dict[str, float]:
    """Per kind, the sum over GPUs of a DCGM field (finite values only); kinds no GPU reports are left out."""
    out: dict[str, float] = {}
    for kind, attr in fields.items():
        xs = [x for g in gpus if (x := getattr(g, attr)) is not None and math.isfinite(x) and x >= 0]
        if xs:
            out[kind] = float(sum(xs))
    return out
