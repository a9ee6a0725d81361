"""observer_discovery_* and observer_rollout_*: what Kubernetes discovery sees, at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.discover.watch import Discovery


class DiscoveryCollector(Collector):
    """observer_discovery_* and observer_rollout_* from discovery's state at each scrape."""

    def __init__(self, discovery: Discovery) -> None:
        self.c = discovery

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        c = self.c
        synced = GaugeMetricFamily(names.DISCOVERY_SYNCED, "1 once the collection was listed, 0 before.",
                                   labels=[names.RESOURCE])
        errors = CounterMetricFamily(names.DISCOVERY_ERRORS, "Kubernetes API errors by reason (the last good "
                                     "state is kept).", labels=[names.RESOURCE, names.REASON])
        relists = CounterMetricFamily(names.DISCOVERY_RELISTS, "Full lists by why: start, gone (410), resync, "
                                      "error.", labels=[names.RESOURCE, names.REASON])
        events = CounterMetricFamily(names.DISCOVERY_EVENTS, "Watch events by type.",
                                     labels=[names.RESOURCE, "type"])
        for r in c.reflectors():
            synced.add_metric([r.resource], 1.0 if r.synced else 0.0)
            for reason, n in sorted(r.stats.errors.items()):
                errors.add_metric([r.resource, reason], n)
            for reason, n in sorted(r.stats.relists.items()):
                relists.add_metric([r.resource, reason], n)
            for kind, n in sorted(r.stats.events.items()):
                events.add_metric([r.resource, kind], n)
        yield from (synced, errors, relists, events)
        problems = CounterMetricFamily(names.DISCOVERY_PROBLEMS, "Pods, rollout-source objects or versions "
                                       "discovery skipped, by problem (no_ip, no_identity, invalid_identity, "
                                       "pods_over_cap, ...).",
                                       labels=[names.GROUP, names.PROBLEM])
        for (group, problem), n in sorted(c.problems.items()):
            problems.add_metric([group, problem], n)
        yield problems
        role = GaugeMetricFamily(names.VERSION_ROLE, "The role each watched version has now (value 1).",
                                 labels=[names.VERSION, names.GROUP, names.ROLE])
        for v in c.fleet.versions():
            role.add_metric([v.name, v.group or "", v.role], 1.0)
        yield role
        pods = GaugeMetricFamily(names.DISCOVERY_PODS, "Serving pods discovered per version.",
                                 labels=[names.VERSION, names.GROUP, names.ROLE])
        nodes = GaugeMetricFamily(names.VERSION_NODES, "Distinct nodes the version's serving pods run on (a node's "
                                  "loss takes every replica when it is 1).", labels=[names.VERSION, names.GROUP])
        moving = GaugeMetricFamily(names.VERSION_MUTABLE_IMAGE, "Serving pods of the version running an image by a "
                                   "tag that moves (:latest, or no tag) without a digest: the version name can hide "
                                   "another build.", labels=[names.VERSION, names.GROUP, names.IMAGE])
        weight = GaugeMetricFamily(names.ROLLOUT_CANARY_WEIGHT, "The canary's expected traffic share, from the "
                                   "model's rollout source: an Argo Rollout's step (setWeight, or its routed weight), "
                                   "a primitive's weights, or the canary's share of ready pods where requests follow "
                                   "pods (OME, Dynamo).", labels=[names.GROUP])
        share = GaugeMetricFamily(names.ROLLOUT_CANARY_REPLICA_SHARE, "Canary pods / (canary + stable) pods.",
                                  labels=[names.GROUP])
        stale = GaugeMetricFamily(names.ROLLOUT_STALE_REVISION_PODS, "Serving pods of a revision that is neither "
                                  "the rollout source's stable nor its canary (old pods after promotion).",
                                  labels=[names.GROUP])
        conflict = GaugeMetricFamily(names.ROLLOUT_AUTOSCALER_CONFLICT, "1 per HPA/KEDA ScaledObject that scales "
                                     "a ReplicaSet or Deployment the Rollout owns instead of the Rollout.",
                                     labels=[names.GROUP, "autoscaler"])
        scaling = GaugeMetricFamily(names.AUTOSCALER_REPLICAS, "Replicas of the HPA scaling the model's Rollout, by "
                                    "kind: min, max (its bounds), current, desired (its status); a count the HPA "
                                    "does not report is absent.", labels=[names.GROUP, "autoscaler", names.KIND])
        signal = GaugeMetricFamily(names.AUTOSCALER_SIGNAL, "1 per signal the HPA scaling the model's Rollout scales "
                                   "on: cpu, memory, pods:<metric>, object:<metric>, external:<metric>, or a KEDA "
                                   "trigger keda:<type> (at most 8).", labels=[names.GROUP, "autoscaler", names.SIGNAL])
        wait = GaugeMetricFamily(names.AUTOSCALER_SCALE_DOWN_WAIT, "Seconds the HPA scaling the model's Rollout waits "
                                 "before it scales down (behavior.scaleDown.stabilizationWindowSeconds; 300 unset).",
                                 labels=[names.GROUP, "autoscaler"])
        states = GaugeMetricFamily(names.VERSION_PODS, "Pods of each version by state: ready, or why not "
                                   "(unschedulable, starting, failing, not_ready; reason: the scheduler's or the "
                                   "container's, bounded).",
                                   labels=[names.VERSION, names.GROUP, names.STATE, names.REASON])
        for group, st in sorted(c.states.items()):
            for name in sorted({*st.pods, *st.waiting}):
                states.add_metric([name, group, "ready", ""], st.pods.get(name, 0))
                for why, n in sorted(st.waiting.get(name, {}).items()):
                    state, _, reason = why.partition(":")
                    states.add_metric([name, group, state, reason], n)
            for a in st.autoscalers:
                for kind, n in a.counts().items():
                    scaling.add_metric([group, a.name, kind], float(n))
                for sig in a.signals:
                    signal.add_metric([group, a.name, sig], 1.0)
                if a.scale_down_stabilization is not None:
                    wait.add_metric([group, a.name], float(a.scale_down_stabilization))
            for v in st.versions:
                pods.add_metric([v.name, group, v.role], st.pods.get(v.name, 0))
                if v.name in st.nodes:
                    nodes.add_metric([v.name, group], st.nodes[v.name])
                for image, n in sorted(st.mutable_images.get(v.name, {}).items()):
                    moving.add_metric([v.name, group, image], n)
            if st.canary_weight is not None:
                weight.add_metric([group], st.canary_weight)
            if st.canary_replica_share is not None:
                share.add_metric([group], st.canary_replica_share)
            stale.add_metric([group], st.stale_revision_pods)
            for a in st.autoscaler_conflicts[:16]:
                conflict.add_metric([group, a[:128]], 1.0)
        kept = GaugeMetricFamily(names.ROLLBACK_WINDOW_PODS, "Serving pods of the previous stable version while the "
                                 "Rollout's scaleDownDelaySeconds after a promotion runs (a fast rollback needs "
                                 "them); absent outside that window.", labels=[names.GROUP, names.VERSION])
        left = GaugeMetricFamily(names.ROLLBACK_WINDOW_REMAINING, "Seconds left of the Rollout's scaleDownDelaySeconds "
                                 "after the last promotion discovery saw; absent outside that window.",
                                 labels=[names.GROUP])
        for group in sorted(c.rollback.windows):
            w = c.rollback.open(group)
            if w is not None:
                kept.add_metric([group, w.version], w.pods)
                left.add_metric([group], max(0.0, w.delay - (c.clock() - w.promoted_at)))
        yield from (pods, nodes, moving, weight, share, stale, conflict, scaling, signal, wait, states, kept, left)
