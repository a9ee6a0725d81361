"""The rollout primitives in the cluster game day: a canary rolled out through a KServe `LLMInferenceService`
routing group, an `InferenceService`'s `canaryTrafficPercent` or an `HTTPRoute` weighted across two
`InferencePool`s, with the versions discovered from those objects (no static list, no Argo Rollout).

Each scenario, on the cluster rig (the scripted Kubernetes API, an `observer serve` replica on PostgreSQL, the
judge reading the real Prometheus):

* the primitive's objects name two versions, `<group>-…1` (old) and `<group>-…2` (new), and the simulator's pods
  are relabelled as the primitive's controller labels its pods;
* the weight moves 5 → 25 → 50 %: the objects are rewritten, the simulator's traffic split follows, and the
  observer's exported roles and canary weight must follow the objects before the step's looks; each look asks
  the verdict of the two discovered names with the step's weight (the split check), as a gate would;
* the gate: a `fail` at any step aborts (the canary's weight back to 0: it must become `other`); a step at 5 or
  25 % advances after LOOKS_PER_STEP looks without a fail; at 50 % the promotion to 100 % waits for `pass`, as
  Flagger's confirm-promotion or a pipeline's `observer canary wait` would;
* promoted, the new version must be `stable` under the same name (its identity, hence its windows, kept) and the
  old one `other` or gone.

A healthy canary must end promoted on `pass` with no `fail` on the way; a worse one aborted on `fail`, failing
on the metric its scenario names.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from observer.config import parse_config
from observer.config.sources import BY_KEY
from observer.conventions.labels import POD_ROLE_LABEL
from observer.conventions.metrics import WIN_TTFT
from observer.render import ome as ome_render
from observer_dev import primitive_objects as po
from observer_dev.gameday.cluster import ClusterRig, _wait_ready, cluster_config, cluster_rig, spawn
from observer_dev.gameday.ome import ADVANCED, CANARYING, ROLLED_BACK, OmeStepGate
from observer_dev.gameday.rig import config_yaml, sim_profile
from observer_dev.gameday.scenarios import STABLE_PODS, Catalogue, Expect, GamedayError, Plan, Scenario
from observer_dev.kubeapi import pod

NS = "llm-serving"
PODS = f"{NS}/pods"
ADAPTERS = ("support-lora-v1", "support-lora-v2")
"""The adapter scenario's rewrite targets: the names cluster.ROUTED_AS gives the simulated versions."""
REWRITTEN_MODEL = "support-lora"
BASE_MODEL = "sim-stable"
"""The pool's own model: what the simulated engines of `stable` label their vLLM series with."""
POOL = "support-pool"
ROUTER_TTFT = {"name": "router_ttft", "kind": "latency", "family": "router_ttft", "critical": True}
"""An adapter's latency as the endpoint picker measures it: vLLM labels an adapter's requests with the base
model, so the engine's TTFT has no series of its own for it."""
STEPS = (5, 25, 50)
LOOKS_PER_STEP = 2
"""Looks at 5 and 25 % before the weight moves on (none may fail)."""
FOLLOW_S = 20.0
"""How long the observer may take to export the roles and weight the objects now say."""

Roles = dict[str, str]  # version → role
Exported = dict[str, tuple[Roles, float | None]]  # group → (roles, canary weight)


