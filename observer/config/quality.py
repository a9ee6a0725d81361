"""Golden sets, rule checks and LLM-as-judge. Owned by that area; the root config includes it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from observer.config.base import FilePath, Spec, compiled_pattern, shipped

LiveCheck = Literal["empty", "refusal", "repetition", "truncation", "invalid_json", "goodput", "tool_call"]
"""Rule checks that need no reference, so they can run on every sampled live output.

`invalid_json` scores only samples that expected JSON (the output opens with `{`/`[`, fenced or not, or
the prompt mentions JSON); the rest are undecided and count in neither failures nor total. `tool_call` scores
only samples whose reply made tool calls: each must have the OpenAI shape, name a declared function and carry
arguments that parse as a JSON object matching that function's parameter schema.
"""

LIVE_CHECKS: tuple[LiveCheck, ...] = ("empty", "refusal", "repetition", "truncation", "invalid_json", "goodput",
                                      "tool_call")


class JudgeSpec(Spec):
    """The LLM-as-judge endpoint (any OpenAI-compatible server; a vLLM server in production)."""

    url: str | None = Field(None, description="OpenAI-compatible base URL (…/v1). Unset: judging is off.")
    model: str | None = Field(None, description="Judge model name sent in each request (required with url).")
    timeout_seconds: float = Field(30.0, gt=0, le=600, description="Per-call HTTP timeout.")
    max_retries: int = Field(3, ge=0, le=10, description="Retries on timeouts, 429 and 5xx (with backoff).")
    backoff_seconds: float = Field(0.5, ge=0, le=60, description="First retry delay; doubles each retry.")
    concurrency: int = Field(4, ge=1, le=256, description="Most judge calls in flight at once.")
    budget_per_hour: int = Field(1000, ge=1, description="Most judge HTTP calls in any sliding hour.")
    max_tokens: int = Field(400, ge=32, le=8192, description="Completion token limit of a verdict.")
    prompt_path: FilePath = Field(default_factory=lambda: shipped("evals", "judge_prompt.yaml"),
                                  description="Versioned judge prompt template (default: the one the package ships).")
    rubric_dir: FilePath = Field(default_factory=lambda: shipped("evals", "rubrics"),
                                 description="Directory of rubric YAML files (name = file stem; default: the "
                                             "rubrics the package ships).")

    @model_validator(mode="after")
    def _model_with_url(self) -> JudgeSpec:
        if self.url is not None and not self.model:
            raise ValueError("judge.model is required when judge.url is set")
        return self


class GoodputCheckSpec(Spec):
    """Targets of the `goodput` live check: the exact joint condition, per sampled request."""

    ttft_seconds: float = Field(2.5, gt=0, description="TTFT target (client side, as the proxy measured it).")
    tpot_seconds: float = Field(0.1, gt=0, description="Time-per-output-token target.")
    error_reasons: list[str] = Field(default_factory=lambda: ["error", "abort"],
                                     description="finish reasons that make a request bad.")


class LiveSpec(Spec):
    """Scoring of sampled live outputs from the sample store."""

    enabled: bool = Field(True, description="Score stored live samples (needs the sampling area's store).")
    interval_seconds: float = Field(60.0, gt=0, description="Seconds between live scoring passes.")
    batch_size: int = Field(500, ge=1, le=100_000, description="Most samples scored per version and pass.")
    checks: list[LiveCheck] = Field(default_factory=lambda: list(LIVE_CHECKS),
                                    description="Rule checks run on every live sample.")
    judge_fraction: float = Field(0.0, ge=0, le=1, description="Share of live samples also sent to the judge.")
    judge_rubric: str = Field("helpfulness", description="Rubric (from judge.rubric_dir) for live judging.")
    window_seconds: float = Field(3600.0, gt=0, description="Window of the exported live failure ratios.")
    goodput: GoodputCheckSpec = Field(default_factory=GoodputCheckSpec,
                                      description="Targets of the goodput check (keep them equal to slo.goodput).")

    @field_validator("checks")
    @classmethod
    def _unique(cls, v: list[LiveCheck]) -> list[LiveCheck]:
        if len(set(v)) != len(v):
            raise ValueError("live.checks lists a check twice")
        return v


PairedRule = Literal["refusal", "empty", "invalid_json", "truncation", "repetition"]
PAIRED_RULE_DEFAULTS: tuple[PairedRule, ...] = ("refusal", "empty", "invalid_json", "truncation")


class PairwiseSpec(Spec):
    """The pairwise judge of shadow pairs (which answer is better), asked in both orders."""

    rubric: str = Field("helpfulness", description="Rubric (from judge.rubric_dir) whose criteria the pairwise "
                                                   "judge compares the answers with.")
    prompt_path: FilePath = Field(default_factory=lambda: shipped("evals", "pairwise_prompt.yaml"),
                                  description="Versioned pairwise judge prompt (default: the one the package ships).")
    votes: int = Field(1, ge=1, le=9, description="Answers per order (self-consistency): above 1 they are asked "
                                                  "at `temperature` and the majority counts.")
    temperature: float = Field(0.7, gt=0, le=2, description="Sampling temperature of the judge when votes > 1.")


class ShadowSpec(Spec):
    """Shadow replay: stable's sampled live prompts answered again by the canary (and stable), off the user path."""

    enabled: bool = Field(False, description="Replay sampled stable prompts to each canary (needs the sample "
                                             "store) and judge the pairs.")
    targets: dict[str, str] = Field(
        default_factory=dict,
        description="Version name → OpenAI base URL (…/v1) replays are sent to. Point it at a shadow replica "
                    "that is not a scrape target of the version (its load then never reaches the serving "
                    "SLIs); unset: the version's `openai` URL (the serving pods: replays queue with users).")
    baseline: Literal["replay", "stored"] = Field(
        "replay", description="replay: stable answers the prompt again, next to the canary (same input, same "
                              "sampling: the pair is fair; twice the calls); stored: stable's live answer is "
                              "used (half the calls, but a system prompt or temperature the live request had "
                              "is not in the stored prompt).")
    rate_per_second: float = Field(0.5, gt=0, le=100, description="Most replays started per second (all canaries).")
    daily_budget: int = Field(2000, ge=1, description="Most pairs per canary per UTC day; then the paired "
                                                      "metric says why it stopped.")
    concurrency: int = Field(2, ge=1, le=64, description="Replays in flight at once.")
    queue_size: int = Field(200, ge=1, le=100_000, description="Prompts waiting for a replay; more are dropped "
                                                               "(counted).")
    interval_seconds: float = Field(30.0, gt=0, description="Seconds between scans of new stable samples.")
    max_prompt_chars: int = Field(8000, ge=1, description="Longer prompts are not replayed (counted).")
    skip_patterns: list[str] = Field(
        default_factory=lambda: [r"(?im)^tool:", r"(?i)\bnon-idempotent\b", r"(?i)\bdo not replay\b"],
        description="Regular expressions: a stored prompt matching one is not replay-safe (tool results, "
                    "prompts marked non-idempotent) and is skipped (counted).")
    max_tokens: int = Field(256, ge=1, le=65536, description="Completion token limit of a replay.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of replays (both arms).")
    timeout_seconds: float = Field(60.0, gt=0, le=3600, description="Per-replay timeout; a timeout is an error, "
                                                                      "never a win for either side.")
    rules: list[PairedRule] = Field(
        default_factory=lambda: list(PAIRED_RULE_DEFAULTS),
        description="Rule checks run on both answers of every pair (paired metrics name them in paired_check).")
    judge: bool = Field(True, description="Ask the pairwise judge (needs quality.judge.url).")
    pairwise: PairwiseSpec = Field(default_factory=PairwiseSpec, description="The pairwise judge.")

    @field_validator("skip_patterns")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        return [compiled_pattern(p, "skip pattern") for p in v]


