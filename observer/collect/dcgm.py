"""DCGM-exporter parsing: one record per GPU with the fields the observer uses.

Kubernetes labels arrive as `pod`/`namespace`, or as `exported_pod`/`exported_namespace` through a
Prometheus that does not honour labels; `Hostname` was renamed `hostname` in newer exporter builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from observer.collect.model import DcgmScrape, GpuMetrics
from observer.collect.promtext import parse

FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_percent",
    "DCGM_FI_DEV_FB_USED": "fb_used_mib",
    "DCGM_FI_DEV_FB_FREE": "fb_free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "fb_reserved_mib",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_dbe_volatile",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "ecc_sbe_volatile",
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": "ecc_dbe_aggregate",
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": "ecc_sbe_aggregate",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "remapped_rows_uncorrectable",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "remapped_rows_correctable",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "row_remap_failure",
    "DCGM_FI_DEV_POWER_VIOLATION": "power_violation_ns",
    "DCGM_FI_DEV_THERMAL_VIOLATION": "thermal_violation_ns",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "clock_event_reasons",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clock_event_reasons",  # the same field's name since DCGM 3.3
}
"""DCGM field → GpuMetrics attribute."""


@dataclass
class _Gpu:
    labels: dict[str, str]
    values: dict[str, float] = field(default_factory=dict)


def _pick(labels: dict[str, str], *names: str) -> str | None:
    for n in names:
        v = labels.get(n)
        if v:
            return v
    return None


def parse_dcgm(text: str, *, max_samples: int | None = None) -> DcgmScrape:
    """Parse one DCGM-exporter /metrics body into per-GPU records (SampleLimitError past `max_samples`)."""
    gpus: dict[tuple[str, str], _Gpu] = {}
    for fam in parse(text, max_samples=max_samples):
        attr = FIELDS.get(fam.name)
        if attr is None:
            continue
        for s in fam.samples:
            labels = dict(s.labels)
            key = (labels.get("UUID") or labels.get("uuid") or "", labels.get("gpu", ""))
            gpu = gpus.get(key)
            if gpu is None:
                gpu = gpus[key] = _Gpu(labels=labels)
            else:
                gpu.labels.update((k, v) for k, v in labels.items() if v and not gpu.labels.get(k))
            gpu.values[attr] = s.value
    records = []
    for (uuid, index), g in gpus.items():
        records.append(GpuMetrics(
            uuid=uuid, gpu=index,
            hostname=_pick(g.labels, "Hostname", "hostname"),
            pod=_pick(g.labels, "pod", "exported_pod"),
            namespace=_pick(g.labels, "namespace", "exported_namespace"),
            model_name=_pick(g.labels, "modelName"),
            driver_version=_pick(g.labels, "DCGM_FI_DRIVER_VERSION", "driver_version"),
            **{attr: g.values.get(attr) for attr in FIELDS.values()},
        ))
    records.sort(key=lambda r: (r.hostname or "", r.gpu, r.uuid))
    return DcgmScrape(gpus=tuple(records))
