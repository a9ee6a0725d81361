"""How the observer queries a Prometheus-compatible API (Prometheus, Thanos, Mimir, Cortex)."""

from __future__ import annotations

from pydantic import Field, model_validator

from observer.config.base import FilePath, Spec


class SecretRef(Spec):
    """A Kubernetes Secret key (for the rendered Argo templates; the observer itself reads files)."""

    name: str = Field(description="Secret name.")
    key: str = Field(description="Key in the Secret.")


class PrometheusClientSpec(Spec):
    """Auth, tenancy, timeouts and limits of PromQL queries. Secrets come from files (a mounted Secret),
    re-read on every request so a rotated token is picked up; never from the config itself."""

    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra headers, e.g. {X-Scope-OrgID: team-a} for multi-tenant Mimir or "
                                          "Cortex. Not for secrets (use bearer_token_file).")
    bearer_token_file: FilePath | None = Field(None, description="File holding a bearer token (Authorization header).")
    basic_auth_username: str | None = Field(None, description="Basic-auth user (with basic_auth_password_file).")
    basic_auth_password_file: FilePath | None = Field(None, description="File holding the basic-auth password.")
    ca_file: FilePath | None = Field(None, description="CA bundle that signs the server's certificate.")
    cert_file: FilePath | None = Field(None, description="Client certificate (mTLS), with key_file.")
    key_file: FilePath | None = Field(None, description="Client key (mTLS).")
    replica_labels: list[str] = Field(
        default_factory=list,
        description="Target labels that tell identical observer replicas apart in Prometheus (e.g. [pod, instance] "
                    "for two central observers scraping the same fleet): the judge takes the largest replica's "
                    "increase instead of the sum, so two replicas do not double every count. Empty (one observer, "
                    "or one per vLLM pod, whose series must add up): every series is summed.")
    pod_label: str = Field(
        "pod", description="The target label naming the vLLM pod that a per-pod observer (the sidecar) watches: the "
                           "canary judge reads each pod's latency histograms by it, for the pods-as-units pass "
                           "(docs/canary.md). Empty, or one of replica_labels (then it names observer replicas, "
                           "not vLLM pods): no per-pod reads.")
    timeout_seconds: float = Field(10.0, gt=0, le=300, description="One request's timeout.")
    retries: int = Field(2, ge=0, le=10, description="Retries of a failed request (timeouts, 429, 5xx), with "
                                                     "exponential back-off; 4xx answers are not retried.")
    backoff_seconds: float = Field(0.5, gt=0, le=30, description="First back-off; doubles each retry.")
    max_points_per_series: int = Field(
        11_000, ge=100, le=1_000_000, description="A range query with more steps is split into several (Prometheus "
                                                  "refuses more than 11,000 points per series).")
    partial_response: bool = Field(
        False, description="Thanos: allow partial responses. False (default) asks for all-or-error; a partial "
                           "answer or any warning is treated as no data, with the warning as the reason.")
    argo_token_secret: SecretRef | None = Field(
        None, description="Secret holding the bearer token, for the rendered Argo Prometheus-provider metrics.")

    @model_validator(mode="after")
    def _pairs(self) -> PrometheusClientSpec:
        if (self.basic_auth_username is None) != (self.basic_auth_password_file is None):
            raise ValueError("basic_auth_username and basic_auth_password_file go together")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mTLS)")
        if self.bearer_token_file and self.basic_auth_username:
            raise ValueError("use bearer_token_file or basic auth, not both")
        if any(k.lower() == "authorization" for k in self.headers):
            raise ValueError("put credentials in bearer_token_file or basic auth, not in headers")
        return self
