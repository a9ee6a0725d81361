"""Fleet overview: latency, traffic, finish reasons, capacity and SLO status, every panel split by version."""

from __future__ import annotations

from observer import conventions as names
from observer.render.dashboards.common import (
    BLUE,
    ORANGE,
    RED,
    YELLOW,
    DashboardSpec,
    PanelSpec,
    Query,
    Section,
    Step,
    mean_expr,
    quantile_expr,
    rate,
    sel,
)
from observer.render.dashboards.objectives import Objectives

V = names.VERSION
REQ = names.REQUESTS + "_total"
SLO = names.SLO


def _latency(title: str, hist: str, obj: Objectives, what: str) -> PanelSpec:
    queries = [Query(quantile_expr(hist, q), f"{{{{{V}}}}} p{round(q * 100)}") for q in names.QUANTILES]
    queries.append(Query(mean_expr(hist), f"{{{{{V}}}}} mean"))
    slo = obj.latency(hist)
    target = (f" Dashed line: the latency SLO threshold ({slo[0]:g} s for {slo[1]:.4g} of requests)."
              if slo else " No latency SLO is configured on this histogram.")
    return PanelSpec(
        title=title, unit="s", width=12, height=8, runbooks=(f"{names.ALERT_BURN_PAGE}:latency",) if slo else (),
        thresholds=(Step(slo[0], RED),) if slo else (),
        description=(f"{what} per version: p50/p95/p99 from the observer's accumulated histogram "
                     f"(`{hist}`, pod restarts handled) and the mean.{target}"),
        queries=queries,
    )


def _burn(window: str, obj: Objectives) -> str:
    # The alert renderer's recording rules: error ratio per SLO and version, ÷ the SLO's error budget.
    ratio = sel(names.RULE_SLI_ERROR_RATIO + window, model=False, namespace=False)
    objective = sel(names.RULE_SLO_OBJECTIVE, version_label="", model=False, namespace=False)
    return (f"max by ({SLO}, {V}) ({ratio}) / on ({SLO}) group_left () "
            f"(1 - max by ({SLO}) ({objective}))")


def _slo(obj: Objectives) -> Section:
    page = obj.burn_lines[0]
    burn_steps = tuple(Step(line.factor, RED if line.severity == "page" else ORANGE)
                       for line in sorted(obj.burn_lines, key=lambda line: line.factor))
    legend = f"{{{{{SLO}}}}} {{{{{V}}}}}"
    # Time-weighted mean of the recorded 1h error ratio over the period (the recorded windows stop at 3d).
    ratio = sel(names.RULE_SLI_ERROR_RATIO + page.window, model=False, namespace=False)
    objective = sel(names.RULE_SLO_OBJECTIVE, version_label="", model=False, namespace=False)
    spent = (f"max by ({SLO}, {V}) (avg_over_time({ratio}[{obj.period}])) / on ({SLO}) group_left () "
             f"(1 - max by ({SLO}) ({objective}))")
    return Section("Service level", [
        PanelSpec(
            title=f"SLO burn rate now ({page.window})", kind="stat", unit="x", width=8, height=6,
            thresholds=burn_steps, runbooks=(names.ALERT_BURN_PAGE, names.ALERT_BURN_TICKET),
            description=(f"Error-budget burn rate per SLO and version over {page.window}: the SLI error ratio "
                         f"÷ (1 − objective). 1× spends the budget exactly in {obj.period}; "
                         + ", ".join(f"{line.factor:g}× over {line.window} ({line.severity})"
                                     for line in obj.burn_lines) + " alert (with their short windows)."),
            queries=[Query(_burn(page.window, obj), legend, instant=True)],
        ),
        PanelSpec(
            title=f"Error budget remaining ({obj.period})", kind="stat", unit="percentunit", width=8, height=6,
            thresholds=(Step(None, RED), Step(0.25, YELLOW), Step(0.5, "green")),
            runbooks=(names.ALERT_BURN_TICKET,),
            description=(f"Share of each SLO's {obj.period} error budget left per version: 1 − the mean "
                         f"{page.window} burn rate over the period (time-weighted). Below 0 the SLO is missed."),
            queries=[Query(f"1 - {spent}", legend, instant=True)],
        ),
        PanelSpec(
            title="SLO burn rate by window", unit="x", width=8, height=6, thresholds=burn_steps,
            runbooks=(names.ALERT_BURN_PAGE,),
            description="Burn rate per SLO and version over the two paging windows; dashed lines: alert factors.",
            queries=[Query(_burn(line.window, obj), f"{legend} {line.window}") for line in obj.burn_lines[:2]],
        ),
    ])


