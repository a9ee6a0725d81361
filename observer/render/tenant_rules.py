"""The noisy neighbour: one tenant takes most of a version's generated tokens while another tenant's first tokens
slow down (tenants as bounded labels, sampling.tenants)."""

from __future__ import annotations

from observer import conventions as names
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rulemodel import Alert, Example, Firing, Series

_V, _T = names.VERSION, names.TENANT

NOISY_SHARE = 0.5
"""Share of a version's generated tokens above which one named tenant is the neighbour to suspect."""
NOISY_SLOWDOWN = 2.0
"""Another tenant's p95 TTFT against its own an hour before, above which it is a victim."""
BASELINE_SECONDS = 3600.0
"""How far back a victim's own p95 is read: the same tenant before the neighbour grew."""


def noisy_neighbour(a: Alerting) -> Alert:
    """One named tenant over NOISY_SHARE of a version's generated tokens, while another tenant of the version
    (`other` and `none` included) has its p95 TTFT over NOISY_SLOWDOWN× its own an hour before."""
    window = duration(600 * a.time_scale)
    offset = duration(BASELINE_SECONDS * a.time_scale)
    # The examples' series: 90 minutes as before (the baseline hour and a window before it), then 50 of the change;
    # evaluated 40 minutes into it, when the change has filled the window and `for`, and its hour back is before it.
    interval = 60.0 * a.time_scale
    half, steps = 90, 140
    at = (half + 40) * interval
    tokens = f"{names.TENANT_TOKENS}_total"
    named = f'{tokens}{{{names.KIND}="generation",{_T}!~"other|none"}}'
    every = f'{tokens}{{{names.KIND}="generation"}}'
    share = (f"sum by ({_V}, {_T}) (rate({named}[{window}]))\n/ ignoring ({_T}) group_left\n"
             f"sum by ({_V}) (rate({every}[{window}])) > {NOISY_SHARE!r}")

    def p95(shift: str) -> str:
        return (f"histogram_quantile(0.95, sum by ({_V}, {_T}, {names.LE}) "
                f"(rate({names.TENANT_TTFT}_bucket[{window}]{shift})))")

    slowed = f"{p95('')} > {NOISY_SLOWDOWN!r} * {p95(f' offset {offset}')}"
    expr = f"({share})\nand on ({_V})\n(count by ({_V}) (({slowed}) unless on ({_V}, {_T}) ({share})) > 0)"

    def gen(tenant: str, before: int, after: int) -> Series:
        return Series(f'{tokens}{{{_V}="canary",{_T}="{tenant}",{names.KIND}="generation"}}',
                      f"0+{before}x{half} {before * half}+{after}x{steps - half}")

    def ttft(tenant: str, *, slows: bool) -> tuple[Series, ...]:
        # 100 requests a minute: 95 under 0.1 s (p95 0.1 s); slowed, 95 under 1 s and none under 0.1 s (p95 1 s)
        out = []
        for le, before, after in (("0.1", 95, 0 if slows else 95), ("1.0", 100, 95 if slows else 100),
                                  ("+Inf", 100, 100)):
            out.append(Series(f'{names.TENANT_TTFT}_bucket{{{_V}="canary",{_T}="{tenant}",{names.LE}="{le}"}}',
                              f"0+{before}x{half} {before * half}+{after}x{steps - half}"))
        return tuple(out)

    return Alert(
        name=names.ALERT_NOISY_NEIGHBOUR, expr=expr, severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: tenant {{ $labels.tenant }} crowds out the others",
        description=(f"Tenant {{{{ $labels.tenant }}}} generates {{{{ $value | humanizePercentage }}}} of version "
                     f"{{{{ $labels.version }}}}'s tokens (over {NOISY_SHARE:.0%}, {window}) while another tenant's "
                     f"p95 time to first token is over {NOISY_SLOWDOWN:g}× its own {offset} before, for "
                     f"{duration(a.limits.leading_for)}: one tenant's long generations fill the batch and the KV "
                     f"cache, and the others queue behind them."),
        runbook="noisy-neighbour",
        examples=(
            Example(f"{names.ALERT_NOISY_NEIGHBOUR} fires: bigco's tokens ×9, acme's TTFT ×10",
                    (gen("bigco", 100, 900), gen("acme", 100, 100), *ttft("acme", slows=True),
                     *ttft("bigco", slows=False)), at, interval,
                    (Firing(((_T, "bigco"), (_V, "canary")), 0.9),)),
            Example(f"{names.ALERT_NOISY_NEIGHBOUR} quiet when nobody else slows down",
                    (gen("bigco", 100, 900), gen("acme", 100, 100), *ttft("acme", slows=False),
                     *ttft("bigco", slows=False)), at, interval),
            Example(f"{names.ALERT_NOISY_NEIGHBOUR} quiet when a tenant slows with no tenant over half the tokens",
                    (gen("bigco", 100, 100), gen("acme", 100, 100), *ttft("acme", slows=True),
                     *ttft("bigco", slows=False)), at, interval),
            Example(f"{names.ALERT_NOISY_NEIGHBOUR} quiet when only the busy tenant itself slows down",
                    (gen("bigco", 100, 900), gen("acme", 100, 100), *ttft("acme", slows=False),
                     *ttft("bigco", slows=True)), at, interval),
        ),
    )