@dataclass(frozen=True)
class PrimitiveScenario:
    """One rollout through a primitive: what the canary does and what must come out."""

    name: str
    primitive: str  # a source's key (observer.config.sources)
    title: str
    expect: Expect  # pass (promoted) | fail (aborted) | held (neither, ever)
    canary: Mapping[str, Any] = field(default_factory=dict)
    must_fail: tuple[str, ...] = ()  # verdict metrics that must end `fail`
    needs: str | None = None  # quality: golden replays on the discovered versions' URLs

    @property
    def group(self) -> str:
        return self.name.replace("-", "")[:20]

    @property
    def identities(self) -> tuple[str, str]:
        """(old, new) version names the objects give the two members."""
        g = self.group
        if self.primitive == "model_rewrite":  # the target model names the rig's endpoint picker reports
            return ADAPTERS
        if self.primitive == "kserve_isvc":
            return f"{g}-00001", f"{g}-00002"
        if self.primitive == "flagger":  # Flagger's own names: the primary copy and its target
            return f"{g}-primary", g
        if BY_KEY[self.primitive].split == "pods":  # revisions named by a hash (OME, Dynamo)
            old, new = (hashlib.sha256(f"{self.name}-{i}".encode()).hexdigest()[:8] for i in (1, 2))
            return old, new
        return f"{g}-v1", f"{g}-v2"

    @property
    def steps(self) -> tuple[int, ...]:
        """The canary's shares in %: the weights the objects are rewritten to, or, where requests follow the
        ready pods (OME's capacity, Dynamo's generations), the one share the rig's pods give."""
        return (round(100 / (STABLE_PODS + 1)),) if BY_KEY[self.primitive].split == "pods" else STEPS


PRIMITIVE_SCENARIOS: tuple[PrimitiveScenario, ...] = (
    PrimitiveScenario("llmisvc-healthy", "kserve_llmisvc", "KServe LLMInferenceService group, healthy", Expect.PASS),
    PrimitiveScenario("isvc-slow", "kserve_isvc", "KServe InferenceService canaryTrafficPercent, TTFT ×1.5",
                      Expect.FAIL, canary={"preset": "slow"}, must_fail=("ttft",)),
    PrimitiveScenario("httproute-healthy", "httproute_pools", "HTTPRoute across two InferencePools, healthy",
                      Expect.PASS),
    PrimitiveScenario("httproute-errors", "httproute_pools", "HTTPRoute across two InferencePools, errors 3 %",
                      Expect.FAIL, canary={"error_rate": 0.03}, must_fail=("errors",)),
    PrimitiveScenario("llmisvc-worse", "kserve_llmisvc", "KServe LLMInferenceService group, worse answers", Expect.FAIL,
                      canary={"accuracy": 0.5}, must_fail=("golden",), needs="quality"),
    PrimitiveScenario("adapter-slow", "model_rewrite", "llm-d InferenceModelRewrite: a LoRA adapter on the base "
                      "model's pods, TTFT ×1.5", Expect.FAIL, canary={"preset": "slow"}, must_fail=("router_ttft",)),
    PrimitiveScenario("adapter-wrong", "model_rewrite", "llm-d InferenceModelRewrite: a LoRA adapter on the base "
                      "model's pods, wrong answers", Expect.FAIL, canary={"accuracy": 0.5}, must_fail=("golden",),
                      needs="quality"),
    PrimitiveScenario("ome-slow", "ome", "OME InferenceService canary through the rendered RolloutPolicy check, "
                      "TTFT ×1.5", Expect.FAIL, canary={"preset": "slow"}, must_fail=("ttft",)),
    PrimitiveScenario("ome-idle", "ome", "OME InferenceService canary with no traffic: held by the rendered check, "
                      "never promoted", Expect.HELD, canary={"preset": "idle"}),
    PrimitiveScenario("dynamo-errors", "dynamo", "Dynamo worker generation rolling in, errors 3 %", Expect.FAIL,
                      canary={"error_rate": 0.03}, must_fail=("errors",)),
    PrimitiveScenario("flagger-slow", "flagger", "Flagger Canary on a Deployment (weights from its status), "
                      "TTFT ×1.5", Expect.FAIL, canary={"preset": "slow"}, must_fail=("ttft",)),
)
SHORT_PRIMITIVE_SCENARIOS = ("llmisvc-healthy", "isvc-slow", "httproute-errors", "adapter-slow", "adapter-wrong",
                             "ome-slow", "dynamo-errors", "flagger-slow")
