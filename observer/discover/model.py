"""From pods and Argo Rollouts to versions: identity, role, expected weight, targets, the DCGM join.

Pure functions over the raw API objects the reflectors keep, so every rule here is tested without a
server. Identity is the pod-template hash (one per ReplicaSet, as Argo Rollouts names revisions): a
promotion moves the *role*, never the identity, so the promoted canary keeps its windows and counters.
Roles come from the Rollout's status (`stableRS`, `currentPodHash`, `abort`) and, without a Rollout,
from the pod label Argo's `stableMetadata`/`canaryMetadata` set. The canary's expected traffic weight is
the last `setWeight` at or before the current step (or the weight Argo reports with traffic routing).

`build_state` is the one builder every source's plan goes through (observer/discover/plan.py): the Argo and
role-label reader here (`argo_plan`), and the primitives' (observer/discover/planned.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from observer.config.discovery import DcgmDiscovery, KubernetesDiscovery, ModelDiscovery
from observer.config.fleet import VERSION_NAME, PodRef, RouterRef, VersionSpec
from observer.config.sources import BY_KEY
from observer.discover.plan import Member, Plan, Role
from observer.discover.podstate import pod_state

# Bounded values of the `problem` label of observer_discovery_problems_total.
PROBLEMS = ("malformed_pod", "no_ip", "no_identity", "invalid_identity", "no_port", "pods_over_cap",
            "versions_over_cap", "role_conflict", "malformed_rollout", "duplicate_identity", "no_openai_url")
MAX_MUTABLE_IMAGES = 4  # images by a mutable tag exported per version (a pod has a few containers)
MAX_VERSION_IMAGES = 4  # images (by digest where known) a version's identity holds
MAX_IDENTITY_CHARS = 200  # one of them: a long registry path and a digest
MAX_IMAGE_CHARS = 128  # an image reference as a label value, cut there
# What to do about a problem, for the log line an on-call reads (the rest name themselves).
FIXES = {
    "no_openai_url": "golden and shadow replays skip the version: set discovery.kubernetes.models[].openai_url, "
                     "name the Rollout's canaryService/stableService, or give its pods the port `openai_port`",
    "no_port": "the pods have no container port named as discovery.kubernetes.models[].port",
    "autoscaler_no_status": "an HPA scaling the Rollout reports no currentReplicas/desiredReplicas yet (just "
                            "created, or its controller is down): the ceiling and flapping alerts cannot see it",
    "autoscaler_missing_field": "an HPA scaling the Rollout has no spec.maxReplicas: the ceiling alert cannot see it",
}


def _dict(obj: Any, key: str) -> Mapping[str, Any]:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, Mapping) else {}


def _timestamp(value: Any) -> float | None:
    """An RFC 3339 timestamp of the API (e.g. 2026-12-01T10:00:00Z) as Unix seconds; None if unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def _digest(image_id: object) -> str:
    """The `sha256:…` digest in a container status's imageID (`docker-pullable://repo@sha256:…`, `repo@sha256:…`,
    or a bare `sha256:…` image id), "" when it has none."""
    m = DIGEST.search(image_id) if isinstance(image_id, str) else None
    return m.group(0) if m else ""


def mutable_image(image: str) -> bool:
    """An image reference by `:latest` or by no tag at all, and without a `@sha256:` digest."""
    if "@" in image:
        return False
    last = image.rsplit("/", 1)[-1]  # a registry port (host:5000/x) is not a tag
    return ":" not in last or last.rsplit(":", 1)[1] == "latest"


def _list(obj: Any, key: str) -> Sequence[Any]:
    v = obj.get(key) if isinstance(obj, Mapping) else None
    return v if isinstance(v, list) else []


