"""Live output sampling, mirror ingest, sample store and redaction; the root config includes it."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from observer.config.base import Spec

KIND_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
BUILTIN_REDACTIONS: tuple[str, ...] = ("api_key", "bearer_token", "email", "ipv6", "ipv4", "card", "phone")
"""Built-in redaction kinds, in the order they are applied."""


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"listen address {value!r} must be HOST:PORT")
    return value


class VersionSamplingSpec(Spec):
    """Per-version overrides: where its proxy listens, where it forwards, how much it samples."""

    fraction: float | None = Field(None, ge=0, le=1,
                                   description="Share of requests sampled (default: sampling.fraction).")
    listen: str | None = Field(
        None, description="HOST:PORT of an in-process proxy started by `observer serve` (unset: none)."
    )
    upstream: str | None = Field(
        None, description="Base URL the proxy forwards to (default: the version's `openai` URL without /v1)."
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str | None) -> str | None:
        return None if v is None else _check_listen(v)


class ProxySpec(Spec):
    """The sampling reverse proxy in front of a version's vLLM."""

    listen: str = Field("0.0.0.0:8001", description="Default HOST:PORT of `observer proxy`.")
    connect_timeout_seconds: float = Field(5.0, gt=0, le=120, description="Upstream connect timeout.")
    read_timeout_seconds: float = Field(
        600.0, gt=0, description="Upstream idle-read timeout (a stream may pause this long between chunks)."
    )
    max_connections: int = Field(1000, ge=1, le=100_000, description="Most idle upstream connections kept.")
    max_capture_bytes: int = Field(
        1024 * 1024, ge=1024, description="A sampled reply larger than this is forwarded but not sampled."
    )
    ready_path: str = Field("/v1/models", description="Upstream path probed by the proxy's /readyz.")
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024,
                                   description="Largest request body forwarded (buffered to forward it); larger: "
                                               "413, refused from Content-Length before reading.")
    max_client_connections: int = Field(1000, ge=1, le=100_000,
                                        description="Open client connections; one more is answered 503.")
    header_timeout_seconds: float = Field(10.0, gt=0, le=600,
                                          description="Time a client has to send a request's head (slowloris).")
    max_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                  description="Largest request head (line + headers); larger: 431, never "
                                              "forwarded upstream.")
    ingest_url: str | None = Field(
        None, description="Observer base URL the proxy posts samples to (unset: write the local store)."
    )
    gateway_timeout_seconds: float | None = Field(
        None, gt=0, le=86_400,
        description="The read timeout of the gateway in front of the proxy (nginx proxy_read_timeout, HAProxy "
                    "timeout server). A client that leaves after waiting this long for a byte is that gateway "
                    "timing out, not a user's stop: counted as code 504 (unavailable), not 499.")


class ReservoirSpec(Spec):
    """Per-window reservoir: at most `max_per_window` samples per version and window, chosen uniformly."""

    window_seconds: float = Field(10.0, gt=0, le=3600, description="Length of a sampling window.")
    max_per_window: int = Field(100, ge=1, le=1_000_000,
                                description="Most samples kept per version and window.")
    seed: int = Field(0, description="Seed of the sampling random generator (reproducible sampling).")


class RedactionSpec(Spec):
    """Redaction of personal data and secrets before anything is stored."""

    enabled: bool = Field(True, description="Redact prompts and outputs before storage.")
    kinds: list[str] = Field(
        default_factory=lambda: list(BUILTIN_REDACTIONS),
        description=f"Built-in kinds to apply: {', '.join(BUILTIN_REDACTIONS)}.",
    )
    patterns: dict[str, str] = Field(
        default_factory=dict,
        description="Extra kinds: name ([a-z][a-z0-9_]*) → Python regex; matches become <NAME>.",
    )

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: list[str]) -> list[str]:
        unknown = sorted(set(v) - set(BUILTIN_REDACTIONS))
        if unknown:
            raise ValueError(f"unknown redaction kind(s) {unknown}; known: {list(BUILTIN_REDACTIONS)}")
        return v

    @field_validator("patterns")
    @classmethod
    def _patterns(cls, v: dict[str, str]) -> dict[str, str]:
        for name, pattern in v.items():
            if not KIND_NAME.match(name) or name in BUILTIN_REDACTIONS:
                raise ValueError(f"redaction pattern name {name!r} must match {KIND_NAME.pattern} "
                                 "and not be a built-in kind")
            try:
                compiled = re.compile(pattern)
            except re.error as e:
                raise ValueError(f"redaction pattern {name!r} is not a valid regex: {e}") from e
            if compiled.match(""):
                raise ValueError(f"redaction pattern {name!r} matches the empty string")
        return v


