"""Every rollout source the observer follows, one row each.

A source is an object a serving stack already keeps that names a model's versions: an Argo Rollout, the
role labels Argo's stable/canary metadata sets, a KServe routing group, an HTTPRoute across InferencePools,
an OME InferenceService's canary, a Dynamo graph's worker generation. Its row says what the config calls it,
which collections (kind, plural, apiVersions) are watched to read it, and what the docs say of it. The
config's validation, the reflectors, the chart's RBAC (`files/sources.yaml`, generated), and the docs table
(docs/kubernetes.md, generated) all read these rows; the readers that turn the objects into versions are
registered under the same keys (observer/discover/planned.py `READERS`), and a test fails when any of them is missing
or written by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

READ_VERBS = ("get", "list", "watch")
ACT_VERBS = ("patch",)
Gate = Literal["argo", "flagger", "ome", "act", "wait", "api"]
GATES: Mapping[str, str] = {
    "argo": "Argo AnalysisTemplate (web or Prometheus; `observer render argo`)",
    "flagger": "Flagger MetricTemplate and webhooks (`observer render flagger`)",
    "ome": "OME's step analysis: a PromQL check on the verdict series (`observer render ome`)",
    "act": "the observer itself, opt-in (`primitive.act: true`): it writes the source's own promote and rollback "
           "annotations on the verdict (`patch` on the object; docs/canary.md, \"Actor mode\")",
    "wait": "`observer canary wait` between weight steps (`deploy/gitops/httproute-canary.sh`)",
    "api": "the verdict API `GET /api/v1/canary/verdict?canary=canary&baseline=stable`, read by whatever "
           "moves the traffic",
}


@dataclass(frozen=True)
class Collection:
    """A collection discovery lists and watches."""

    kind: str
    plural: str
    api_versions: tuple[str, ...]  # every apiVersion the reader accepts, the one watched by default first

    @property
    def groups(self) -> tuple[str, ...]:
        """The API groups, in order of first appearance ("" is the core group)."""
        return tuple(dict.fromkeys(api.rpartition("/")[0] for api in self.api_versions))

    def watched(self, api_version: str | None = None) -> list[str]:
        """The apiVersions to watch: the one named, else the first of each group (the API server converts
        between the versions of one group, so one watch per group sees every object)."""
        if api_version is not None:
            return [api_version]
        firsts: dict[str, str] = {}
        for api in self.api_versions:
            firsts.setdefault(api.rpartition("/")[0], api)
        return list(firsts.values())

    def rule(self, verbs: tuple[str, ...] = READ_VERBS) -> dict[str, list[str]]:
        """The RBAC rule that lets discovery read it (or, with `verbs`, do those)."""
        return {"apiGroups": list(self.groups), "resources": [self.plural], "verbs": list(verbs)}


ROLLOUTS = Collection("Rollout", "rollouts", ("argoproj.io/v1alpha1",))
HPAS = Collection("HorizontalPodAutoscaler", "horizontalpodautoscalers", ("autoscaling/v2",))
SCALED_OBJECTS = Collection("ScaledObject", "scaledobjects", ("keda.sh/v1alpha1",))
POOLS = Collection("InferencePool", "inferencepools",
                   ("inference.networking.k8s.io/v1", "inference.networking.x-k8s.io/v1alpha2"))


@dataclass(frozen=True)
class Source:
    """One rollout source: how the config names it, what discovery watches to read it, what the docs say."""

    key: str  # `primitive.kind` in the config; `rollout` and `labels` are the Argo fields of a model
    title: str  # the docs table's first column
    own: Collection | None  # the object that names the versions (None: the pods' labels do)
    reads: str  # identity, role and expected share are read from
    pods: str  # which pods serve a version
    replays: str  # where golden and shadow replays reach a version
    gates: tuple[Gate, ...]
    also: tuple[Collection, ...] = ()  # read besides, for every model of this source
    pools: bool = False  # its versions are InferencePools (`pool_api_version`)
    needs_model: bool = False  # `primitive.model` is required (and allowed only here)
    shared_pods: bool = False  # every version runs on the same pods (a replica share means nothing)
    split: Literal["weights", "pods"] = "weights"  # the expected share: the objects' weights, or ready pods

    def collections(self) -> tuple[Collection, ...]:
        return ((self.own,) if self.own is not None else ()) + self.also + ((POOLS,) if self.pools else ())

    def rules(self) -> list[dict[str, list[str]]]:
        return [c.rule() for c in self.collections()]

    @property
    def acts(self) -> bool:
        """Actor mode exists: the observer can write the source's own promote/rollback on its object."""
        return "act" in self.gates and self.own is not None

    def act_rules(self) -> list[dict[str, list[str]]]:
        """What actor mode needs besides reading: `patch` on the source's own objects (none where it cannot act)."""
        return [self.own.rule(ACT_VERBS)] if self.acts and self.own is not None else []