@dataclass(frozen=True)
class PodInfo:
    """What discovery needs of a pod."""

    namespace: str
    name: str
    ip: str | None
    node: str | None
    ready: bool
    deleting: bool
    labels: Mapping[str, str]
    ports: Mapping[str, int]  # container port name → number
    started_at: float | None = None  # status.startTime (Unix seconds): the kubelet took the pod on
    state: str = "ready"  # podstate.STATES: why it does not serve, when it does not
    state_reason: str = ""  # bounded (podstate): unschedulable and failing only
    images: tuple[str, ...] = ()  # spec.containers[].image, in order
    digests: tuple[str, ...] = ()  # the image each container runs by digest (`sha256:…`), "" where not reported

    @property
    def identities(self) -> tuple[str, ...]:
        """Each container's image by digest where the kubelet reported one (status.containerStatuses[].imageID),
        else as the spec names it: what a version's fingerprint holds its engine build by."""
        return tuple(f"{i.split('@')[0]}@{d}" if d else i
                     for i, d in zip(self.images, self.digests or ("",) * len(self.images), strict=False))

    @property
    def mutable_images(self) -> tuple[str, ...]:
        """The images it runs by a tag that moves (`:latest`, or none, which means latest) and no digest: the
        same version name can start another build on the next pod."""
        return tuple(i for i in self.images if mutable_image(i))

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> PodInfo:
        """Read a Pod object; ValueError when it lacks a name or its labels are not strings."""
        meta, spec, status = _dict(obj, "metadata"), _dict(obj, "spec"), _dict(obj, "status")
        name, ns = meta.get("name"), meta.get("namespace", "")
        labels = meta.get("labels") or {}
        if not isinstance(name, str) or not isinstance(ns, str) or not isinstance(labels, Mapping):
            raise ValueError("pod without a name, or with labels that are not a mapping")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise ValueError(f"pod {name}: labels must be strings")
        ports: dict[str, int] = {}
        for c in _list(spec, "containers"):
            for p in _list(c, "ports"):
                number = p.get("containerPort") if isinstance(p, Mapping) else None
                pname = p.get("name") if isinstance(p, Mapping) else None
                if isinstance(number, int) and isinstance(pname, str):
                    ports.setdefault(pname, number)
        ready = any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                    for c in _list(status, "conditions"))
        ip = status.get("podIP")
        node = spec.get("nodeName")
        ready = ready and status.get("phase", "Running") == "Running"
        state, reason = pod_state(status, ready)
        containers = [c for c in _list(spec, "containers")
                      if isinstance(c, Mapping) and isinstance(c.get("image"), str)]
        images = tuple(c["image"] for c in containers)
        ids = {cs.get("name"): cs.get("imageID") for cs in _list(status, "containerStatuses")
               if isinstance(cs, Mapping)}
        digests = tuple(_digest(ids.get(c.get("name"))) for c in containers)
        return cls(namespace=ns, name=name, ip=ip if isinstance(ip, str) and ip else None,
                   node=node if isinstance(node, str) and node else None, ready=ready,
                   deleting=bool(meta.get("deletionTimestamp")), labels=dict(labels), ports=ports,
                   started_at=_timestamp(status.get("startTime")), state=state, state_reason=reason, images=images,
                   digests=digests if any(digests) else ())

    @property
    def waiting(self) -> str | None:
        """`state` or `state:reason` of a pod its version waits for (not Ready, not terminating, not ended);
        None for a Ready or terminating one."""
        if self.deleting or self.state in ("ready", "ended"):  # state is "ready" exactly when the pod is
            return None
        return f"{self.state}:{self.state_reason}" if self.state_reason else self.state

    @property
    def serving(self) -> bool:
        """Ready, not terminating, with an IP."""
        return self.ready and not self.deleting and self.ip is not None

    def url(self, port: int | str, path: str) -> str | None:
        """http://IP:PORT/PATH, the port given by number or by container port name; None if unknown."""
        number = port if isinstance(port, int) else self.ports.get(port)
        if number is None or self.ip is None:
            return None
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{number}{path}"


