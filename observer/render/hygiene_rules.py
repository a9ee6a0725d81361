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
    rules.extend(_autoscaling(a))
    rules.append(_pods_not_arriving(a))
    rules.append(_rollback_window(a))
    rules.append(_one_node(a))
    rules.append(_mutable_image(a))
    rules.append(_tokenizers(a))
    return Group(names.RULE_GROUP_HYGIENE, tuple(rules))


FLAPPING_WINDOW = 1800.0
"""Seconds over which the HPA's desired replicas are watched for back-and-forth changes."""
FLAPPING_CHANGES = 6
"""Changes of the desired replicas within FLAPPING_WINDOW that count as flapping (three up-and-downs)."""
NOT_REACTING_WINDOW = 600.0
"""Seconds the HPA's desired replicas stay unchanged, below its ceiling, while requests queue, before the
not-reacting alert's `for` starts: an HPA that reads the model's load asks for more within a minute or two (its
sync period is 15 s; its scale-up stabilisation 0 by default)."""


PODS_WAIT_FOR = 900.0
"""Seconds a version's pod may not serve before it pages nobody but warns: longer than a large model's load
from a cold node, far shorter than a canary step left waiting for a GPU that never frees."""


def _pods_not_arriving(a: Alerting) -> Alert:
    """Pods a version's controller asked for that do not serve: unschedulable, failing, starting, not Ready."""
    hold = PODS_WAIT_FOR * a.time_scale
    interval, at, steps = timing(a, hold)
    g, pods, state, reason = names.GROUP, names.VERSION_PODS, names.STATE, names.REASON
    labels = {g: "llm", _V: "canary"}
    key: Labels = ((g, "llm"), (reason, "insufficient_gpu"), (state, "unschedulable"), (_V, "canary"))

    def series(waiting: str) -> tuple[Series, ...]:
        return (Series(selector(pods, {**labels, state: "ready", reason: ""}), f"1x{steps}"),
                Series(selector(pods, {**labels, state: "unschedulable", reason: "insufficient_gpu"}), waiting))

    return Alert(
        name=names.ALERT_PODS_NOT_ARRIVING,
        expr=f"sum by ({g}, {_V}, {state}, {reason}) ({selector(pods, exclude={state: 'ready'})}) > 0",
        severity="warning", for_seconds=hold,
        summary="{{ $labels.version }} ({{ $labels.group }}): {{ $labels.state }} pods do not arrive",
        description=(f"{{{{ printf \"%.0f\" $value }}}} pod(s) of {{{{ $labels.version }}}} have been "
                     f"{{{{ $labels.state }}}} ({{{{ $labels.reason }}}}) for {duration(hold)}: the version runs "
                     f"on fewer pods than its controller asked for. A canary waiting for pods is never passed; "
                     f"a stable one serves on less capacity."),
        runbook="pods-not-arriving",
        examples=(Example(f"{names.ALERT_PODS_NOT_ARRIVING} fires on a pod the scheduler cannot place",
                          series(f"2x{steps}"), at, interval, (Firing(key, 2.0),)),
                  Example(f"{names.ALERT_PODS_NOT_ARRIVING} quiet once the pod is placed",
                          series(f"2x{steps // 2} 0x{steps - steps // 2}"), at, interval)))


def _tokenizers(a: Alerting) -> Alert:
    """Replicas of one version whose /tokenize answers the probe conversation differently."""
    interval, at, steps = timing(a, a.limits.leading_for)
    info, tok, m = names.REPLICA_TOKENIZER, names.TOKENIZER, names.MODEL
    key: Labels = ((m, "llm"), (_V, "canary"))

    def replica(name: str, h: str) -> Series:
        return Series(selector(info, {_V: "canary", m: "llm", names.REPLICA: name, tok: h}), f"1x{steps}")

    return Alert(
        name=names.ALERT_TOKENIZER_MISMATCH,
        expr=f"count by ({_V}, {m}) (count by ({_V}, {m}, {tok}) ({selector(info, exclude={tok: 'unknown'})})) > 1",
        severity="warning", for_seconds=a.limits.leading_for,
        summary="{{ $labels.version }}: replicas tokenize the same conversation differently",
        description=(f"The replicas of {{{{ $labels.version }}}} ({{{{ $labels.model }}}}) answer the /tokenize probe "
                     f"with {{{{ printf \"%.0f\" $value }}}} different token-id hashes for "
                     f"{duration(a.limits.leading_for)}: they apply another chat template or tokenizer, so one "
                     f"version name serves two builds and its signals mix them."),
        runbook="replica-tokenizers",
        examples=(Example(f"{names.ALERT_TOKENIZER_MISMATCH} fires when two replicas disagree",
                          (replica("pod-0", "aaa"), replica("pod-1", "bbb"), replica("pod-2", "unknown")), at,
                          interval, (Firing(key, 2.0),)),
                  Example(f"{names.ALERT_TOKENIZER_MISMATCH} quiet when one cannot say (no /tokenize)",
                          (replica("pod-0", "aaa"), replica("pod-1", "unknown")), at, interval)))