class WorkSpec(Spec):
    """The shared work queue in the store: judge calls and golden replays as durable jobs any replica runs."""

    poll_seconds: float = Field(1.0, gt=0, le=60, description="Seconds between a worker's claims.")
    lease_seconds: float = Field(
        120.0, ge=1, le=3600, description="A claimed job is another replica's after this long without renewal "
                                          "(workers renew every third of it while they run it).")
    max_attempts: int = Field(3, ge=1, le=20, description="Attempts of one job before it ends failed.")
    retry_seconds: float = Field(10.0, ge=0, le=3600, description="Back-off before a failed attempt is retried "
                                                                  "(times the attempt number).")
    max_queued: int = Field(10_000, ge=1, le=10_000_000,
                            description="Most jobs queued or running at once; more are dropped and counted.")
    keep_hours: float = Field(24.0, gt=0, description="Done and failed jobs are deleted after this long.")
    sync_seconds: float = Field(2.0, gt=0, le=300, description="Seconds between reads of the committed scores "
                                                               "and golden runs into this replica's state.")


class StoreSpec(Spec):
    """The durable sample store: SQLite in WAL mode (one file, the default) or PostgreSQL (`url`)."""

    path: str = Field("observer-samples.db", description="SQLite database file (when `url` is not set).")
    url: str | None = Field(
        None, description="postgresql://USER@HOST:PORT/DB: store samples in PostgreSQL instead of SQLite. Keep "
                          "the password out of the file: PGPASSWORD, ~/.pgpass, or OBSERVER__SAMPLING__STORE__URL.")
    max_connections: int = Field(8, ge=1, le=256, description="PostgreSQL connection pool size.")
    connect_timeout_seconds: float = Field(5.0, gt=0, le=120, description="PostgreSQL connect timeout.")
    retention_days: float = Field(30.0, gt=0, description="Samples older than this are deleted.")
    max_rows_per_version: int = Field(
        200_000, ge=1, description="Only the newest this many samples of each version are kept."
    )
    busy_timeout_seconds: float = Field(5.0, ge=0, le=600, description="Wait this long for a lock.")
    prune_interval_seconds: float = Field(300.0, gt=0, description="Seconds between retention passes.")
    work: WorkSpec = Field(default_factory=WorkSpec, description="The shared work queue (judge calls, golden "
                                                                 "replays) and the state feed.")

    @field_validator("url")
    @classmethod
    def _postgres(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("postgresql://", "postgres://")):
            raise ValueError("url must start with postgresql:// (the only server database supported)")
        return v


class FingerprintSpec(Spec):
    """Observed version identity: the system-prompt and sampling-parameter hashes the
    sampled requests carry, compared across time and with the fleet's declared hashes."""

    enabled: bool = Field(True, description="Count the observed fingerprints of stored samples per version.")
    interval_seconds: float = Field(60.0, gt=0, le=3600, description="Seconds between checks.")
    window_seconds: float = Field(900.0, gt=0, le=7 * 86400,
                                  description="The current window: what a version serves now.")
    reference_seconds: float = Field(
        6 * 3600.0, gt=0, le=30 * 86400,
        description="The reference window just before the current one: what the version served before. The "
                    "changed signal holds until the new fingerprint is also the reference's (about half of it).")
    min_samples: int = Field(20, ge=1, le=1_000_000,
                             description="Fewest samples of a window before its fingerprint is trusted.")
    dominant_share: float = Field(0.5, gt=0, le=1, description="Share of a window one fingerprint must hold to "
                                  "be the version's fingerprint in that window.")
    top_k: int = Field(3, ge=1, le=20, description="Most fingerprints exported per version (label cardinality).")