@dataclass(frozen=True)
class RolloutInfo:
    """What discovery needs of an Argo Rollout's spec and status."""

    name: str
    stable_hash: str | None
    current_hash: str | None
    step_index: int | None
    steps: int
    weight: float | None   # the canary's expected traffic share now; None: no canary in progress
    aborted: bool
    replicas: int | None
    workload: str | None = None  # spec.workloadRef's Deployment name, when the Rollout adopts one
    canary_service: str | None = None  # spec.strategy.canary.canaryService: Argo pins it to the canary's hash
    stable_service: str | None = None  # ... and stableService to the stable hash
    scale_down_delay: int | None = None  # seconds Argo keeps the previous stable's pods after a promotion

    def service(self, role: Role) -> str | None:
        """The Service Argo points at the version holding `role`, if the Rollout names one."""
        return self.canary_service if role == "canary" else self.stable_service if role == "stable" else None

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> RolloutInfo:
        meta, spec, status = _dict(obj, "metadata"), _dict(obj, "spec"), _dict(obj, "status")
        name = meta.get("name")
        if not isinstance(name, str):
            raise ValueError("rollout without a name")
        canary = _dict(_dict(spec, "strategy"), "canary")
        steps = _list(canary, "steps")
        stable = status.get("stableRS")
        current = status.get("currentPodHash")
        idx = status.get("currentStepIndex")
        aborted = bool(status.get("abort"))
        stable = stable if isinstance(stable, str) and stable else None
        current = current if isinstance(current, str) and current else None
        idx = idx if isinstance(idx, int) and idx >= 0 else None
        replicas = spec.get("replicas")
        weight: float | None = None
        if current is not None and current != stable:
            routed = _dict(_dict(_dict(status, "canary"), "weights"), "canary").get("weight")
            if aborted:
                weight = 0.0
            elif isinstance(routed, int | float) and not isinstance(routed, bool):
                weight = float(routed) / 100.0
            elif idx is not None and idx >= len(steps):
                weight = 1.0
            else:
                w = 0.0
                for step in steps[: (idx or 0) + 1]:
                    sw = step.get("setWeight") if isinstance(step, Mapping) else None
                    if isinstance(sw, int | float) and not isinstance(sw, bool):
                        w = float(sw)
                weight = w / 100.0
        ref = _dict(spec, "workloadRef")
        workload = ref.get("name") if ref.get("kind", "Deployment") == "Deployment" else None
        services = [canary.get(k) for k in ("canaryService", "stableService")]
        c_svc, s_svc = (v if isinstance(v, str) and v else None for v in services)
        delay = canary.get("scaleDownDelaySeconds")
        if not isinstance(delay, int) or isinstance(delay, bool) or delay < 0:
            delay = 30 if canary.get("trafficRouting") else None  # Argo's default applies with traffic routing
        return cls(name=name, stable_hash=stable, current_hash=current, step_index=idx, steps=len(steps),
                   weight=weight, aborted=aborted, replicas=replicas if isinstance(replicas, int) else None,
                   workload=workload if isinstance(workload, str) else None, canary_service=c_svc,
                   stable_service=s_svc, scale_down_delay=delay)


def autoscaler_conflicts(rollout: RolloutInfo, autoscalers: Iterable[Mapping[str, Any]]) -> list[str]:
    """`Kind/name` of each HPA or KEDA ScaledObject that scales what the Rollout owns instead of the Rollout:
    one of its ReplicaSets (`<rollout>-<hash>`) or the Deployment it adopts via workloadRef. Such an
    autoscaler grows the canary ReplicaSet behind Argo's back — the canary un-canaried."""
    out = []
    for obj in autoscalers:
        ref = _dict(_dict(obj, "spec"), "scaleTargetRef")
        kind, target = ref.get("kind", "Deployment"), ref.get("name")
        if not isinstance(target, str):
            continue
        owned = ((kind == "ReplicaSet" and target.startswith(f"{rollout.name}-"))
                 or (kind == "Deployment" and target == rollout.workload))
        if owned:
            meta = _dict(obj, "metadata")
            out.append(f"{obj.get('kind', 'HorizontalPodAutoscaler')}/{meta.get('name', '?')}")
    return sorted(out)