class ReliabilitySpec(Spec):
    """The judge checked against the human-labelled anchors, whenever it changes and at least daily."""

    anchors_path: FilePath | None = Field(None, description="Labelled anchor set (e.g. evals/anchors.jsonl); null: "
                                                       "off. Each re-grade costs one judge call per anchor.")
    interval_seconds: float = Field(86400.0, ge=60, description="Re-grade at least this often (and at start, and "
                                                                "whenever the judge model, prompt or a rubric "
                                                                "hash changes).")
    kappa_floor: float = Field(0.6, ge=-1, le=1, description="Cohen's κ below which the judge is not trusted "
                                                             "(alert ObserverJudgeAgreementLow).")
    max_items: int = Field(200, ge=1, description="Most anchors judged per re-grade (the calls count against "
                                                  "the judge's hourly budget).")


class QualitySpec(Spec):
    """Golden sets, rule checks and LLM-as-judge."""

    enabled: bool = Field(True, description="Turn this area on or off.")
    golden_dirs: list[FilePath] = Field(default_factory=lambda: [shipped("golden_sets")],
                                        description="Directories of golden-set files (*.yaml, *.yml, *.jsonl); "
                                                    "default: the example sets the package ships.")
    golden_sets: list[str] = Field(default_factory=list,
                                   description="Golden-set names (file stems) to replay; empty: all found.")
    interval_seconds: float = Field(900.0, gt=0, description="Seconds between scheduled golden replays.")
    run_at_start: bool = Field(True, description="Replay the golden sets once as soon as the service starts.")
    concurrency: int = Field(4, ge=1, le=256, description="Golden requests in flight per version at once.")
    request_timeout_seconds: float = Field(60.0, gt=0, le=3600, description="Per-item request timeout.")
    max_tokens: int = Field(512, ge=1, le=65536, description="Completion token limit of a golden request.")
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature of golden requests.")
    similarity_threshold: float = Field(0.75, ge=-1, le=1,
                                        description="Default cosine threshold of `similarity` assertions.")
    judge: JudgeSpec = Field(default_factory=JudgeSpec, description="LLM-as-judge endpoint; off unless set.")
    live: LiveSpec = Field(default_factory=LiveSpec, description="Live-sample scoring.")
    shadow: ShadowSpec = Field(default_factory=ShadowSpec, description="Shadow replay and paired comparison.")
    reliability: ReliabilitySpec = Field(default_factory=ReliabilitySpec,
                                         description="Continuous judge calibration against the anchors.")