def _rollback_window(a: Alerting) -> Alert:
    """The previous stable version lost its pods inside the Rollout's scaleDownDelaySeconds."""
    hold = 60.0 * a.time_scale  # a pod replaced inside the window (evicted, rescheduled) does not fire
    interval, at, steps = timing(a, hold)
    g, kept, left = names.GROUP, names.ROLLBACK_WINDOW_PODS, names.ROLLBACK_WINDOW_REMAINING
    key: Labels = ((g, "llm"), (_V, "aaa"))

    def series(pods: str) -> tuple[Series, ...]:
        return (Series(selector(kept, dict(key)), pods), Series(selector(left, {g: "llm"}), f"1200-60x{steps}"))

    return Alert(
        name=names.ALERT_ROLLBACK_WINDOW_LOST, expr=f"max by ({g}, {_V}) ({kept}) == 0", severity="warning",
        for_seconds=hold,
        summary="{{ $labels.group }}: the previous version {{ $labels.version }} lost its pods inside the "
                "rollback window",
        description=("The Rollout of {{ $labels.group }} promoted a new version and should keep the previous one, "
                     "{{ $labels.version }}, scaled for its scaleDownDelaySeconds, but it has "
                     "{{ printf \"%.0f\" $value }} serving pods: an abort now waits for new pods to schedule "
                     "and load the model instead of shifting traffic back at once."),
        runbook="rollback-window-lost",
        examples=(Example(f"{names.ALERT_ROLLBACK_WINDOW_LOST} fires when the previous pods are gone",
                          series(f"2 0x{steps - 1}"), at, interval, (Firing(key, 0.0),)),
                  Example(f"{names.ALERT_ROLLBACK_WINDOW_LOST} quiet while they stay",
                          series(f"2x{steps}"), at, interval)))


ONE_NODE_FOR = 900.0
"""Seconds a version's replicas may share one node before it warns: pods rescheduling in a rollout or a drain
spread again within minutes; a scheduler that keeps them together does not."""


def _one_node(a: Alerting) -> Alert:
    """Every serving replica of a version on one node: the pods' spread is soft, and this is when it did not hold."""
    hold = ONE_NODE_FOR * a.time_scale
    interval, at, steps = timing(a, hold)
    g, nodes, pods = names.GROUP, names.VERSION_NODES, names.DISCOVERY_PODS
    key: Labels = ((g, "llm"), (_V, "aaa"))

    def series(on_nodes: str, serving: str) -> tuple[Series, ...]:
        return (Series(selector(nodes, dict(key)), on_nodes),
                Series(selector(pods, {**dict(key), names.ROLE: "stable"}), serving))

    return Alert(
        name=names.ALERT_VERSION_ON_ONE_NODE,
        expr=f"max by ({g}, {_V}) ({pods}) >= 2 and on ({g}, {_V}) max by ({g}, {_V}) ({nodes}) == 1",
        severity="warning", for_seconds=hold,
        summary="{{ $labels.group }}: every replica of {{ $labels.version }} runs on one node",
        description=(f"All {{{{ printf \"%.0f\" $value }}}} serving pods of version {{{{ $labels.version }}}} "
                     f"({{{{ $labels.group }}}}) have run on "
                     f"one node for {duration(hold)}: that node's loss, drain or GPU fault takes the whole version "
                     f"down at once, and its replicas share one failure (a slow-replica alert cannot tell them "
                     f"apart)."),
        runbook="version-on-one-node",
        examples=(Example(f"{names.ALERT_VERSION_ON_ONE_NODE} fires with three pods on one node",
                          series(f"1x{steps}", f"3x{steps}"), at, interval, (Firing(key, 3.0),)),
                  Example(f"{names.ALERT_VERSION_ON_ONE_NODE} quiet spread over two nodes",
                          series(f"2x{steps}", f"3x{steps}"), at, interval),
                  Example(f"{names.ALERT_VERSION_ON_ONE_NODE} quiet with one replica",
                          series(f"1x{steps}", f"1x{steps}"), at, interval)))