"""The short form in `make test`: every primitive, both outcomes, and both adapter scenarios."""
PRIMITIVES = Catalogue("rollout-primitives", PRIMITIVE_SCENARIOS, short=frozenset(SHORT_PRIMITIVE_SCENARIOS))
OME_SAMPLES_AFTER_FAIL = 20
"""OME gate samples (one a second) after the verdict API said fail, for Prometheus to scrape the verdict."""


@dataclass
class PrimitiveRow:
    """What one primitive scenario produced."""

    scenario: str
    primitive: str
    title: str
    expected: Expect
    verdicts: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)  # "5 %: i i", "abort", "promoted"
    ok: bool = False
    detail: str = ""
    seconds: float = 0.0


def exported(url: str) -> Exported:
    """Roles and canary weight per group, as the observer at `url` exports them on /metrics."""
    roles: dict[str, Roles] = {}
    weights: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        for s in fam.samples:
            if s.name == "observer_version_role":
                roles.setdefault(s.labels["group"], {})[s.labels["version"]] = s.labels["role"]
            elif s.name == "observer_rollout_canary_weight_ratio":
                weights[s.labels["group"]] = round(s.value, 6)
    return {g: (roles.get(g, {}), weights.get(g)) for g in {*roles, *weights}}


def wait_exported(read: Callable[[], Exported], group: str, want: tuple[Roles, float | None],
                  deadline: float) -> tuple[Roles, float | None]:
    """Poll `read` until `group` is exported as `want` or `deadline` (monotonic) passes; the last reading."""
    got = read().get(group, ({}, None))
    while got != want and time.monotonic() < deadline:
        time.sleep(0.2)
        got = read().get(group, ({}, None))
    return got