class OtelGenAiSpec(Spec):
    """Applications' own OpenTelemetry GenAI spans as samples: `chat` and `text_completion` spans that carry
    the prompt and reply (`gen_ai.input.messages`, `gen_ai.output.messages`), received on `POST /v1/traces`.
    With opentelemetry-instrumentation-openai-v2: OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (docs/sampling.md, "OpenTelemetry GenAI")."""

    enabled: bool = Field(False, description="Serve /v1/traces and keep GenAI spans with content as samples.")
    version_attribute: str | None = Field(
        None, min_length=1, max_length=128,
        description="A span or resource attribute naming the version (e.g. service.version); unset: the span's "
                    "gen_ai.request.model, through `models`.")
    models: dict[str, str] = Field(default_factory=dict,
                                   description="Model name (gen_ai.request.model) → fleet version, where they differ.")


class EngineSpanSpec(Spec):
    """vLLM's OTLP `llm_request` spans, received on `POST /v1/traces` and joined by trace id to the requests
    the observer's proxies forwarded (docs/sampling.md, "Engine spans"). Point each vLLM at the observer with
    `--otlp-traces-endpoint http://OBSERVER:PORT/v1/traces`."""

    enabled: bool = Field(False, description="Serve /v1/traces and join the spans to proxied requests. Off by "
                          "default: with tracing off on the servers every proxied request would count missing.")
    wait_seconds: float = Field(30.0, gt=0, le=3600,
                                description="How long a finished request waits for its span before it counts "
                                            "missing (vLLM's batch exporter sends every 5 s by default).")
    max_pending: int = Field(20_000, ge=1, le=1_000_000,
                             description="Most requests (and early spans) waiting to be joined; the oldest is "
                                         "given up beyond this.")


class ConversationSpec(Spec):
    """Which conversation a sample belongs to: the drift tests' independent unit (docs/sampling.md)."""

    secret_env: str | None = Field(
        "OBSERVER_CONVERSATION_SECRET", description="Environment variable holding the HMAC key conversation keys "
                                                    "are hashed with (never stored raw). Unset or empty: keys are "
                                                    "not kept (counted), and drift falls back to time slices.")
    header: str | None = Field(
        "x-session-id", max_length=100, description="Request header the sampling proxy reads a conversation key "
                                                     "from (null: none).")
    openai_user: bool = Field(True, description="Without the header, the proxy keys by the request's OpenAI "
                                                "`user` field (one user's traffic as one unit: coarser, never "
                                                "finer than a conversation).")
    max_key_chars: int = Field(256, ge=1, le=4096, description="A longer key is dropped (counted too_long).")


class FeedbackSpec(Spec):
    """Users' feedback on answers, ingested at `POST /api/v1/feedback` and joined to the sampled response it is
    about (docs/feedback.md)."""

    enabled: bool = Field(True, description="Serve the feedback ingest (behind the API token, as mirror ingest).")
    late_seconds: float = Field(
        86_400.0, gt=0, le=30 * 86_400, description="An event more than this long after the answer it is about "
                                                    "is refused (counted `late`): feedback days later says little "
                                                    "of the version that answered.")
    rating_scale: tuple[float, float] = Field((1.0, 5.0), description="The lowest and highest rating users give.")
    negative_at_most: float = Field(2.0, description="A rating at or below this is negative.")
    max_events_per_unit: int = Field(
        50, ge=1, le=100_000, description="Most events one conversation (or one response, without a "
                                          "conversation key) counts per late window; more are refused (`flood`).")
    max_batch_events: int = Field(1_000, ge=1, le=100_000, description="Most events in one request.")
    otel_evaluations: dict[str, Literal["thumbs", "rating", "regenerate", "abandon"]] = Field(
        default_factory=dict, max_length=100,
        description="OpenTelemetry `gen_ai.evaluation.result` events (POST /v1/logs) whose "
                    "`gen_ai.evaluation.name` is a key here are the users' feedback of that kind; any other "
                    "evaluation (a model judge's) is counted `not_feedback`. Empty: /v1/logs is not served.")
    max_comment_chars: int = Field(4_000, ge=0, le=100_000,
                                   description="A longer comment is cut; comments are redacted, stored and "
                                               "never exported.")

    @model_validator(mode="after")
    def _scale(self) -> FeedbackSpec:
        low, high = self.rating_scale
        if not low < high:
            raise ValueError(f"rating_scale {list(self.rating_scale)} must be [lowest, highest] with lowest < highest")
        if not low <= self.negative_at_most < high:
            raise ValueError(f"negative_at_most {self.negative_at_most:g} must lie in the rating scale "
                             f"[{low:g}, {high:g}) (a rating at or below it is negative)")
        return self