def _mutable_image(a: Alerting) -> Alert:
    """A serving version runs an image by a tag that moves: its name no longer pins its engine."""
    interval, at, steps = timing(a, a.limits.leading_for)
    g, moving = names.GROUP, names.VERSION_MUTABLE_IMAGE
    key: Labels = ((g, "llm"), (names.IMAGE, "vllm/vllm-openai:latest"), (_V, "aaa"))
    return Alert(
        name=names.ALERT_MUTABLE_IMAGE, expr=f"max by ({g}, {_V}, {names.IMAGE}) ({moving}) > 0", severity="warning",
        for_seconds=a.limits.leading_for,
        summary="{{ $labels.group }}: {{ $labels.version }} runs {{ $labels.image }}, a tag that moves",
        description=("{{ printf \"%.0f\" $value }} serving pods of version {{ $labels.version }} run "
                     "{{ $labels.image }}: `:latest` (or no tag) without a digest. A pod started tomorrow can pull "
                     "another engine under the same version name, so a canary verdict no longer says which engine "
                     "it judged; pin a release tag or a digest."),
        runbook="mutable-image-tag",
        examples=(Example(f"{names.ALERT_MUTABLE_IMAGE} fires on :latest",
                          (Series(selector(moving, dict(key)), f"2x{steps}"),), at, interval,
                          (Firing(key, 2.0),)),
                  Example(f"{names.ALERT_MUTABLE_IMAGE} quiet once pinned",
                          (Series(selector(moving, dict(key)), f"2x{steps // 2} stale"),), at,
                          interval)))


_HPA = "HorizontalPodAutoscaler/llm"


def _hpa_counts(steps: int, **counts: str) -> tuple[Series, ...]:
    """An example's HPA replica counts by kind (values in promtool's series notation) and the canary's role."""
    g = names.GROUP
    return (*(Series(selector(names.AUTOSCALER_REPLICAS, {g: "llm", "autoscaler": _HPA, names.KIND: k}), v)
              for k, v in counts.items()),
            Series(selector(names.VERSION_ROLE, {_V: "canary", g: "llm", names.ROLE: "canary"}), f"1x{steps}"))