def publish_primitive(api: Any, s: PrimitiveScenario, canary: int) -> tuple[Roles, float | None]:
    """Write the scenario's objects with the new version at `canary` % (100: promoted, 0: aborted); what the
    observer must then export for the group."""
    old, new = s.identities
    g = s.group
    if s.primitive == "kserve_llmisvc":
        for svc, weight, created in ((old, 100 - canary, "2026-11-01T00:00:00Z"),
                                     (new, canary, "2026-12-01T00:00:00Z")):
            api.put(f"{NS}/llminferenceservices.serving.kserve.io",
                    po.llmisvc(svc, group=g, weight=weight, created=created))
    elif s.primitive == "kserve_isvc":
        if canary == 100:  # rolled out: the new revision is the rolled-out one and takes everything
            api.put(f"{NS}/inferenceservices.serving.kserve.io",
                    po.isvc(g, stable=new, latest=new, canary_percent=100))
        else:
            api.put(f"{NS}/inferenceservices.serving.kserve.io",
                    po.isvc(g, stable=old, latest=new, canary_percent=canary))
    elif s.primitive == "httproute_pools":
        for pool, created in ((old, "2026-11-01T00:00:00Z"), (new, "2026-12-01T00:00:00Z")):
            api.put(f"{NS}/inferencepools.inference.networking.k8s.io",
                    po.inference_pool(pool, labels={"app": pool}, created=created))
        api.put(f"{NS}/httproutes.gateway.networking.k8s.io",
                po.httproute(g, pools={old: 100 - canary, new: canary}))
    elif s.primitive == "model_rewrite":
        api.put(f"{NS}/inferencepools.inference.networking.k8s.io",
                po.inference_pool(POOL, labels={"app": POOL}))
        # Promoted, the old target leaves the rule; aborted, the new one does (llm-d's rollback).
        targets = {new: 1} if canary == 100 else {old: 1} if canary == 0 else {old: 100 - canary, new: canary}
        api.put(f"{NS}/inferencemodelrewrites.llm-d.ai",
                po.model_rewrite(g, model=REWRITTEN_MODEL, pool=POOL, targets=targets))
        return ({new: "stable"} if canary == 100 else {old: "stable"} if canary == 0 else
                {old: "stable", new: "canary"}), (canary / 100 if 0 < canary < 100 else None)
    elif s.primitive in ("ome", "dynamo"):
        # Promoted: the new revision settles as stable; aborted: rolled back (OME) or the DGD reverted to the
        # old generation (Dynamo has no abort of its own); the other revision's pods stay until they go.
        if s.primitive == "ome":
            obj = po.ome_isvc(g, stable=new, canary=None, phase="Stable") if canary == 100 else \
                po.ome_isvc(g, stable=old, canary=new, phase="RolledBack" if canary == 0 else "Canarying")
            api.put(f"{NS}/inferenceservices.ome.io", obj)
        else:
            obj = po.dgd(g, current=new, phase="Completed") if canary == 100 else \
                po.dgd(g, current=old, phase="Failed" if canary == 0 else "InProgress")
            api.put(f"{NS}/dynamographdeployments.nvidia.com", obj)
        if canary in (0, 100):
            return ({old: "stable", new: "other"} if canary == 0 else {new: "stable", old: "other"}), None
        return {old: "stable", new: "canary"}, 1 / (STABLE_PODS + 1)
    elif s.primitive == "flagger":
        # Flagger keeps its names: promoted, the primary runs the new spec; aborted, the old one (phase Failed);
        # either way the target's pod is `other` until Flagger scales it to zero.
        old_spec, new_spec = (hashlib.sha256(f"{s.name}-{i}".encode()).hexdigest()[:10] for i in (1, 2))
        phase = {100: "Succeeded", 0: "Failed"}.get(canary, "Progressing")
        api.put(f"{NS}/canaries.flagger.app",
                po.flagger_canary(g, phase=phase, applied=new_spec, weight=canary if 0 < canary < 100 else 0,
                                  promoted=new_spec if canary == 100 else old_spec))
        if canary in (0, 100):
            return {old: "stable", new: "other"}, None
        return {old: "stable", new: "canary"}, canary / 100
    else:
        raise GamedayError(f"scenario {s.name}: primitive {s.primitive} is not played by this rig")
    if canary == 100:  # a revision without traffic leaves the InferenceService's status; the others stay `other`
        return ({new: "stable"} if s.primitive == "kserve_isvc" else {old: "other", new: "stable"}), None
    if canary == 0:  # aborted: the canary keeps its pods (and its place in the InferenceService's traffic) at 0
        return {old: "stable", new: "other"}, None
    return {old: "stable", new: "canary"}, canary / 100


def pod_labels(s: PrimitiveScenario, identity: str) -> dict[str, str]:
    """The labels the primitive's controller gives a pod of member `identity`, plus the scenario's selector."""
    own = {"kserve_llmisvc": po.llmisvc_pod_labels(identity),
           "kserve_isvc": {"serving.knative.dev/revision": identity},
           "httproute_pools": {"app": identity},
           "ome": po.ome_pod_labels(s.group, identity),
           "dynamo": po.dynamo_pod_labels(identity),
           "flagger": {"app": identity}}[s.primitive]
    return {**own, "scenario": s.name}


def relabel_pods(api: Any, s: PrimitiveScenario, ports: Mapping[str, int]) -> None:
    """The simulator's pods (same names, so the DCGM join holds) as the primitive's members: stable's pods serve
    the old member, the canary's pod the new one. For an adapter rewrite, stable's pods are the pool that serves
    the base model (a label-role version, `base`) and both adapters; the canary's engine answers the new
    adapter's requests on them (FleetHandle.serve_adapter) and its own pod leaves the API."""
    old, new = s.identities
    if s.primitive == "model_rewrite":
        labels = {"app": POOL, "scenario": s.name, "rollouts-pod-template-hash": "base", POD_ROLE_LABEL: "stable"}
        for i in range(STABLE_PODS):
            api.put(PODS, pod(f"sim-stable-{i}", labels=labels, port=ports[f"stable{i}"]))
        api.delete(PODS, "sim-canary-0")
        return
    for i in range(STABLE_PODS):
        api.put(PODS, pod(f"sim-stable-{i}", labels=pod_labels(s, old), port=ports[f"stable{i}"]))
    api.put(PODS, pod("sim-canary-0", labels=pod_labels(s, new), port=ports["canary0"]))


