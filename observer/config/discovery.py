"""The `discovery` section: versions found from the Kubernetes API instead of listed by hand."""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from observer.config.base import FilePath, Spec
from observer.config.fleet import RouterRef
from observer.config.sources import BY_KEY, POOLS, PRIMITIVES, SOURCES, Source
from observer.conventions.labels import POD_ROLE_LABEL

_MODEL_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _check_selector(v: dict[str, str]) -> dict[str, str]:
    for key in v:
        if not _LABEL_KEY.match(key):
            raise ValueError(f"{key!r} is not a Kubernetes label key")
    return v


class DcgmDiscovery(Spec):
    """Where the DCGM-exporter pods are (usually a DaemonSet of the GPU operator)."""

    namespace: str = Field("gpu-operator", description="Namespace of the dcgm-exporter pods.")
    selector: dict[str, str] = Field(default_factory=lambda: {"app": "nvidia-dcgm-exporter"},
                                     description="Equality label selector of the dcgm-exporter pods.")
    port: int | str = Field(9400, description="Metrics port: a number or a container port name.")
    metrics_path: str = Field("/metrics", description="Path of the metrics endpoint.")

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_selector(v)


class PrimitiveRef(Spec):
    """A rollout source other than an Argo Rollout whose objects name the model's versions (one row of
    observer.config.sources each)."""

    kind: str = Field(
        description="The source: " + "; ".join(f"{s.key}: {s.title}" for s in SOURCES if s.key in PRIMITIVES)
                    + " (docs/kubernetes.md).",
        json_schema_extra={"enum": list(PRIMITIVES)})
    name: str = Field(description="The object that names the versions: the routing group, InferenceService, "
                                  "HTTPRoute, InferenceModelRewrite, ...")
    model: str | None = Field(
        None, description="model_rewrite only: the model name clients send, whose rule's targets are the versions.")
    api_version: str | None = Field(
        None, description="apiVersion to watch the source at; None: the newest one the observer reads of each "
                          "API group it reads it in (model_rewrite: llm-d.ai and inference.networking.x-k8s.io).")
    pool_api_version: str = Field(POOLS.api_versions[0], description="apiVersion of the InferencePools "
                                                                     "(httproute_pools, model_rewrite).")
    act: bool = Field(
        False, description="Actor mode (" + ", ".join(s.key for s in SOURCES if s.acts) + "): the observer writes the "
                           "source's own promote annotation when a step's verdict passes after its bake and its "
                           "rollback annotation on fail. Off: the source's own gate reads the verdict series. Needs "
                           "`patch` on the object (the chart grants it with this set).")

    @model_validator(mode="after")
    def _fits(self) -> PrimitiveRef:
        if self.kind not in PRIMITIVES:
            raise ValueError(f"primitive kind {self.kind!r} is not a source the observer reads: "
                             f"{', '.join(PRIMITIVES)}")
        row = BY_KEY[self.kind]
        if row.needs_model != (self.model is not None):
            needing = ", ".join(s.key for s in SOURCES if s.needs_model)
            raise ValueError(f"`model` is required for kind {needing} (the model name clients send) and only there")
        assert row.own is not None  # every primitive names its versions in an object
        if self.api_version is not None and self.api_version not in row.own.api_versions:
            raise ValueError(f"api_version {self.api_version!r} is not one the observer reads for {self.kind}: "
                             f"{', '.join(row.own.api_versions)}")
        if self.act and not row.acts:
            raise ValueError(f"act: the observer can act on {', '.join(s.key for s in SOURCES if s.acts)} only; "
                             f"{self.kind} has no promote or rollback it could write (gate it through "
                             f"{', '.join(row.gates)})")
        if self.pool_api_version not in POOLS.api_versions:
            raise ValueError(f"pool_api_version {self.pool_api_version!r}: one of {', '.join(POOLS.api_versions)}")
        return self

    @property
    def source(self) -> Source:
        return BY_KEY[self.kind]


