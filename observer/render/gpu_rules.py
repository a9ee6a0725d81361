"""GPU health from DCGM: ECC errors, row remapping and throttling, each with its examples."""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rule_timing import timing
from observer.render.rulemodel import Alert, Example, Firing, Labels, Series

_V = names.VERSION


def gpu_health(a: Alerting) -> tuple[Alert, Alert, Alert]:
    """Silent GPU degradation from DCGM: uncorrectable memory errors, and throttling by power or temperature."""
    interval, at, steps = timing(a, a.limits.leading_for)
    mem = names.GPU_MEMORY_ERRORS
    key: Labels = ((_V, "canary"),)
    memory = Alert(
        name=names.ALERT_GPU_MEMORY_ERRORS,
        expr=(f"max by ({_V}) ({selector(mem, regex={names.KIND: 'dbe_volatile|remap_failures'})}) > 0"),
        severity="page",  # results may already be wrong: drain it now, not at the next business hour
        summary="{{ $labels.version }}: a GPU reports uncorrectable memory errors",
        description=("A GPU of version {{ $labels.version }} reports uncorrectable (double-bit) ECC errors since "
                     "its driver loaded, or a failed row remap ({{ printf \"%.0f\" $value }}): its results can "
                     "be wrong or it can fail any moment. Drain it."),
        runbook="gpu-memory-errors",
        examples=(Example(f"{names.ALERT_GPU_MEMORY_ERRORS} fires on a double-bit ECC error",
                          (Series(selector(mem, {_V: "canary", names.KIND: "dbe_volatile"}), f"0 2x{steps}"),
                           Series(selector(mem, {_V: "canary", names.KIND: "sbe_volatile"}), f"40x{steps}")),
                          at, interval, (Firing(key, 2.0),)),
                  Example(f"{names.ALERT_GPU_MEMORY_ERRORS} quiet on corrected (single-bit) errors only",
                          (Series(selector(mem, {_V: "canary", names.KIND: "dbe_volatile"}), f"0x{steps}"),
                           Series(selector(mem, {_V: "canary", names.KIND: "sbe_volatile"}), f"40x{steps}")),
                          at, interval)),
    )
    thr = names.GPU_THROTTLE_SECONDS + "_total"
    window = duration(600 * a.time_scale)
    limit = a.limits.throttled_share
    # rate() over a counter that starts at zero ramps up over its window: the example runs for the window
    # plus the hold time.
    steps = round((a.limits.leading_for + 600 * a.time_scale) / interval) + 3
    at = steps * interval
    share = (f"sum by ({_V}, {names.REASON}) (rate({thr}[{window}]))\n/ on ({_V}) group_left ()\n"
             f"max by ({_V}) ({names.GPU_COUNT})")
    hot = round(min(1.0, 3 * limit) * interval, 6)
    cool = round(limit / 4 * interval, 6)

    def series(per_step: float) -> tuple[Series, ...]:
        return (Series(selector(thr, {_V: "canary", names.REASON: "thermal"}), f"0+{per_step!r}x{steps}"),
                Series(selector(names.GPU_COUNT, {_V: "canary"}), f"1x{steps}"))

    throttled = Alert(
        name=names.ALERT_GPU_THROTTLED, expr=f"{share}\n> {limit!r}", severity="warning",
        for_seconds=a.limits.leading_for, summary="{{ $labels.version }}: GPUs throttled ({{ $labels.reason }})",
        description=(f"The average GPU of version {{{{ $labels.version }}}} was throttled by its "
                     f"{{{{ $labels.reason }}}} limit {{{{ $value | humanizePercentage }}}} of the time for "
                     f"{duration(a.limits.leading_for)} (threshold {limit:.0%}): it runs slower than its siblings "
                     "without any error, so latency degrades silently."),
        runbook="gpu-throttled",
        examples=(Example(f"{names.ALERT_GPU_THROTTLED} fires when thermally throttled {hot / interval:.0%}",
                          series(hot), at, interval, (Firing(((names.REASON, "thermal"), (_V, "canary")),
                                                             hot / interval),)),
                  Example(f"{names.ALERT_GPU_THROTTLED} quiet at {cool / interval:.1%}", series(cool), at,
                          interval)),
    )
    clocks = names.GPU_CLOCK_THROTTLED
    hw = "|".join(names.HARDWARE_SLOWDOWNS)
    slowdown = Alert(
        name=names.ALERT_GPU_HW_SLOWDOWN,
        expr=f"max by ({_V}, {names.REASON}) ({selector(clocks, regex={names.REASON: hw})}) > 0",
        severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: GPU clocks slowed by the hardware ({{ $labels.reason }})",
        description=("{{ printf \"%.0f\" $value }} GPU(s) of version {{ $labels.version }} report the NVML clock "
                     f"throttle reason {{{{ $labels.reason }}}} for {duration(a.limits.leading_for)}: the hardware "
                     "halves its clocks or more (overheating, a power-brake signal, a failing power supply) — "
                     "not a software cap; the node needs a look."),
        runbook="gpu-throttled",
        examples=(Example(f"{names.ALERT_GPU_HW_SLOWDOWN} fires on a hardware thermal slowdown",
                          (Series(selector(clocks, {_V: "canary", names.REASON: "hw_thermal"}), f"1x{steps}"),
                           Series(selector(clocks, {_V: "canary", names.REASON: "sw_power_cap"}), f"2x{steps}")),
                          at, interval, (Firing(((names.REASON, "hw_thermal"), (_V, "canary")), 1.0),)),
                  Example(f"{names.ALERT_GPU_HW_SLOWDOWN} quiet on a software power cap only",
                          (Series(selector(clocks, {_V: "canary", names.REASON: "hw_thermal"}), f"0x{steps}"),
                           Series(selector(clocks, {_V: "canary", names.REASON: "sw_power_cap"}), f"2x{steps}")),
                          at, interval)),
    )
    return memory, throttled, slowdown
