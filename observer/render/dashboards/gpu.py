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
            title="Memory errors", unit="short", width=8, thresholds=(Step(1, RED),),
            runbooks=(names.ALERT_GPU_MEMORY_ERRORS,),
            description=("DCGM ECC and row-remap counters summed over the version's GPUs: dbe_volatile "
                         "(uncorrectable since the driver loaded) and remap_failures mean drain the GPU; "
                         "sbe_* are corrected errors, a trend to watch."),
            queries=[Query(f"max by ({V}, {names.KIND}) ({sel(names.GPU_MEMORY_ERRORS)})",
                           f"{{{{{V}}}}} {{{{{names.KIND}}}}}")],
        ),
        PanelSpec(
            title="Throttled time", unit="percentunit", width=8, min=0, max=1,
            thresholds=(Step(obj.gpu_throttled_share, RED),), runbooks=(names.ALERT_GPU_THROTTLED,),
            description=("Share of time the version's average GPU was throttled by its power cap or temperature "
                         "(DCGM power/thermal violation counters): slower with no error."),
            queries=[Query(f"sum by ({V}, {names.REASON}) (rate({sel(names.GPU_THROTTLE_SECONDS + '_total')}"
                           f"[{RATE}])) / on ({V}) group_left () max by ({V}) ({sel(names.GPU_COUNT)})",
                           f"{{{{{V}}}}} {{{{{names.REASON}}}}}")],
        ),
        PanelSpec(
            title="Clock throttle reasons", unit="short", width=8, min=0,
            runbooks=(names.ALERT_GPU_HW_SLOWDOWN,),
            description=("GPUs whose clocks are slowed now, by NVML reason (DCGM clock throttle reasons): "
                         "sw_power_cap and sw_thermal are the configured limits; hw_* is the hardware slowing "
                         "itself down (overheating, power brake, a failing supply)."),
            queries=[Query(f"max by ({V}, {names.REASON}) ({sel(names.GPU_CLOCK_THROTTLED)})",
                           f"{{{{{V}}}}} {{{{{names.REASON}}}}}")],
        ),
        PanelSpec(
            title="vLLM restarts", unit="short", width=8, runbooks=(names.ALERT_RESTART_STORM,),
            description="Restarts of the version's vLLM servers (counter resets between scrapes).",
            queries=[Query(f"sum by ({V}) (increase({sel(names.ENGINE_RESTARTS + '_total')}[{RATE}]))",
                           f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Replicas unhealthy, asleep or hung", unit="short", width=8, runbooks=(names.ALERT_ENGINE_HUNG,),
            description="Replicas whose vLLM reports engine_healthy 0, that sleep (sleep mode: idle on purpose), or "
                        "that are hung: requests running and none finished for scrape.hung_after_seconds.",
            queries=[Query(f"max by ({V}, {names.STATE}) ({sel(names.REPLICAS_IN_STATE)})",
                           f"{{{{{V}}}}} {{{{{names.STATE}}}}}")],
        ),
        PanelSpec(
            title="GPUs per version", unit="short", width=8,
            description="GPUs the observer joined to each version (pods listed in the fleet config).",
            queries=[Query(f"sum by ({V}) ({sel(names.GPU_COUNT)})", f"{{{{{V}}}}}")],
        ),
    ])
    replica = names.REPLICA
    replicas = Section("Replicas", [
        PanelSpec(
            title="Per-replica median TTFT", unit="s", width=12, runbooks=(names.ALERT_REPLICA_OUTLIER,),
            description="Window median time to first token of each replica, from its own histogram: one slow GPU "
                        "or node stands out here while the version's latency averages it away.",
            queries=[Query(f"max by ({V}, {replica}) ({sel(names.REPLICA_TTFT_P50)})",
                           f"{{{{{V}}}}} {{{{{replica}}}}}")],
        ),
        PanelSpec(
            title="Per-replica request share", unit="percentunit", width=12, min=0, max=1,
            description="Share of the version's window requests each replica served (routing skew).",
            queries=[Query(f"max by ({V}, {replica}) ({sel(names.REPLICA_SHARE)})",
                           f"{{{{{V}}}}} {{{{{replica}}}}}")],
        ),
    ])
    return DashboardSpec(
        slug="gpu", title="GPU",
        description="DCGM GPU metrics per model version: utilisation, memory, tensor/DRAM activity, health.",
        sections=[usage, health, replicas],
    )