class ModelDiscovery(Spec):
    """One served model: its pods (by label selector) and, optionally, the Argo Rollout that owns them."""

    name: str = Field(description="Short model name: the `group` of its versions. [a-z0-9-], ≤ 40.")
    version_prefix: str = Field(
        "", max_length=20,
        description="Put before the identity to make the version name. Empty (the default): the version is the "
                    "pod-template hash itself, which Argo passes to analysis as `podTemplateHashValue`.")
    selector: dict[str, str] = Field(description="Equality label selector of the model's vLLM pods.")
    rollout: str | None = Field(
        None, description="Argo Rollout owning the pods: roles from its status (stableRS, currentPodHash) and "
                          "the canary's expected weight from its current step. None: roles from `role_label`.")
    primitive: PrimitiveRef | None = Field(
        None, description="Instead of an Argo Rollout: the KServe, Gateway API or llm-d object whose members are "
                          "the versions (identity, role, weight and pods from it; docs/kubernetes.md).")
    router: RouterRef | None = Field(
        None, description="The router in front of the model's versions, read per routed model (llm-d's endpoint "
                          "picker: its Service's /metrics URL). For versions that share pods and differ by model "
                          "name (an InferenceModelRewrite's adapters) it is where their latency and errors come "
                          "from: vLLM labels an adapter's requests with the base model. `model` is left empty: "
                          "each version is read under its own model name.")
    identity_label: str = Field("rollouts-pod-template-hash",
                                description="Pod label whose value names the version (one per ReplicaSet).")
    role_label: str = Field(
        POD_ROLE_LABEL,
        description="Pod label carrying stable/canary (set by the Rollout's stableMetadata/canaryMetadata); "
                    "used when there is no Rollout or its status does not name the pod's hash.")
    port: int | str = Field("http", description="vLLM port: a number or a container port name.")
    metrics_path: str = Field("/metrics", description="Path of vLLM's metrics endpoint.")
    served_model: str | None = Field(None, description="Served model name to count; default: every model.")
    openai_url: str | None = Field(
        None,
        description="OpenAI base URL of each discovered version (golden replays, shadow replays), as a template "
                    "with {version}, {role}, {model}, {namespace}: e.g. http://llm-{role}.{namespace}.svc/v1 for "
                    "per-role Services or a gateway. Wins over the rest because you know your routing. None: the "
                    "Rollout's canaryService/stableService for the version's role, else a ready pod's address.")
    service_port: int = Field(80, ge=1, le=65535,
                              description="Port of the Rollout's canaryService/stableService for OpenAI calls.")
    openai_port: int | str | None = Field(
        None, description="Pod port for OpenAI calls when no Service names the version (a number or a container "
                          "port name); None: the same as `port`.")
    openai_path: str = Field("/v1", description="Path of the OpenAI API on a Service or pod address.")

    @model_validator(mode="after")
    def _one_source(self) -> ModelDiscovery:
        if self.rollout is not None and self.primitive is not None:
            raise ValueError(f"model {self.name}: name either an Argo `rollout` or a `primitive`, not both")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _MODEL_NAME.match(v):
            raise ValueError(f"model name {v!r} must match {_MODEL_NAME.pattern}")
        return v

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("a selector must name at least one label (an empty one matches every pod)")
        return _check_selector(v)

    @field_validator("openai_url")
    @classmethod
    def _template(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            example = v.format(version="v", role="canary", model="m", namespace="ns")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"openai_url {v!r}: only {{version}}, {{role}}, {{model}} and {{namespace}} may be "
                             f"filled in ({e})") from None
        if not example.startswith(("http://", "https://")):
            raise ValueError(f"openai_url {v!r} must start with http:// or https://")
        return v

    @field_validator("identity_label", "role_label")
    @classmethod
    def _label(cls, v: str) -> str:
        if not _LABEL_KEY.match(v):
            raise ValueError(f"{v!r} is not a Kubernetes label key")
        return v


class KubernetesDiscovery(Spec):
    """List and watch pods (and Argo Rollouts) in one namespace; read-only."""

    namespace: str = Field("llm-serving", description="Namespace of the vLLM pods and Rollouts.")
    kubeconfig: FilePath | None = Field(
        None, description="Path of a kubeconfig; None: the in-cluster service account, else $KUBECONFIG or "
                          "~/.kube/config.")
    context: str | None = Field(None, description="kubeconfig context; None: its current context.")
    models: list[ModelDiscovery] = Field(default_factory=list, description="The models to discover.")
    dcgm: DcgmDiscovery | None = Field(default_factory=DcgmDiscovery,
                                       description="DCGM-exporter pods, joined to vLLM pods by node; None: no GPUs.")
    max_pods_per_version: int = Field(64, ge=1, le=10_000, description="More ready pods: the rest are ignored "
                                                                        "(counted) — a scale-out never floods us.")
    max_versions_per_model: int = Field(4, ge=2, le=64,
                                        description="Most live versions per model (ReplicaSets with ready pods).")
    watch_timeout_seconds: int = Field(290, ge=5, le=3600,
                                       description="Server-side timeout of one watch; it is then resumed.")
    relist_seconds: float = Field(1800.0, ge=10, description="Full relist (resync) at least this often.")
    backoff_seconds: float = Field(1.0, gt=0, le=60, description="First back-off after an API error.")
    max_backoff_seconds: float = Field(60.0, gt=0, le=600, description="Longest back-off after API errors.")
    remove_after_seconds: float = Field(
        30.0, ge=0, le=3600, description="A version with no ready pod left is removed (its series end) after this.")

    @model_validator(mode="after")
    def _unique(self) -> KubernetesDiscovery:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate model names in discovery.kubernetes.models: {names}")
        return self


class DiscoverySpec(Spec):
    """Target discovery; `fleet.versions` (static URLs) stays the simplest mode and may be combined."""

    kubernetes: KubernetesDiscovery | None = Field(None, description="Discovery from the Kubernetes API.")