class TenantSpec(Spec):
    """Tenants as a bounded label (docs/feedback.md, "Tenants"): from trusted sources only, allow-listed or
    among the busiest, the rest `other`."""

    header: str | None = Field(None, max_length=100, description="Request header naming the tenant, set by the "
                                                                 "authenticating gateway in front of the sampling "
                                                                 "proxy (null: the proxy reads none).")
    trusted_peers: list[str] = Field(default_factory=list, description="Addresses or CIDRs of the gateways that "
                                                                       "set `header`: from any other peer the header "
                                                                       "is ignored and counted `untrusted`.")
    allow: list[str] = Field(default_factory=list, max_length=1000,
                             description="Tenants always labelled by name.")
    top_n: int = Field(20, ge=0, le=1000, description="Most other tenants labelled by name: the first to reach "
                                                     "`min_requests`; a label stays for the process's life.")
    min_requests: int = Field(100, ge=1, le=10_000_000, description="Requests a tenant surely has before it "
                                                                    "takes one of the top_n labels.")
    max_key_chars: int = Field(64, ge=1, le=256, description="A longer tenant key is `other` (counted too_long).")

    @field_validator("trusted_peers")
    @classmethod
    def _peers(cls, value: list[str]) -> list[str]:
        import ipaddress

        for peer in value:
            try:
                ipaddress.ip_network(peer, strict=False)
            except ValueError as e:
                raise ValueError(f"trusted_peers: {peer!r} is not an address or CIDR ({e})") from None
        return value


class SamplingSpec(Spec):
    """Live output sampling, mirror ingest, sample store and redaction."""

    enabled: bool = Field(True, description="Turn this area on or off.")
    fraction: float = Field(0.1, ge=0, le=1, description="Default share of proxied requests sampled.")
    versions: dict[str, VersionSamplingSpec] = Field(
        default_factory=dict, description="Per-version overrides, keyed by fleet version name."
    )
    proxy: ProxySpec = Field(default_factory=ProxySpec, description="The sampling reverse proxy.")
    reservoir: ReservoirSpec = Field(default_factory=ReservoirSpec, description="Per-window reservoir.")
    queue_size: int = Field(
        10_000, ge=1, le=10_000_000, description="Most samples waiting for storage; more are dropped."
    )
    batch_size: int = Field(200, ge=1, le=10_000, description="Most samples written per transaction.")
    max_batch_samples: int = Field(
        5_000, ge=1, le=1_000_000, description="Most samples accepted in one ingest request."
    )
    redaction: RedactionSpec = Field(default_factory=RedactionSpec, description="Redaction before storage.")
    store: StoreSpec = Field(default_factory=StoreSpec, description="The sample store.")
    fingerprint: FingerprintSpec = Field(default_factory=FingerprintSpec,
                                         description="Observed prompt-template and sampling fingerprints.")
    engine_spans: EngineSpanSpec = Field(default_factory=EngineSpanSpec,
                                         description="vLLM's OTLP request spans joined to proxied requests.")
    otel_genai: OtelGenAiSpec = Field(default_factory=OtelGenAiSpec,
                                      description="Applications' OpenTelemetry GenAI spans with content, as samples.")
    conversations: ConversationSpec = Field(default_factory=ConversationSpec,
                                            description="Conversation keys on samples (hashed): drift's units.")
    tenants: TenantSpec = Field(default_factory=TenantSpec, description="Tenants as a bounded label.")
    feedback: FeedbackSpec = Field(default_factory=FeedbackSpec,
                                   description="Users' feedback (thumbs, ratings, regenerate) on sampled answers.")

    def fraction_for(self, version: str) -> float:
        """The sampling fraction of `version`."""
        override = self.versions.get(version)
        return self.fraction if override is None or override.fraction is None else override.fraction