def _traffic(obj: Objectives) -> Section:
    failed = rate(REQ, regex={names.FINISHED_REASON: "error|abort"})
    return Section("Traffic and errors", [
        PanelSpec(
            title="Requests per second", unit="reqps", width=8,
            description="Finished requests per second per version (all finish reasons).",
            queries=[Query(f"sum by ({V}) ({rate(REQ)})", f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Tokens per second (in / out)", unit="short", width=8,
            description="Prompt (in) and generated (out) tokens per second per version.",
            queries=[
                Query(f"sum by ({V}) ({rate(names.PROMPT_TOKENS + '_total')})", f"{{{{{V}}}}} in"),
                Query(f"sum by ({V}) ({rate(names.GENERATION_TOKENS + '_total')})", f"{{{{{V}}}}} out"),
            ],
        ),
        PanelSpec(
            title="Finish reasons", unit="reqps", width=8, stacked=True,
            description="Requests per second per version and vLLM finish reason (stop, length, abort, ...).",
            queries=[Query(f"sum by ({V}, {names.FINISHED_REASON}) ({rate(REQ)})",
                           f"{{{{{V}}}}} {{{{{names.FINISHED_REASON}}}}}")],
        ),
        PanelSpec(
            title="Errors and aborts", unit="percentunit", width=12,
            thresholds=(Step(obj.error_budget, RED),), runbooks=(f"{names.ALERT_BURN_PAGE}:availability",),
            description=(f"Share of requests per version that ended with `error` or `abort`. Dashed line: the "
                         f"availability SLO's error budget ({obj.error_budget:g}; "
                         f"{obj.error_reason_regex} count as errors)."),
            queries=[Query(
                f"sum by ({V}, {names.FINISHED_REASON}) ({failed})"
                f" / ignoring ({names.FINISHED_REASON}) group_left sum by ({V}) ({rate(REQ)})",
                f"{{{{{V}}}}} {{{{{names.FINISHED_REASON}}}}}")],
        ),
        PanelSpec(
            title="Mean tokens per request", unit="short", width=12,
            description="Mean prompt and generation length per finished request, per version (token counters "
                        "÷ requests).",
            queries=[
                Query(f"sum by ({V}) ({rate(names.PROMPT_TOKENS + '_total')}) / sum by ({V}) ({rate(REQ)})",
                      f"{{{{{V}}}}} prompt"),
                Query(f"sum by ({V}) ({rate(names.GENERATION_TOKENS + '_total')}) / sum by ({V}) ({rate(REQ)})",
                      f"{{{{{V}}}}} generation"),
            ],
        ),
    ])


def _capacity(obj: Objectives) -> Section:
    return Section("Capacity", [
        PanelSpec(
            title="Queue depth per replica", unit="short", width=8, runbooks=(names.ALERT_QUEUE_DEPTH,),
            thresholds=(Step(obj.queue_depth_per_replica, RED),),
            description="Requests waiting in vLLM's scheduler per replica of each version (vLLM num_requests_waiting).",
            queries=[Query(f"max by ({V}) ({sel(names.QUEUE_DEPTH_PER_REPLICA)})", f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Running requests", unit="short", width=8,
            description="Requests being decoded per version (vLLM num_requests_running, summed over replicas).",
            queries=[Query(f"sum by ({V}) ({sel(names.RUNNING_REQUESTS)})", f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="KV-cache usage", unit="percentunit", width=8, min=0, max=1,
            thresholds=(Step(obj.kv_cache_usage, RED),), runbooks=(names.ALERT_KV_CACHE,),
            description=(f"KV-cache blocks in use (0–1) per version, mean and max over replicas. Dashed line: "
                         f"{obj.kv_cache_usage:g}, above which preemptions start."),
            queries=[Query(f"max by ({V}, {names.STAT}) ({sel(names.KV_CACHE_USAGE)})",
                           f"{{{{{V}}}}} {{{{{names.STAT}}}}}")],
        ),
        PanelSpec(
            title="Preemptions per second", unit="short", width=8, runbooks=(names.ALERT_PREEMPTIONS,),
            thresholds=(Step(obj.preemptions_per_second, RED),),
            description="Requests preempted by vLLM's scheduler (KV cache exhausted) per second, per version.",
            queries=[Query(f"sum by ({V}) ({rate(names.PREEMPTIONS + '_total')})", f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Prefix-cache hit rate", unit="percentunit", width=8, min=0, max=1,
            description="Share of prompt tokens served from the prefix cache per version (hits ÷ queries, tokens).",
            queries=[Query(f"sum by ({V}) ({rate(names.PREFIX_CACHE_HITS + '_total')})"
                           f" / sum by ({V}) ({rate(names.PREFIX_CACHE_QUERIES + '_total')})", f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Replicas up", unit="short", width=8, thresholds=(Step(None, RED), Step(1, BLUE)),
            runbooks=(names.ALERT_TARGET_DOWN,),
            description="vLLM replicas of each version whose /metrics the observer scraped successfully.",
            queries=[Query(f"sum by ({V}) ({sel(names.REPLICAS)})", f"{{{{{V}}}}}")],
        ),
    ])


def _shape() -> Section:
    def p50_p95(hist: str) -> list[Query]:
        return [Query(quantile_expr(hist, q), f"{{{{{V}}}}} p{round(q * 100)}") for q in (0.5, 0.95)]

    return Section("Request shape", [
        PanelSpec(title="Prompt length", unit="short", width=6, queries=p50_p95(names.HIST_PROMPT_LENGTH),
                  description="Prompt tokens per request, p50/p95 per version (vLLM request_prompt_tokens)."),
        PanelSpec(title="Generation length", unit="short", width=6,
                  queries=p50_p95(names.HIST_GENERATION_LENGTH),
                  description="Generated tokens per request, p50/p95 per version "
                              "(vLLM request_generation_tokens)."),
        PanelSpec(title="Prefill and decode time", unit="s", width=6,
                  queries=[Query(quantile_expr(names.HIST_PREFILL, 0.95), f"{{{{{V}}}}} prefill p95"),
                           Query(quantile_expr(names.HIST_DECODE, 0.95), f"{{{{{V}}}}} decode p95")],
                  description="Time in the prefill and in the decode phase per request, p95 per version."),
        PanelSpec(title="Requested max tokens", unit="short", width=6,
                  queries=p50_p95(names.HIST_MAX_GENERATION_TOKENS),
                  description="The max_tokens clients ask for, p50/p95 per version "
                              "(vLLM request_max_num_generation_tokens)."),
        PanelSpec(title="Prompts near the context limit", unit="percentunit", width=8, min=0,
                  runbooks=(names.ALERT_PROMPTS_NEAR_LIMIT,),
                  queries=[Query(f"max by ({V}) ({sel(names.WIN_PROMPT_NEAR_LIMIT, model=False)})", f"{{{{{V}}}}}")],
                  description="Share of the window's prompts longer than observer_prompt_near_limit_threshold_"
                              "tokens (the largest prompt-length bucket edge at or under 0.9 × max_model_len): "
                              "longer ones are refused."),
        PanelSpec(title="Requests without max_tokens", unit="percentunit", width=8, min=0,
                  runbooks=(names.ALERT_UNCAPPED,),
                  queries=[Query(f"sum by ({V}) ({rate(names.PROXY_UNCAPPED + '_total')}) / sum by ({V}) "
                                 f"({rate(names.PROXY_REQUESTS + '_total')})", f"{{{{{V}}}}}")],
                  description="Share of proxied requests that set no max_tokens (or max_completion_tokens): "
                              "each may run to max_model_len."),
        PanelSpec(title="TTFT tail (p99 ÷ p50)", unit="x", width=8, min=0, runbooks=(names.ALERT_TAIL_RATIO,),
                  queries=[Query(f"{quantile_expr(h, 0.99)} / {quantile_expr(h, 0.5)}", f"{{{{{V}}}}} {what}")
                           for h, what in ((names.HIST_TTFT, "TTFT"), (names.HIST_ITL, "inter-token"))],
                  description="p99 over p50 per version: how much longer the slowest requests wait than the "
                              "typical one. A ratio that grows while p50 stays is queueing behind long prompts, "
                              "preemptions or one slow replica."),
    ])


def _outside_engine() -> Section:
    part = names.PART
    spans = names.ENGINE_SPAN_REQUESTS + "_total"
    joined = rate(spans, outcome="joined")
    return Section("Outside the engine (engine spans)", [
        PanelSpec(
            title="Time outside the engine", unit="s", width=16,
            description=("What a proxied request spent outside vLLM's engine, per version: the proxy's end-to-end "
                         "time (part e2e) and time to the first streamed chunk (part ttft) minus the engine's own "
                         "figures from its OTLP llm_request span, joined by trace id. API-server HTTP handling, "
                         "tokenization, detokenization and the network: none of it is in any vllm: series."),
            queries=[Query(quantile_expr(names.OUTSIDE_ENGINE, q, by=f"{V}, {part}"),
                           f"{{{{{V}}}}} {{{{{part}}}}} p{round(q * 100)}") for q in (0.5, 0.99)],
        ),
        PanelSpec(
            title="Requests joined to their engine span", unit="percentunit", width=8, min=0, max=1,
            thresholds=(Step(None, RED), Step(0.9, "green")), runbooks=(names.ALERT_ENGINE_SPANS_MISSING,),
            description=("Share of proxied generation requests whose engine span arrived within "
                         "sampling.engine_spans.wait_seconds, per version. Low: the servers are not exporting "
                         "(--otlp-traces-endpoint), the exporter cannot reach the observer, or its token is wrong."),
            queries=[Query(f"sum by ({V}) ({joined}) / sum by ({V}) ({rate(spans)})", f"{{{{{V}}}}}")],
        ),
    ])


def _path() -> Section:
    p95 = [Query(quantile_expr(h, 0.95), f"{{{{{V}}}}} {where}") for h, where in (
        (names.HIST_TTFT, "engine"), (names.HIST_ROUTER_TTFT, "router"), (names.PROXY_TTFT, "proxy"),
        (names.PROBE_TTFT, "probe"))]
    golden = sel(names.GOLDEN_TTFT, model=False, quantile="0.95")
    p95.append(Query(f"max by ({V}) ({golden})", f"{{{{{V}}}}} golden"))
    code = names.CODE
    answers = [Query(f"sum by ({V}) ({rate(c + '_total', regex={code: '[^2]..'})}) / sum by ({V}) "
                     f"({rate(c + '_total')})", f"{{{{{V}}}}} {where}")
               for c, where in ((names.PROBE_REQUESTS, "probe"), (names.PROXY_REQUESTS, "proxy"))]
    return Section("The users' path", [
        PanelSpec(
            title="Time to first token along the path (p95)", unit="s", width=12, height=8,
            runbooks=(names.ALERT_PATH_TTFT,),
            description=("p95 TTFT per version where it is measured: the engine (vLLM, from when it has the "
                         "request), the router (llm-d EPP / Dynamo, its queue included), the sampling proxy (what "
                         "users wait), the synthetic probe (through the configured route, also when no user "
                         "sends) and the last golden replay. A gap between the engine and the others is time "
                         "in front of it."),
            queries=p95,
        ),
        PanelSpec(
            title="Answers not 2xx: probe and proxy", unit="percentunit", width=6, height=8, min=0,
            runbooks=(f"{names.ALERT_BURN_PAGE}:client",),
            description=("Share of the synthetic probe's and of proxied requests answered other than 2xx (502: no "
                         "connection or a broken stream; 504: timeout; 499: the client left)."),
            queries=answers,
        ),
        PanelSpec(
            title="Turned away before the engine", unit="reqps", width=6, height=8,
            runbooks=(names.ALERT_LOAD_SHEDDING,),
            description=("Requests refused before the engine ran them, per version: 429/503 answers the sampling "
                         "proxy saw, and vLLM's admission rejections (its queue limits; in no finished count)."),
            queries=[Query(f"sum by ({V}) ({rate(names.PROXY_REQUESTS + '_total', regex={code: '429|503'})})",
                           f"{{{{{V}}}}} shed (proxy)"),
                     Query(f"sum by ({V}) ({rate(names.ADMISSION_REJECTIONS + '_total')})",
                           f"{{{{{V}}}}} admission rejected (vLLM)")],
        ),
    ])


def dashboard(obj: Objectives) -> DashboardSpec:
    """The fleet overview."""
    latency = Section("Latency (per version)", [
        _latency("Time to first token", names.HIST_TTFT, obj, "Time to first token"),
        _latency("Inter-token latency", names.HIST_ITL, obj, "Time between output tokens"),
        _latency("End-to-end latency", names.HIST_E2E, obj, "Request latency (arrival to finish)"),
        _latency("Queue time", names.HIST_QUEUE, obj, "Time waiting in vLLM's queue"),
    ])
    return DashboardSpec(
        slug="fleet", title="Fleet overview",
        description="Latency, traffic, finish reasons, capacity and SLO status of every model version.",
        sections=[_slo(obj), latency, _path(), *([_outside_engine()] if obj.engine_spans else []), _traffic(obj),
                  _capacity(obj), _shape()],
    )