@dataclass(frozen=True)
class ModelState:
    """One model's discovered versions, plus the rollout facts the hygiene gauges export."""

    model: str
    versions: tuple[VersionSpec, ...]
    pods: Mapping[str, int]                # version → serving pods counted
    canary_weight: float | None            # from the Rollout's step
    canary_replica_share: float | None     # canary pods / (canary + stable) pods
    stale_revision_pods: int               # serving pods of a revision that is neither stable nor canary
    autoscaler_conflicts: tuple[str, ...] = ()  # HPA/KEDA objects scaling the Rollout's ReplicaSets
    autoscalers: tuple[Any, ...] = ()  # AutoscalerState (observer.discover.autoscaling) of each HPA scaling it
    waiting: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """version → its pods not serving, by `state` or `state:reason` (a version with none Ready included)."""
    nodes: Mapping[str, int] = field(default_factory=dict)
    """version → the distinct nodes its serving pods run on (pods whose node is known)."""
    mutable_images: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """version → image by a mutable tag → its serving pods running it (at most MAX_MUTABLE_IMAGES a version)."""


def count_waiting(pods: Iterable[tuple[str, PodInfo]], cap: int) -> dict[str, dict[str, int]]:
    """(version, pod) → version → pods it waits for, by `state[:reason]`; at most `cap` versions, in name order."""
    out: dict[str, dict[str, int]] = {}
    for name, p in sorted(pods, key=lambda x: x[0]):
        why = p.waiting
        if why is None or (name not in out and len(out) >= cap):
            continue
        counts = out.setdefault(name, {})
        counts[why] = counts.get(why, 0) + 1
    return out


def parse_all(objs: Iterable[Mapping[str, Any]], problems: Counter[str], kind: Literal["pod", "rollout"]
              ) -> list[Any]:
    out: list[Any] = []
    for obj in objs:
        try:
            out.append(PodInfo.parse(obj) if kind == "pod" else RolloutInfo.parse(obj))
        except ValueError:
            problems[f"malformed_{kind}"] += 1
    return out


def router_for(m: ModelDiscovery, model: str | None) -> RouterRef | None:
    """The model's router for a version served under `model`: none without a model name, since the router's
    series tell versions apart only by it."""
    return m.router if m.router is not None and (m.router.model or model) else None


def openai_url(m: ModelDiscovery, namespace: str, name: str, role: Role, rollout: RolloutInfo | None,
               pods: Sequence[PodInfo]) -> str | None:
    """Where golden and shadow replays reach version `name`: the configured template (you know your gateway);
    else the Rollout's Service for its role (Argo pins the Service's selector to this revision's hash, so it
    reaches exactly this version, spreads over its pods and outlives any one pod); else the first ready pod's
    own address (exact too, but it moves when that pod goes). None when no pod exposes `openai_port`."""
    if m.openai_url is not None:
        return m.openai_url.format(version=name, role=role, model=m.name, namespace=namespace)
    service = rollout.service(role) if rollout is not None else None
    if service is not None:
        return f"http://{service}.{namespace}.svc:{m.service_port}{m.openai_path}"
    port = m.port if m.openai_port is None else m.openai_port
    return next((u for p in pods if (u := p.url(port, m.openai_path)) is not None), None)


def dcgm_by_node(spec: DcgmDiscovery | None, pods: Iterable[PodInfo]) -> dict[str, list[str]]:
    """node → the dcgm-exporter metrics URL(s) on it."""
    out: dict[str, list[str]] = {}
    if spec is None:
        return out
    for p in pods:
        url = p.url(spec.port, spec.metrics_path) if p.serving else None
        if url is not None and p.node is not None:
            out.setdefault(p.node, []).append(url)
    return out