def primitive_config(cluster: Mapping[str, Any], s: PrimitiveScenario, router_url: str) -> dict[str, Any]:
    """A cluster replica's config whose only model is the scenario's primitive (and, for an adapter rewrite, the
    base model on the same pods; `router_url`: the endpoint picker's /metrics)."""
    data: dict[str, Any] = json.loads(json.dumps(cluster))
    model: dict[str, Any] = {"name": s.group, "selector": {"scenario": s.name}, "port": "http",
                             "primitive": {"kind": s.primitive, "name": s.group}}
    data["discovery"]["kubernetes"]["models"] = [model]
    if s.primitive == "model_rewrite":
        model["primitive"]["model"] = REWRITTEN_MODEL
        model["router"] = {"kind": "llm-d-epp", "urls": [router_url]}
        # The base model on the same pods: its own model entry, counting only its own model name's series.
        data["discovery"]["kubernetes"]["models"].insert(0, {
            "name": "base", "selector": {"scenario": s.name}, "port": "http", "served_model": BASE_MODEL})
    return data


def untouched(url: str, problems: list[str], when: str) -> float | None:
    """Check the base model sharing the adapters' pods is still its own stable version, with no discovery
    problem; its windowed TTFT median (None before its first window)."""
    ttft: float | None = None
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=5).text):
        for x in fam.samples:
            if x.name == WIN_TTFT and x.labels.get("version") == "base" and x.labels.get("quantile") == "0.5":
                ttft = x.value
            elif x.name == "observer_discovery_problems_total" and x.value > 0:
                problems.append(f"{when}: discovery problem {x.labels.get('problem')} in {x.labels.get('group')}")
    roles = exported(url).get("base", ({}, None))[0]
    if roles != {"base": "stable"}:
        problems.append(f"{when}: the base model's versions are {roles}, expected base stable")
    return ttft


def ask(url: str, s: PrimitiveScenario, since: float, weight: int) -> dict[str, Any]:
    old, new = s.identities
    r = httpx.get(f"{url}/api/v1/canary/verdict", params={"canary": new, "baseline": old, "since": since,
                                                          "weight": weight}, timeout=15)
    if r.status_code != 200:
        raise GamedayError(f"verdict endpoint of {url} answered HTTP {r.status_code}: {r.text[:200]}")
    out: dict[str, Any] = r.json()
    return out