def _autoscaling(a: Alerting) -> list[Alert]:
    """The autoscaler of a Rollout at its ceiling while requests queue, and flapping (discovery's HPA gauges)."""
    interval, at, steps = timing(a, a.limits.leading_for)
    g, kind, reps = names.GROUP, names.KIND, names.AUTOSCALER_REPLICAS
    queue, role = names.QUEUE_DEPTH_PER_REPLICA, names.VERSION_ROLE
    hpa = "HorizontalPodAutoscaler/llm"
    key: Labels = (("autoscaler", hpa), (g, "llm"))
    by = f"{g}, autoscaler"
    floor = a.limits.queue_depth_per_replica / 2
    # The queue per replica of the model's busiest version, joined to its group through the role gauge.
    queued = (f"max by ({g}) (max by ({_V}) ({queue}) * on ({_V}) group_left ({g}) "
              f"max by ({_V}, {g}) ({role}))")
    ceiling = (f"max by ({by}) ({selector(reps, {kind: 'current'})})\n>= on ({by})\n"
               f"max by ({by}) ({selector(reps, {kind: 'max'})})\nand on ({g})\n{queued} > {floor!r}")
    window = duration(FLAPPING_WINDOW * a.time_scale)
    flapping = f"max by ({by}) (changes({selector(reps, {kind: 'desired'})}[{window}])) >= {FLAPPING_CHANGES}"
    # Samples 4 minutes apart: the window's start never falls on one, whichever side of it the range includes.
    flap_interval = 240.0 * a.time_scale
    flap_steps = 12

    def hpa_series(current: int, maximum: int) -> tuple[Series, ...]:
        return _hpa_counts(steps, current=f"{current}x{steps}", max=f"{maximum}x{steps}")

    busy = Series(selector(queue, {_V: "canary"}), f"{floor * 2:g}x{steps}")
    idle = Series(selector(queue, {_V: "canary"}), f"{floor / 4:g}x{steps}")
    return [
        *_not_reacting(a, queued, floor),
        Alert(name=names.ALERT_AUTOSCALER_CEILING, expr=ceiling, severity="warning",
              for_seconds=a.limits.leading_for,
              summary="{{ $labels.group }}: {{ $labels.autoscaler }} at maxReplicas while requests queue",
              description=(f"{{{{ $labels.autoscaler }}}} runs {{{{ printf \"%.0f\" $value }}}} replicas of "
                           f"{{{{ $labels.group }}}}, its maxReplicas, and requests queue (over {floor:g} per "
                           f"replica) for {duration(a.limits.leading_for)}: it cannot add capacity, so latency "
                           f"grows until the ceiling is raised or GPUs are added."),
              runbook="autoscaler-ceiling",
              examples=(Example(f"{names.ALERT_AUTOSCALER_CEILING} fires at the ceiling with a queue",
                                (*hpa_series(4, 4), busy), at, interval, (Firing(key, 4.0),)),
                        Example(f"{names.ALERT_AUTOSCALER_CEILING} quiet below the ceiling",
                                (*hpa_series(3, 4), busy), at, interval),
                        Example(f"{names.ALERT_AUTOSCALER_CEILING} quiet at the ceiling without a queue",
                                (*hpa_series(4, 4), idle), at, interval))),
        Alert(name=names.ALERT_AUTOSCALER_FLAPPING, expr=flapping, severity="warning",
              summary="{{ $labels.group }}: {{ $labels.autoscaler }} is flapping",
              description=(f"The desired replicas of {{{{ $labels.autoscaler }}}} ({{{{ $labels.group }}}}) "
                           f"changed {{{{ printf \"%.0f\" $value }}}} times in {window}: it scales up and down "
                           f"again, so pods start cold (model load, empty prefix cache) and are thrown away."),
              runbook="autoscaler-flapping",
              examples=(Example(f"{names.ALERT_AUTOSCALER_FLAPPING} fires when desired goes back and forth",
                                (Series(selector(reps, {g: "llm", "autoscaler": hpa, kind: "desired"}),
                                        " ".join(["2", "4"] * (flap_steps // 2))),), flap_interval * (flap_steps - 1),
                                flap_interval, (Firing(key, 7.0),)),
                        Example(f"{names.ALERT_AUTOSCALER_FLAPPING} quiet while it scales once",
                                (Series(selector(reps, {g: "llm", "autoscaler": hpa, kind: "desired"}),
                                        "2 2 2 3 3 4 4 4 4 4 4 4"),), flap_interval * (flap_steps - 1),
                                flap_interval))),
    ]


def _not_reacting(a: Alerting, queued: str, floor: float) -> list[Alert]:
    """An HPA below its ceiling that wants no more replicas while requests queue (a trigger on CPU only, a dead
    metrics adapter, a KEDA query that returns nothing), and a floor or scale-down wait the cold start outruns."""
    interval, at, steps = timing(a, a.limits.leading_for)
    g, kind, reps, role = names.GROUP, names.KIND, names.AUTOSCALER_REPLICAS, names.VERSION_ROLE
    key: Labels = (("autoscaler", _HPA), (g, "llm"))
    by = f"{g}, autoscaler"
    window = duration(NOT_REACTING_WINDOW * a.time_scale)

    def count(k: str) -> str:
        return f"max by ({by}) ({selector(reps, {kind: k})})"

    flat = (f"{count('desired')}\n<= on ({by}) {count('current')}\nand on ({by}) ({count('current')} < on ({by}) "
            f"{count('max')})\nand on ({by}) (max by ({by}) (changes({selector(reps, {kind: 'desired'})}[{window}])) "
            f"== 0)\nand on ({g})\n{queued} > {floor!r}")
    cold = names.COLD_START
    # The mean cold start of the model's versions since the observer watched them start (a pod start is rare:
    # a rate over an hour is empty most of the time).
    cold_by_group = (f"max by ({g}) (sum by ({_V}) ({cold}_sum) / sum by ({_V}) ({cold}_count) * on ({_V}) "
                     f"group_left ({g}) max by ({_V}, {g}) ({role}))")
    wait = names.AUTOSCALER_SCALE_DOWN_WAIT
    risk = (f'label_replace({count("min")} == 0, "{names.REASON}", "scales_to_zero", "", "")\nor\n'
            f'label_replace(max by ({by}) ({wait}) < on ({g}) group_left () {cold_by_group}, "{names.REASON}", '
            f'"scale_down_before_cold_start", "", "")')

    def hpa(desired: str, current: int = 2, maximum: int = 4) -> tuple[Series, ...]:
        return _hpa_counts(steps, desired=desired, current=f"{current}x{steps}", max=f"{maximum}x{steps}")

    busy = Series(selector(names.QUEUE_DEPTH_PER_REPLICA, {_V: "canary"}), f"{floor * 2:g}x{steps}")
    rises = f"2x{steps // 2} 3x{steps - steps // 2}"

    def bounds(low: int, down_wait: int, cold_sum: float) -> tuple[Series, ...]:
        return (*_hpa_counts(steps, min=f"{low}x{steps}"),
                Series(selector(wait, {g: "llm", "autoscaler": _HPA}), f"{down_wait}x{steps}"),
                Series(selector(f"{cold}_sum", {_V: "canary"}), f"{cold_sum:g}x{steps}"),
                Series(selector(f"{cold}_count", {_V: "canary"}), f"2x{steps}"))

    return [
        Alert(name=names.ALERT_AUTOSCALER_NOT_REACTING, expr=flat, severity="warning",
              for_seconds=a.limits.leading_for,
              summary="{{ $labels.group }}: {{ $labels.autoscaler }} does not react to the queue",
              description=(f"{{{{ $labels.autoscaler }}}} wants {{{{ printf \"%.0f\" $value }}}} replicas of "
                           f"{{{{ $labels.group }}}}, below its maxReplicas, and has not changed that for {window} "
                           f"while requests queue (over {floor:g} per replica): what it scales on does not see "
                           f"the model's load ({names.AUTOSCALER_SIGNAL} says what it reads: CPU only, a metric "
                           f"the adapter no longer serves, a KEDA trigger whose query is empty)."),
              runbook="autoscaler-not-reacting",
              examples=(Example(f"{names.ALERT_AUTOSCALER_NOT_REACTING} fires on an HPA that never scales",
                                (*hpa(f"2x{steps}"), busy), at, interval, (Firing(key, 2.0),)),
                        Example(f"{names.ALERT_AUTOSCALER_NOT_REACTING} quiet on an HPA that scales up",
                                (*hpa(rises, current=2), busy), at, interval),
                        Example(f"{names.ALERT_AUTOSCALER_NOT_REACTING} quiet at the ceiling (AtCeiling's case)",
                                (*hpa(f"4x{steps}", current=4), busy), at, interval))),
        Alert(name=names.ALERT_AUTOSCALER_COLD_START, expr=risk, severity="warning",
              for_seconds=a.limits.leading_for,
              summary="{{ $labels.group }}: {{ $labels.autoscaler }} lets users wait for a cold start",
              description=("{{ $labels.autoscaler }} ({{ $labels.group }}): {{ $labels.reason }}. A floor of 0 "
                           "makes the first request after a quiet spell wait for a pod to start and load the "
                           "model; a scale-down wait ({{ printf \"%.0f\" $value }} s) shorter than the model's "
                           f"measured cold start ({cold}) gives pods back before a new one could replace "
                           "them, so a dip in traffic costs the next peak a cold start."),
              runbook="autoscaler-cold-start",
              examples=(Example(f"{names.ALERT_AUTOSCALER_COLD_START} fires on minReplicas 0",
                                bounds(0, 600, 480.0), at, interval,
                                (Firing((*key, (names.REASON, "scales_to_zero")), 0.0),)),
                        Example(f"{names.ALERT_AUTOSCALER_COLD_START} fires on a scale-down wait under the cold start",
                                bounds(1, 60, 480.0), at, interval,
                                (Firing((*key, (names.REASON, "scale_down_before_cold_start")), 60.0),)),
                        Example(f"{names.ALERT_AUTOSCALER_COLD_START} quiet with a floor and a long wait",
                                bounds(1, 600, 480.0), at, interval))),
    ]


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
