"""Rollout-hygiene alerts (what a version name hides: observed fingerprints, discovery's view of the
Rollout), each with its examples."""

from __future__ import annotations

from observer import conventions as names
from observer.conventions.promql import one_of, selector
from observer.render.burnrate import duration
from observer.render.objectives import Alerting
from observer.render.rule_timing import timing
from observer.render.rulemodel import Alert, Example, Firing, Group, Labels, Series

_V = names.VERSION


def hygiene_group(a: Alerting) -> Group:
    """Rollout hygiene: one fingerprint per version; retired versions get no traffic."""
    interval, at, steps = timing(a, a.limits.leading_for)
    info = names.VERSION_INFO
    rules: list[Alert] = [Alert(
        name=names.ALERT_FINGERPRINTS,
        expr=f"count by ({_V}) (count by ({_V}, {names.FINGERPRINT}) ({info})) > 1",
        severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }} serves more than one build",
        description=(f"Version {{{{ $labels.version }}}} reports {{{{ printf \"%.0f\" $value }}}} different "
                     f"fingerprints (model, prompt template, sampling defaults) for "
                     f"{duration(a.limits.leading_for)}: replicas disagree, so its signals mix two builds."),
        runbook="version-fingerprints",
        examples=(Example(f"{names.ALERT_FINGERPRINTS} fires with two fingerprints",
                          tuple(Series(selector(info, {_V: "canary", names.MODEL: "m", names.FINGERPRINT: f}),
                                       f"1x{steps}") for f in ("aaa", "bbb")),
                          at, interval, (Firing(((_V, "canary"),), 2.0),)),
                  Example(f"{names.ALERT_FINGERPRINTS} quiet with one",
                          (Series(selector(info, {_V: "canary", names.MODEL: "m", names.FINGERPRINT: "aaa"}),
                                  f"1x{steps}"),), at, interval)),
    )]
    if a.retired_versions:
        req = names.REQUESTS + "_total"
        window = duration(300 * a.time_scale)
        old = a.retired_versions[0]
        rules.append(Alert(
            name=names.ALERT_RETIRED_TRAFFIC,
            expr=f"sum by ({_V}) (rate({selector(req, regex={_V: one_of(a.retired_versions)})}[{window}])) > 0",
            severity="warning", for_seconds=a.limits.leading_for,
            summary="Retired version {{ $labels.version }} still receives traffic",
            description=("Version {{ $labels.version }} is retired in the fleet config but still serves "
                         "{{ printf \"%.2f\" $value }} requests/s: a route or client still points at it."),
            runbook="retired-traffic",
            examples=(Example(f"{names.ALERT_RETIRED_TRAFFIC} fires",
                              (Series(selector(req, {_V: old, names.MODEL: "m", names.FINISHED_REASON: "stop"}),
                                      f"0+60x{steps}"),), at, interval, (Firing(((_V, old),), 60 / interval),)),),
        ))
    if a.fingerprint_enabled:
        rules.extend(_observed_fingerprint(a))
    rules.extend(_discovery_hygiene(a))
    return Group(names.RULE_GROUP_HYGIENE, tuple(rules))


def _observed_fingerprint(a: Alerting) -> list[Alert]:
    """The observed system prompt / sampling parameters of a version changed, or differ from the declared."""
    interval, at, steps = timing(a, 0.0)
    key: Labels = ((names.PART, "template"), (_V, "canary"))
    out = []
    for name, metric, summary, description, runbook in (
        (names.ALERT_FINGERPRINT_CHANGED, names.FINGERPRINT_CHANGED,
         "{{ $labels.version }}: {{ $labels.part }} changed without a new version",
         "The {{ $labels.part }} hash the sampled requests of version {{ $labels.version }} carry is not the one "
         "they carried before (sampling.fingerprint reference window), and the version name did not change: a "
         "prompt template or sampling defaults rolled (back or forward) apart from the weights (gauge "
         "{{ printf \"%.0f\" $value }}).",
         "fingerprint-changed"),
        (names.ALERT_FINGERPRINT_MISMATCH, names.FINGERPRINT_MISMATCH,
         "{{ $labels.version }}: observed {{ $labels.part }} is not the declared one",
         "The {{ $labels.part }} hash the sampled requests of version {{ $labels.version }} carry differs from "
         "the hash declared in fleet.versions (prompt_template_hash / sampling_defaults_hash): the version "
         "serves another prompt template or sampling parameters than its config says (gauge "
         "{{ printf \"%.0f\" $value }}).",
         "fingerprint-mismatch"),
    ):
        out.append(Alert(
            name=name, expr=f"max by ({_V}, {names.PART}) ({metric}) == 1", severity="ticket",
            summary=summary, description=description, runbook=runbook,
            examples=(Example(f"{name} fires", (Series(selector(metric, dict(key)), f"1x{steps}"),
                                                 Series(selector(metric, {names.PART: "sampling", _V: "canary"}),
                                                        f"0x{steps}")),
                              at, interval, (Firing(key, 1.0),)),
                      Example(f"{name} quiet", (Series(selector(metric, dict(key)), f"0x{steps}"),), at, interval)),
        ))
    return out