def run_primitive_scenario(s: PrimitiveScenario, *, api: Any, fleet: Any, ports: Mapping[str, int], plan: Plan,
                           pg: Any, kubeconfig: Path, single: Mapping[str, Any], workdir: Path,
                           prom_url: str) -> PrimitiveRow:
    """One rollout through the scenario's primitive on a fresh replica and database."""
    t0 = time.monotonic()
    row = PrimitiveRow(scenario=s.name, primitive=s.primitive, title=s.title, expected=s.expect)
    problems: list[str] = []
    total = plan.stable_rps + plan.canary_rps

    def split(canary: int) -> None:  # the simulator's traffic follows the objects' weights
        fleet.set_profile("stable", **sim_profile({}, plan, total * (100 - canary) / 100))
        fleet.set_profile("canary", **sim_profile(s.canary, plan, total * canary / 100))

    def follow(want: tuple[Roles, float | None], when: str) -> None:
        got = wait_exported(lambda: exported(replica.url), s.group, want, time.monotonic() + FOLLOW_S)
        if got != want:
            problems.append(f"{when}: the observer exported {got}, the objects say {want}")

    relabel_pods(api, s, ports)
    steps = s.steps
    want = publish_primitive(api, s, steps[0])
    split(steps[0])
    body: dict[str, Any] = {}
    trail = workdir / f"{s.name}-looks.jsonl"
    adapters = s.primitive == "model_rewrite"
    base_ttft: list[float | None] = []
    with ExitStack() as stack:
        if adapters:  # both adapters answered on the pool's pods, each by its own simulated engine
            for name, engine in zip(s.identities, ("stable", "canary"), strict=True):
                fleet.serve_adapter("stable", name, engine)
                stack.callback(fleet.serve_adapter, "stable", name, None)
        config = primitive_config(cluster_config(single, kubeconfig=kubeconfig, store_url=pg.database(),
                                                 port=ports["observer"], prom_url=prom_url,
                                                 gate_url=f"http://127.0.0.1:{ports['observer']}"), s,
                                  f"http://127.0.0.1:{ports['router']}/metrics")
        replica = spawn(config, f"{s.name}-replica", workdir)
        stack.callback(replica.stop)
        _wait_ready(replica)
        since = time.time()
        outcome = "held"
        # OME gates its step itself: the rendered RolloutPolicy's check on the rig's Prometheus, one sample a look.
        gate = OmeStepGate.for_policy(ome_render.rollout_policy(parse_config(json.dumps(config), environ={})),
                                      step=0, canary=s.identities[1], stable=s.identities[0], isvc=s.group) \
            if s.primitive == "ome" else None
        for step in steps:
            if step != steps[0]:
                want = publish_primitive(api, s, step)
                split(step)
            follow(want, f"at {step} %")
            if adapters:
                base_ttft.append(untouched(replica.url, problems, f"at {step} %"))
            looks: list[str] = []
            limit = LOOKS_PER_STEP if step != steps[-1] else plan.max_rounds
            for _ in range(limit):
                for _ in range(int(plan.round_seconds)):
                    fleet.advance("stable", 1.0)
                    fleet.advance("canary", 1.0)
                time.sleep(plan.scrape_interval * 2.0)
                body = ask(replica.url, s, since, step)
                verdict = str(body["verdict"])
                row.verdicts.append(verdict)
                looks.append(verdict[0])
                with trail.open("a") as f:
                    f.write(json.dumps({"step": step, "body": body}) + "\n")
                if gate is not None and gate.sample(prom_url) != CANARYING:
                    break
                if verdict == "fail" and gate is not None:  # the verdict series reaches OME a scrape later
                    for _ in range(OME_SAMPLES_AFTER_FAIL):
                        time.sleep(plan.scrape_interval)
                        if gate.sample(prom_url) != CANARYING:
                            break
                if verdict == "fail" or (step == steps[-1] and verdict == "pass"):
                    break
            row.steps.append(f"{step} %: {' '.join(looks)}")
            if row.verdicts[-1] == "fail":
                outcome = "aborted"
                break
        if gate is not None:  # OME's own gate decides, not the verdict API
            outcome = {ROLLED_BACK: "aborted", ADVANCED: "promoted"}.get(gate.phase, "held")
            row.steps.append(f"OME check: {gate.run(prom_url, samples=0)}")
        elif outcome != "aborted" and row.verdicts and row.verdicts[-1] == "pass":
            outcome = "promoted"
        if outcome == "aborted":
            split(0)
            follow(publish_primitive(api, s, 0), "aborted")
        elif outcome == "promoted":
            split(100)
            follow(publish_primitive(api, s, 100), "promoted")
        row.steps.append(outcome)
        if adapters:
            base_ttft.append(untouched(replica.url, problems, outcome))
    final = row.verdicts[-1] if row.verdicts else "none"
    seen = [x for x in base_ttft if x is not None]
    if adapters and seen and not 0.8 <= seen[-1] / seen[0] <= 1.25:
        problems.append(f"the base model's TTFT median moved from {seen[0]:.4g} s to {seen[-1]:.4g} s")
    if s.expect is Expect.HELD:
        if outcome != "held":
            problems.append(f"ended {outcome} on {final}, expected held (never promoted, never aborted)")
        if "pass" in row.verdicts or "fail" in row.verdicts:
            problems.append(f"verdicts {row.verdicts}: a canary with no traffic must never pass or fail")
    elif s.expect is Expect.PASS:
        if outcome != "promoted":
            problems.append(f"ended {outcome} on {final}, expected promoted on pass: {body.get('reason', '')}")
        if "fail" in row.verdicts:
            problems.append("a fail on the way")
    else:
        if outcome != "aborted":
            problems.append(f"ended {outcome} on {final}, expected aborted on fail: {body.get('reason', '')}")
        if "pass" in row.verdicts:
            problems.append("a pass on the way")
    engine_ttft = body.get("metrics", {}).get("ttft", {})
    if adapters and (engine_ttft.get("result") != "nodata" or "model name" not in engine_ttft.get("why", "")):
        problems.append(f"the adapter's engine ttft {engine_ttft}: expected nodata saying vLLM has no series "
                        "under its model name")
    for name in s.must_fail:
        got = body.get("metrics", {}).get(name, {}).get("result")
        if got != "fail":
            problems.append(f"metric {name} {got}, expected fail")
    row.ok = not problems
    row.detail = "; ".join([*problems, f"every look's answer: {trail}"] if problems else
                           [str(body.get("reason", ""))[:120]])
    row.seconds = time.monotonic() - t0
    return row