def serving_pods(pods: Iterable[PodInfo], problems: Counter[str]) -> list[PodInfo]:
    """The Ready, not terminating pods, by name; one without an IP is counted (`no_ip`) and left out."""
    out = []
    for p in sorted(pods, key=lambda p: p.name):
        if not p.ready or p.deleting:
            continue
        if p.ip is None:
            problems["no_ip"] += 1
            continue
        out.append(p)
    return out


def argo_plan(m: ModelDiscovery, pods: Sequence[PodInfo], rollout: RolloutInfo | None,
              problems: Counter[str]) -> Plan:
    """The versions of an Argo model, or of a role-label one: one per pod-template hash on its pods (a hash
    whose pods all wait included, so its waiting pods are counted); roles from the Rollout's status, else from
    the role label its serving pods carry; the expected shares from the Rollout's step."""
    serving = serving_pods(pods, Counter())  # pods without an IP are counted once, by the builder
    found: dict[str, list[PodInfo]] = {}
    for p in serving:
        identity = p.labels.get(m.identity_label)
        if not identity:
            problems["no_identity"] += 1
            continue
        found.setdefault(identity, []).append(p)
    for p in pods:
        if p.labels.get(m.identity_label):
            found.setdefault(p.labels[m.identity_label], [])
    found = dict(sorted(found.items()))
    weight = rollout.weight if rollout is not None else None
    members: list[Member] = []
    for identity, ps in found.items():
        role: Role = "other"
        if rollout is not None and identity in (rollout.stable_hash, rollout.current_hash):
            role = "stable" if identity == rollout.stable_hash else "canary"
        else:
            labelled = {p.labels.get(m.role_label) for p in ps} & {"stable", "canary"}
            if len(labelled) > 1:
                problems["role_conflict"] += 1
            elif labelled:
                role = "stable" if "stable" in labelled else "canary"
        share = None if weight is None else weight if role == "canary" else 1.0 - weight if role == "stable" \
            else None
        members.append(Member(identity=identity, role=role, weight=share, pod_labels={m.identity_label: identity}))
    live = [x.role for x in members if found[x.identity]]
    if live.count("stable") > 1 or live.count("canary") > 1:
        problems["role_conflict"] += 1
    return Plan("rollout" if rollout is not None else "labels", m.rollout or m.name, tuple(members), {},
                canary_weight=weight)


