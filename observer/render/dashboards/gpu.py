"""GPU dashboard: DCGM-exporter series joined to the model version by the observer (namespace + pod)."""

from __future__ import annotations

from observer import conventions as names
from observer.render.dashboards.common import (
    ORANGE,
    RATE,
    RED,
    DashboardSpec,
    PanelSpec,
    Query,
    Section,
    Step,
    sel,
)
from observer.render.dashboards.objectives import Objectives

V = names.VERSION
S = names.STAT


def _per_stat(title: str, family: str, unit: str, description: str, **extra: object) -> PanelSpec:
    kwargs: dict[str, object] = {"width": 12, "height": 8} | extra
    return PanelSpec(
        title=title, unit=unit,
        description=f"{description} Mean and max over the version's GPUs (DCGM joined on namespace + pod).",
        queries=[Query(f"max by ({V}, {S}) ({sel(family)})", f"{{{{{V}}}}} {{{{{S}}}}}")],
        **kwargs,  # type: ignore[arg-type]
    )


def dashboard(obj: Objectives) -> DashboardSpec:
    """The GPU dashboard."""
    usage = Section("Utilisation and memory", [
        _per_stat("GPU utilisation", names.GPU_UTIL, "percentunit",
                  "Share of time a kernel ran (DCGM_FI_DEV_GPU_UTIL as 0–1).", min=0, max=1),
        _per_stat("Framebuffer used", names.GPU_FB_USED, "percentunit",
                  "Framebuffer memory used ÷ (used + free + reserved), DCGM_FI_DEV_FB_*.", min=0, max=1,
                  thresholds=(Step(obj.gpu_framebuffer_used, RED),), runbooks=(names.ALERT_GPU_FRAMEBUFFER,)),
        _per_stat("Tensor-core activity", names.GPU_TENSOR_ACTIVE, "percentunit",
                  "Ratio of cycles the tensor pipes were active (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).", min=0, max=1),
        _per_stat("DRAM activity", names.GPU_DRAM_ACTIVE, "percentunit",
                  "Ratio of cycles the device memory interface was busy (DCGM_FI_PROF_DRAM_ACTIVE).", min=0, max=1),
    ])
    health = Section("Health", [
        _per_stat("Temperature", names.GPU_TEMP, "celsius", "GPU temperature (DCGM_FI_DEV_GPU_TEMP).",
                  thresholds=(Step(obj.gpu_temperature_celsius - 5, ORANGE), Step(obj.gpu_temperature_celsius, RED)),
                  width=8),
        _per_stat("Power", names.GPU_POWER, "watt", "Board power draw (DCGM_FI_DEV_POWER_USAGE).", width=8),
        PanelSpec(
            title="XID errors", unit="short", width=8, thresholds=(Step(1, RED),), runbooks=(names.ALERT_GPU_XID,),
            description=("XID events per version (changes of DCGM_FI_DEV_XID_ERRORS to a "
                         "non-zero code). Any XID deserves a look: 48/63/64/79 mean a sick GPU."),
            queries=[Query(f"sum by ({V}) (increase({sel(names.GPU_XID_ERRORS + '_total')}[{RATE}]))",
                           f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="GPUs per version", unit="short", width=8,
            description="GPUs the observer joined to each version (pods listed in the fleet config).",
            queries=[Query(f"sum by ({V}) ({sel(names.GPU_COUNT)})", f"{{{{{V}}}}}")],
        ),
    ])
    return DashboardSpec(
        slug="gpu", title="GPU",
        description="DCGM GPU metrics per model version: utilisation, memory, tensor/DRAM activity, health.",
        sections=[usage, health],
    )