def _discovery_hygiene(a: Alerting) -> list[Alert]:
    """Rollout hygiene from Kubernetes discovery's gauges (series exist only when discovery runs)."""
    interval, at, steps = timing(a, a.limits.leading_for)
    g = names.GROUP
    share, weight = names.ROLLOUT_CANARY_REPLICA_SHARE, names.ROLLOUT_CANARY_WEIGHT
    stale, conflict = names.ROLLOUT_STALE_REVISION_PODS, names.ROLLOUT_AUTOSCALER_CONFLICT
    key: Labels = ((g, "llm"),)
    return [
        Alert(name=names.ALERT_REPLICA_SHARE, expr=f"abs({share} - on ({g}) {weight}) > 0.1",
              severity="warning", for_seconds=a.limits.leading_for,
              summary="{{ $labels.group }}: canary pods do not match the Rollout's weight",
              description=("The canary of {{ $labels.group }} has a pod share {{ printf \"%.2f\" $value }} away "
                           "from its step's setWeight: without traffic routing Argo splits by pods, so the canary "
                           "gets another share than the gate expects (or an autoscaler resized it)."),
              runbook="canary-replicas",
              examples=(Example(f"{names.ALERT_REPLICA_SHARE} fires at 25% pods for 5%",
                                (Series(selector(share, {g: "llm"}), f"0.25x{steps}"),
                                 Series(selector(weight, {g: "llm"}), f"0.05x{steps}")), at, interval,
                                (Firing(key, 0.2),)),
                        Example(f"{names.ALERT_REPLICA_SHARE} quiet when they match",
                                (Series(selector(share, {g: "llm"}), f"0.05x{steps}"),
                                 Series(selector(weight, {g: "llm"}), f"0.05x{steps}")), at, interval))),
        Alert(name=names.ALERT_STALE_REVISION, expr=f"{stale} > 0", severity="warning",
              for_seconds=a.limits.leading_for,
              summary="{{ $labels.group }}: an old revision still serves",
              description=("{{ printf \"%.0f\" $value }} pod(s) of {{ $labels.group }} belong to a revision that "
                           "is neither the Rollout's stable nor its canary: old pods still serve after promotion."),
              runbook="old-revision-serving",
              examples=(Example(f"{names.ALERT_STALE_REVISION} fires", (Series(selector(stale, {g: "llm"}),
                                                                            f"2x{steps}"),), at, interval,
                                (Firing(key, 2.0),)),
                        Example(f"{names.ALERT_STALE_REVISION} quiet", (Series(selector(stale, {g: "llm"}),
                                                                          f"0x{steps}"),), at, interval))),
        Alert(name=names.ALERT_AUTOSCALER_CONFLICT, expr=f"{conflict} > 0", severity="warning",
              for_seconds=a.limits.leading_for,
              summary="{{ $labels.autoscaler }} scales what the Rollout of {{ $labels.group }} owns",
              description=("{{ $labels.autoscaler }} targets a ReplicaSet or Deployment owned by the Rollout of "
                           "{{ $labels.group }} instead of the Rollout ({{ printf \"%.0f\" $value }} such "
                           "autoscaler): it resizes the canary behind Argo's back (the canary un-canaried by "
                           "the autoscaler)."),
              runbook="autoscaler-conflict",
              examples=(Example(f"{names.ALERT_AUTOSCALER_CONFLICT} fires",
                                (Series(selector(conflict, {g: "llm", "autoscaler": "HorizontalPodAutoscaler/llm"}),
                                        f"1x{steps}"),), at, interval,
                                (Firing(((g, "llm"), ("autoscaler", "HorizontalPodAutoscaler/llm")), 1.0),)),)),
    ]