@dataclass
class PrimitiveRig:
    """The cluster rig, playing rollouts through the primitives: each scenario publishes its objects and starts a
    replica of its own on a fresh database."""

    cluster: ClusterRig

    def play(self, s: PrimitiveScenario) -> PrimitiveRow:
        """Run `s` through its primitive."""
        c = self.cluster
        extra = (ROUTER_TTFT,) if s.primitive == "model_rewrite" else ()
        single = yaml.safe_load(config_yaml(c.ports, c.plan, Scenario(s.name, s.title, s.expect, needs=s.needs,
                                                                       metrics=extra), c.work))
        return run_primitive_scenario(s, api=c.api, fleet=c.fleet, ports=c.ports, plan=c.plan, pg=c.pg,
                                      kubeconfig=c.kubeconfig, single=single, workdir=c.work, prom_url=c.prom_url)

    def could_not_run(self, s: PrimitiveScenario, reason: str) -> PrimitiveRow:
        """The row of a scenario the rig could not play."""
        return PrimitiveRow(scenario=s.name, primitive=s.primitive, title=s.title, expected=s.expect, detail=reason)


@contextmanager
def primitive_rig(plan: Plan, *, seed: int) -> Iterator[PrimitiveRig]:
    """The cluster rig (GamedayError when PostgreSQL is missing), for the primitives."""
    with cluster_rig(plan, seed=seed) as rig:
        yield PrimitiveRig(rig)


def print_primitives(rows: Sequence[PrimitiveRow], console: Console) -> bool:
    """Print the table; True when every scenario ended as expected."""
    t = Table(title="observer game day — rollout primitives",
              caption="OK" if all(r.ok for r in rows) else "MISMATCH")
    for col in ("scenario", "primitive", "expected", "steps (verdict per look)", "ok", "detail"):
        t.add_column(col)
    for r in rows:
        t.add_row(f"{r.scenario}: {r.title}", r.primitive, r.expected, " → ".join(r.steps),
                  "[green]yes[/]" if r.ok else "[red]NO[/]", f"{r.detail} ({r.seconds:.0f}s)")
    console.print(t)
    return all(r.ok for r in rows)