def build_state(spec: KubernetesDiscovery, m: ModelDiscovery, pods: Iterable[PodInfo], plan: Plan,
                dcgm: Mapping[str, Sequence[str]], problems: Counter[str], *, rollout: RolloutInfo | None = None
                ) -> ModelState:
    """The versions of model `m` a source's `plan` names, each with the serving pods its labels select: the one
    builder for every source (caps, counts, URLs, the DCGM join, the expected shares)."""
    problems.update(plan.problems)
    pods = list(pods)
    row = BY_KEY[plan.primitive]
    serving = serving_pods(pods, problems)
    members = [(f"{m.version_prefix}{x.identity}", x) for x in plan.members]
    chosen: dict[str, list[tuple[PodInfo, str]]] = {}  # version → (pod, metrics URL)
    for name, member in members:
        picked = [p for p in serving if member.pod_labels.items() <= p.labels.items()]
        if picked and not VERSION_NAME.match(name):
            problems["invalid_identity"] += len(picked)
            continue
        with_url = []
        for p in picked:
            url = p.url(m.port, m.metrics_path)
            if url is None:
                problems["no_port"] += 1
            else:
                with_url.append((p, url))
        if with_url:
            chosen[name] = with_url
    waiting = count_waiting([(name, p) for name, x in members if VERSION_NAME.match(name) for p in pods
                             if x.pod_labels.items() <= p.labels.items()], spec.max_versions_per_model)
    order = {"stable": 0, "canary": 1, "other": 2}
    ranked = sorted(((name, x) for name, x in members if name in chosen),
                    key=lambda nx: (order[nx[1].role], -len(chosen[nx[0]])))
    if len(ranked) > spec.max_versions_per_model:
        problems["versions_over_cap"] += len(ranked) - spec.max_versions_per_model
    # Pods of a revision that is neither stable nor canary, all of them (a cap must not hide stale pods).
    stale = 0 if row.shared_pods or row.key == "labels" else \
        sum(len(chosen[name]) for name, x in ranked if x.role == "other")
    versions: list[VersionSpec] = []
    counted: dict[str, int] = {}
    spread: dict[str, int] = {}
    mutable: dict[str, dict[str, int]] = {}
    for name, member in ranked[: spec.max_versions_per_model]:
        kept = chosen[name]
        if len(kept) > spec.max_pods_per_version:
            problems["pods_over_cap"] += len(kept) - spec.max_pods_per_version
            kept = kept[: spec.max_pods_per_version]
        own = [p for p, _ in kept]
        openai = openai_url(m, spec.namespace, name, member.role, rollout, own)
        if openai is None:
            problems["no_openai_url"] += 1
        nodes = sorted({p.node for p in own if p.node is not None})
        counted[name] = len(kept)
        spread[name] = len(nodes)
        moving: dict[str, int] = {}
        for p in own:
            for image in (i[:MAX_IMAGE_CHARS] for i in p.mutable_images):
                if image in moving or len(moving) < MAX_MUTABLE_IMAGES:
                    moving[image] = moving.get(image, 0) + 1
        if moving:
            mutable[name] = moving
        model = member.model or m.served_model
        builds = sorted({i[:MAX_IDENTITY_CHARS] for p in own for i in p.identities})[:MAX_VERSION_IMAGES]
        versions.append(VersionSpec(
            name=name, role=member.role, model=model, vllm=[u for _, u in kept], openai=openai,
            router=router_for(m, model), dcgm=sorted({u for n in nodes for u in dcgm.get(n, ())}),
            pods=[PodRef(namespace=p.namespace or spec.namespace, pod=p.name, started_at=p.started_at) for p in own],
            expected_traffic_weight=member.weight, group=m.name, pods_waiting=dict(waiting.get(name, {})),
            images=builds))
    pods_in = {role: sum(counted[v.name] for v in versions if v.role == role) for role in ("stable", "canary")}
    share = (pods_in["canary"] / (pods_in["canary"] + pods_in["stable"])
             if pods_in["canary"] and pods_in["stable"] and not row.shared_pods else None)
    canary = next((x for x in plan.members if x.role == "canary"), None)
    weight = plan.canary_weight if plan.canary_weight is not None else canary.weight if canary is not None else None
    if row.split == "pods" and canary is not None:
        # Requests follow the ready instances (OME's capacity, Dynamo's generations): the share of pods is the
        # expected split; none until both have a serving pod.
        weight = share
        versions = [v.model_copy(update={"expected_traffic_weight": None if share is None else
                                         share if v.role == "canary" else 1 - share if v.role == "stable" else None})
                    for v in versions]
    return ModelState(model=m.name, versions=tuple(versions), pods=counted, canary_weight=weight,
                      canary_replica_share=share, stale_revision_pods=stale, waiting=waiting, nodes=spread,
                      mutable_images=mutable)


def model_state(spec: KubernetesDiscovery, m: ModelDiscovery, pods: Iterable[PodInfo],
                rollout: RolloutInfo | None, dcgm: Mapping[str, Sequence[str]], problems: Counter[str],
                autoscalers: Iterable[Mapping[str, Any]] = ()) -> ModelState:
    """The versions of an Argo or role-label model `m` from its pods (already selected by `m.selector`)."""
    pods = list(pods)
    state = build_state(spec, m, pods, argo_plan(m, pods, rollout, problems), dcgm, problems, rollout=rollout)
    conflicts = tuple(autoscaler_conflicts(rollout, autoscalers)) if rollout is not None else ()
    return replace(state, autoscaler_conflicts=conflicts)
