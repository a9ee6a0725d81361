"""Cost & efficiency: cost per token and per request, GPUs held, goodput, throughput per GPU and
energy per token — every panel split by version, so a canary that costs more per answer shows at once."""

from __future__ import annotations

from observer import conventions as names
from observer.render.dashboards.common import (
    RED,
    DashboardSpec,
    PanelSpec,
    Query,
    Section,
    Step,
    rate,
    sel,
    tenant_token_share,
)
from observer.render.dashboards.objectives import Objectives

V = names.VERSION
LEGEND = f"{{{{{V}}}}}"
GENERATION, COMPUTED, MEAN, GOODPUT = "generation", "computed", "mean", "goodput"  # label values


def dashboard(obj: Objectives) -> DashboardSpec:
    """The cost & efficiency dashboard."""
    budget = (Step(None, "green"), Step(obj.cost_budget_per_million, RED)) if obj.cost_budget_per_million else ()
    cost = Section("Cost", [
        PanelSpec(
            title="Cost per million generated tokens", unit="currencyUSD", width=8, thresholds=budget,
            runbooks=(names.ALERT_COST_OVER_BUDGET, names.ALERT_COST_REGRESSION),
            description=("Cost of the version's GPUs over the cost window (cost.window_seconds) per million "
                         "generated tokens: every attributed GPU × its price per GPU-hour, busy or idle. Absent "
                         "with no tokens or while a GPU model has no price."),
            queries=[Query(f"max by ({V}) ({sel(names.COST_PER_MILLION_TOKENS, kind=GENERATION)})",
                           LEGEND)],
        ),
        PanelSpec(
            title="Cost per million tokens of work", unit="currencyUSD", width=8,
            description=("The same cost per million tokens the engines computed: prompt tokens prefilled (not "
                         "served from the prefix cache or a KV transfer) plus generated ones. Flat while the cost "
                         "per generated token rises: the canary computes more per request (a prompt change that "
                         "breaks prefix caching), not slower. Absent unless every replica reports vLLM's "
                         "prompt_tokens_by_source (≥ 0.16)."),
            queries=[Query(f"max by ({V}) ({sel(names.COST_PER_MILLION_TOKENS, kind=COMPUTED)})", LEGEND)],
        ),
        PanelSpec(
            title="Cost per thousand requests", unit="currencyUSD", width=8,
            description="Cost over the cost window per thousand finished requests.",
            queries=[Query(f"max by ({V}) ({sel(names.COST_PER_THOUSAND_REQUESTS)})", LEGEND)],
        ),
        PanelSpec(
            title="Cost per hour", unit="currencyUSD", width=8,
            description="What the version's GPUs cost per hour now (rate of observer_cost_total × 3600).",
            queries=[Query(f"sum by ({V}) ({rate(names.COST + '_total')}) * 3600", LEGEND)],
        ),
        PanelSpec(
            title="Cost per hour by tenant", unit="currencyUSD", width=24, height=7,
            runbooks=(names.ALERT_NOISY_NEIGHBOUR,),
            description=("Showback: the version's cost per hour split among its tenants by their share of its "
                         "generated tokens (tenants from the sampling proxy and mirrored samples, "
                         "sampling.tenants: allow-listed and the busiest, the rest `other`). The split is by "
                         "generated tokens only: a tenant of long prompts and short answers is under-charged."),
            queries=[Query(f"{tenant_token_share()} * on ({V}) group_left "
                           f"sum by ({V}) ({rate(names.COST + '_total')}) * 3600",
                           f"{{{{{V}}}}} {{{{{names.TENANT}}}}}")],
        ),
        PanelSpec(
            title="GPUs held", unit="short", width=8,
            description="GPUs attributed to the version (DCGM, or cost.gpus_per_replica without it), by model.",
            queries=[Query(f"sum by ({V}, {names.GPU_MODEL}) ({rate(names.GPU_SECONDS + '_total')})",
                           f"{{{{{V}}}}} {{{{{names.GPU_MODEL}}}}}")],
        ),
        PanelSpec(
            title="Unpriced GPUs", unit="short", width=8, thresholds=(Step(None, "green"), Step(0.001, RED)),
            description="GPUs of models missing from cost.gpu_hour_prices: the cost ratios are absent while any "
                        "is held. Add the model's price.",
            queries=[Query(f"sum by ({V}, {names.GPU_MODEL}) ({rate(names.UNPRICED_GPU_SECONDS + '_total')})",
                           f"{{{{{V}}}}} {{{{{names.GPU_MODEL}}}}}")],
        ),
    ])
    goodput_line = (Step(None, RED), Step(obj.goodput, "green")) if obj.goodput else ()
    efficiency = Section("Efficiency", [
        PanelSpec(
            title="Goodput by version", unit="percentunit", width=12, min=0, max=1, thresholds=goodput_line,
            runbooks=(f"{names.ALERT_BURN_PAGE}:goodput",),
            description=("Share of requests that met the TTFT and time-per-output-token targets and did not fail, "
                         "over 1h: the lower bound from the histograms (1 − the goodput SLI's union bound on "
                         "bad requests) and the exact joint on sampled requests (the goodput live check)."),
            queries=[Query(f"1 - max by ({V}) ({names.RULE_SLI_ERROR_RATIO}1h{{{V}=~\"$version\", "
                           f"{names.SLI}=\"goodput\"}})", f"{LEGEND} lower bound"),
                     Query(f"1 - max by ({V}) ({sel(names.LIVE_CHECK_FAILURE_RATIO, model=False, check=GOODPUT)})",
                           f"{LEGEND} sampled (exact)")],
        ),
        PanelSpec(
            title="Generated tokens per second per GPU", unit="short", width=12,
            description="Throughput per GPU held: it falls when a version needs more GPUs for the same tokens.",
            queries=[Query(f"sum by ({V}) ({rate(names.GENERATION_TOKENS + '_total')}) / sum by ({V}) "
                           f"({rate(names.GPU_SECONDS + '_total')})", LEGEND)],
        ),
        PanelSpec(
            title="GPU utilisation", unit="percentunit", width=12, min=0, max=1,
            description="Mean GPU utilisation of the version's GPUs: idle capacity is paid for too.",
            queries=[Query(f"max by ({V}) ({sel(names.GPU_UTIL, stat=MEAN)})", LEGEND)],
        ),
        PanelSpec(
            title="Energy per generated token", unit="joule", width=12,
            description="GPU energy (DCGM total energy, or power × time) per generated token over the cost "
                        "window. Absent without DCGM power readings.",
            queries=[Query(f"max by ({V}) ({sel(names.ENERGY_PER_TOKEN, kind=GENERATION)})", LEGEND)],
        ),
    ])
    return DashboardSpec(
        slug="cost", title="Cost & efficiency",
        description="Cost, GPUs held, goodput, throughput and energy per model version.",
        sections=[cost, efficiency],
    )