_ROLES_BY_AGE = "roles by age"
SOURCES: tuple[Source, ...] = (
    Source("rollout", "Argo Rollout (`rollout:`)", ROLLOUTS,
           "pod-template hash; `status.stableRS` / `currentPodHash`; the current step's `setWeight`",
           "`rollouts-pod-template-hash`", "`openai_url`, else the role's Service, else a pod",
           ("argo",), also=(HPAS, SCALED_OBJECTS)),
    Source("labels", "Role labels (neither `rollout` nor `primitive`)", None,
           "pod-template hash; the `observer.dev/role` label (Argo's `stableMetadata`/`canaryMetadata`, or "
           "yours)", "`rollouts-pod-template-hash`", "`openai_url`, else a pod", ("argo", "flagger", "wait", "api")),
    Source("flagger", "Flagger `Canary` (a Deployment target)",
           Collection("Canary", "canaries", ("flagger.app/v1beta1",)),
           "Flagger's names, the target `<target>` and `<target>-primary`; the target is the canary while "
           "`phase` is Progressing or WaitingPromotion with `status.lastAppliedSpec` unpromoted, at "
           "`status.canaryWeight` percent", "the primary's pods by Flagger's rewritten selector label (`app`, "
           "`name` or `app.kubernetes.io/name`: `<value>-primary`), the target's by `<value>`",
           "`openai_url`, else a pod", ("flagger", "wait", "api")),
    Source("kserve_llmisvc", "KServe `LLMInferenceService`",
           Collection("LLMInferenceService", "llminferenceservices",
                      ("serving.kserve.io/v1alpha2", "serving.kserve.io/v1alpha1")),
           "each member service of the routing group `spec.router.route.group`; weight "
           "`spec.router.route.weight`, or the group status's (`stopped` members weigh 0); " + _ROLES_BY_AGE,
           "`app.kubernetes.io/name: <service>`, `kserve.io/component: workload`",
           "`openai_url` (`{version}` is the service), else a pod", ("wait", "api")),
    Source("kserve_isvc", "KServe `InferenceService` (serverless `canaryTrafficPercent`)",
           Collection("InferenceService", "inferenceservices", ("serving.kserve.io/v1beta1",)),
           "`status.components.predictor.traffic`: each revision and its percent; `latestRolledoutRevision` is "
           "stable, the latest revision with traffic the canary", "`serving.knative.dev/revision: <revision>`",
           "`openai_url`, else a pod", ("wait", "api")),
    Source("httproute_pools", "`HTTPRoute` across `InferencePool`s",
           Collection("HTTPRoute", "httproutes", ("gateway.networking.k8s.io/v1", "gateway.networking.k8s.io/v1beta1")),
           "each pool in the route's first rule with pool backends; weight the backendRef's (default 1); roles by "
           "the pools' age", "the pool's `spec.selector.matchLabels`", "`openai_url`, else a pod", ("wait", "api"),
           pools=True),
    Source("model_rewrite", "llm-d `InferenceModelRewrite`",
           Collection("InferenceModelRewrite", "inferencemodelrewrites",
                      ("llm-d.ai/v1alpha2", "inference.networking.x-k8s.io/v1alpha2")),
           "each `modelRewrite` target of the rule matching `model`; its weight (or an even split); roles by the "
           "order listed", "the pool's pods, **shared**: versions differ by model name (scrapes count that model's "
           "series; replays ask for it)", "`openai_url`, else a pod, with the target's model name", ("wait", "api"),
           pools=True, needs_model=True, shared_pods=True),
    Source("ome", "OME `InferenceService` (`spec.rollout` canary)",
           Collection("InferenceService", "inferenceservices", ("ome.io/v1beta1",)),
           "the engine's `status.components.engine.canary` (`stableRevisionHash`, `canaryRevisionHash`) or its "
           "`traffic[]` tags while `rolloutPhase` is in flight; a rolled-back canary is `other`",
           "`ome.io/revision-hash: <hash>`", "`openai_url`, else a pod", ("ome", "act", "wait", "api"), split="pods"),
    Source("dynamo", "NVIDIA Dynamo `DynamoGraphDeployment`",
           Collection("DynamoGraphDeployment", "dynamographdeployments", ("nvidia.com/v1beta1", "nvidia.com/v1alpha1")),
           "worker generations by hash: the DGD's `nvidia.com/current-worker-hash-v2` (or the legacy v1 suffix) is "
           "stable; while `status.rollingUpdate.phase` is Pending or InProgress the newest other hash on the pods "
           "is the canary. Dynamo has no traffic split and no pause yet (its proposal #15214)",
           "`nvidia.com/dynamo-worker-hash: <hash>`", "`openai_url`, else a pod", ("wait", "api"), split="pods"),
)
BY_KEY: Mapping[str, Source] = {s.key: s for s in SOURCES}
PRIMITIVES: tuple[str, ...] = tuple(s.key for s in SOURCES if s.key not in ("rollout", "labels"))


def docs_table() -> str:
    """docs/kubernetes.md's table of sources (markdown), generated from the rows."""
    head = ("| source (`kind`) | watches | identity, role and expected share are read from | a version's pods "
            "| replays reach the version at | the gate |\n|---|---|---|---|---|---|\n")
    lines = []
    for s in SOURCES:
        watched = ", ".join(f"{c.plural} ({', '.join(c.api_versions)})" for c in s.collections()) or "pods only"
        key = f" (`{s.key}`)" if s.key in PRIMITIVES else ""
        share = " The expected share is the canary's share of ready pods." if s.split == "pods" else ""
        gates = "; or ".join(GATES[g] for g in s.gates)
        lines.append(f"| {s.title}{key} | {watched} | {s.reads}.{share} | {s.pods} | {s.replays} | {gates} |")
    return head + "\n".join(lines) + "\n"
