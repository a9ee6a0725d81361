"""The game day in the cluster topology: the scenarios of the single-process game day, played through what a
cluster runs, and each must end in the same verdict class.

- **Versions discovered**, no `fleet.versions`: the scripted Kubernetes API (observer_dev.kubeapi, a stand-in
  implementing list/watch) serves an Argo Rollout at its 20% step and the simulator's pods, labelled with
  their revision's pod-template hash. The hashes are `stable` and `canary`, so the scenario table and the Argo
  templates' arguments read as in the single-process game day; roles, expected weights, metrics URLs, OpenAI
  URLs and the DCGM join all come from the API.
- **Two `observer serve` replicas** (child processes) sharing one **PostgreSQL** store (Debian's package, a
  fresh database per scenario), scraped by a real **Prometheus**; the judge reads Prometheus
  (`canary.source: prometheus`, `replica_labels: [instance]`).
- **Flagger's loop** (observer_dev.gameday.flagger) beside every verdict scenario's looks, its webhooks
  answered by the surviving replica and its MetricTemplates read from Prometheus: it must end where the
  single-process game day's does (promoted on pass, rolled back on fail, held otherwise). A decided scenario
  plays on until Flagger's loop has ended too: the survivor's window started at its first webhook, after
  the kill, later than the gate's.
- **Faults in every scenario**: the replica the gate asks is SIGKILLed after the first look and the gate asks
  the other one (as a Service would); two looks later the survivor is partitioned from PostgreSQL (a TCP relay
  that is cut) for `PARTITION_LOOKS` looks, then reconnected. In `restart` the survivor is then restarted too.

Each look asks the verdict for the window since the scenario started (the gate's `since`), as Prometheus
keeps the series of the scenarios before.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from observer.config import parse_config
from observer_dev.gameday import FLAGGER_EXPECT, FLAGGER_INTERVALS
from observer_dev.gameday.flagger import FAILED, SUCCEEDED, FlaggerLoop
from observer_dev.gameday.looks import FLAGGER_END, alert_exprs, alert_problems, alert_round, decided
from observer_dev.gameday.rig import GOLDEN_SETS, config_yaml, observer_config, sim_profile
from observer_dev.gameday.scenarios import (
    SCENARIOS,
    STABLE_PODS,
    Catalogue,
    Expect,
    GamedayError,
    Plan,
    Row,
    Scenario,
)
from observer_dev.gameday.traffic import prepare_drift, round_traffic
from observer_dev.kubeapi import ScriptedKubeApi, pending, pod, rollout
from observer_dev.pgserver import available, run_postgres
from observer_dev.promserver import free_port, run_prometheus
from observer_dev.relay import relay
from observer_dev.sim.fleet import run_fleet

# The scenarios the cluster rig can play (not yet: goodput's ingest timings, the proxy of `shed`, the
# fingerprinted ingest of `template-rollback`, the HTML page of `html`). `drifted` embeds with the bundled
# model on both replicas: the full form only, as in the single-process game day. The alert scenarios evaluate
# the generated alert expressions against the Prometheus that scrapes both replicas.
# In SCENARIOS' order, the order they are played in.
CLUSTER_SCENARIOS = ("healthy", "slow", "errors", "errors-5xx", "worse", "drifted", "idle", "unschedulable",
                     "restart", "costly", "decode", "slow-replica", "gpu-ecc")
CLUSTER = Catalogue("cluster", tuple(s for s in SCENARIOS if s.name in CLUSTER_SCENARIOS),
                    short=frozenset(s.name for s in SCENARIOS if s.name in CLUSTER_SCENARIOS and s.needs != "drift"))
KILL_AFTER_LOOKS = 1
PARTITION_AFTER_LOOKS = 3
PARTITION_LOOKS = 3
PODS = "llm-serving/pods"
DCGM_PODS = "gpu-operator/pods"
ROLLOUTS = "llm-serving/rollouts.argoproj.io"
STEPS: list[dict[str, Any]] = [{"setWeight": 20}, {"pause": {}}]
ROUTED_AS = {"stable": "support-lora-v1", "canary": "support-lora-v2"}
"""The target model names the rig's simulated endpoint picker reports each simulated version's requests under."""


@dataclass
class Replica:
    """One `observer serve` child process."""

    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown, no lock released by the process (the database notices the dead connection)."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self, lines: int = 8) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ClusterRow(Row):
    """A game-day row plus what the faults did."""

    faults: list[str] = field(default_factory=list)


def _pod(name: str, version: str, port: int) -> dict[str, Any]:
    return pod(name, labels={"app": "llm", "rollouts-pod-template-hash": version}, port=port)


def publish(api: Any, ports: Mapping[str, int]) -> None:
    """The Rollout at its 20% step and its pods (the simulator's), and the node's dcgm-exporter pod."""
    api.put(ROLLOUTS, rollout("llm", steps=STEPS, stable="stable", current="canary", step=0))
    for i in range(STABLE_PODS):
        api.put(PODS, _pod(f"sim-stable-{i}", "stable", ports[f"stable{i}"]))
    api.put(PODS, _pod("sim-canary-0", "canary", ports["canary0"]))
    api.put(DCGM_PODS, pod("dcgm-exporter-node-a", labels={"app": "nvidia-dcgm-exporter"}, port=ports["dcgm"],
                           namespace="gpu-operator", port_name="metrics"))


def cluster_config(single: Mapping[str, Any], *, kubeconfig: Path, store_url: str, port: int, prom_url: str,
                   gate_url: str) -> dict[str, Any]:
    """The single-process game day's config for a scenario, turned into one replica's cluster config."""
    data: dict[str, Any] = json.loads(json.dumps(single))
    data.pop("fleet", None)
    data["discovery"] = {"kubernetes": {
        "namespace": "llm-serving", "kubeconfig": str(kubeconfig), "remove_after_seconds": 5.0,
        "backoff_seconds": 0.1, "max_backoff_seconds": 0.5, "watch_timeout_seconds": 60,
        "models": [{"name": "llm", "selector": {"app": "llm"}, "rollout": "llm", "port": "http"}],
        "dcgm": {"namespace": "gpu-operator", "selector": {"app": "nvidia-dcgm-exporter"}, "port": "metrics"}}}
    data["server"] = {**data.get("server", {}), "port": port}
    sampling = data.get("sampling", {})
    data["sampling"] = {**sampling, "enabled": True,
                        "store": {**{k: v for k, v in sampling.get("store", {}).items() if k != "path"},
                                  "url": store_url, "connect_timeout_seconds": 2.0}}
    data["canary"] = {**data["canary"], "source": "prometheus", "prometheus_url": prom_url,
                      "prometheus": {"replica_labels": ["instance"], "timeout_seconds": 5.0, "retries": 0},
                      "observer_url": gate_url}
    return data


def replica_config_of(data: Mapping[str, Any]) -> Any:
    """The parsed config of a replica (an ObserverConfig)."""
    return parse_config(yaml.safe_dump(dict(data)), source="gameday-cluster.yaml")


def spawn(config: Mapping[str, Any], name: str, workdir: Path) -> Replica:
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(config)))
    log = workdir / f"{name}.log"
    with log.open("wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "observer", "serve", "--config", str(path),
                                 "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=f.fileno(),
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return Replica(name, f"http://127.0.0.1:{config['server']['port']}", proc, log)


def _wait_ready(r: Replica, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not r.alive():
            raise GamedayError(f"observer replica {r.name} exited: {r.log_tail()}")
        try:
            if httpx.get(r.url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise GamedayError(f"observer replica {r.name} not ready after {timeout:.0f}s: {r.log_tail()}")


def verdict(url: str, since: float) -> dict[str, Any]:
    r = httpx.get(f"{url}/api/v1/canary/verdict", params={"canary": "canary", "baseline": "stable",
                                                           "since": since}, timeout=15)
    if r.status_code != 200:
        raise GamedayError(f"verdict endpoint of {url} answered HTTP {r.status_code}: {r.text[:200]}")
    out: dict[str, Any] = r.json()
    return out


def run_cluster_scenario(s: Scenario, *, fleet: Any, ports: Mapping[str, int], plan: Plan, prom_url: str,
                         pg: Any, kubeconfig: Path, single: Mapping[str, Any], workdir: Path,
                         api: Any = None) -> ClusterRow:
    """One scenario on two fresh replicas and a fresh database, with the kill and the partition."""
    t0 = time.monotonic()
    row = ClusterRow(scenario=s.name, title=s.title, expected=s.expect)
    users = np.random.default_rng(sum(map(ord, s.name)))  # no cluster row gives feedback yet; the same seed if one does
    fleet.set_profile("stable", **sim_profile(s.stable, plan, plan.stable_rps))
    fleet.set_profile("canary", **sim_profile(s.canary, plan, plan.canary_rps))
    db = pg.database()
    trail = workdir / f"{s.name}-looks.jsonl"
    host_port = db.split("@", 1)[1].split("/", 1)[0]
    with ExitStack() as stack:
        for i in range(s.pending_pods):  # more canary pods than the cluster has GPUs for
            name = f"sim-canary-{i + 1}"
            api.put(PODS, pending(name, labels={"app": "llm", "rollouts-pod-template-hash": "canary"},
                                  port=ports["canary0"]))
            stack.callback(api.delete, PODS, name)
        link = stack.enter_context(relay("127.0.0.1", int(host_port.rsplit(":", 1)[1])))
        b_url = db.replace(host_port, f"127.0.0.1:{link.port}")
        gate = f"http://127.0.0.1:{ports['observer']}"
        a = spawn(cluster_config(single, kubeconfig=kubeconfig, store_url=db, port=ports["observer"],
                                 prom_url=prom_url, gate_url=gate), "replica-a", workdir)
        b_config = cluster_config(single, kubeconfig=kubeconfig, store_url=b_url, port=ports["observer_b"],
                                  prom_url=prom_url, gate_url=gate)
        b = spawn(b_config, "replica-b", workdir)
        stack.callback(b.stop)
        stack.callback(a.stop)
        _wait_ready(a)
        _wait_ready(b)
        since = time.time()
        # The same pair through Flagger's loop beside the looks: its webhooks reach the observer behind the
        # Service (the replica the gate asks: the survivor once one is killed) and its MetricTemplates read the
        # Prometheus that scrapes both replicas.
        loop = FlaggerLoop.for_config(replica_config_of(b_config), canary="canary", baseline="stable",
                                      checksum=s.name) if s.expect in FLAGGER_EXPECT else None
        if loop is not None:
            loop.service = a.url
            loop.step(prom_url)
        if s.needs == "quality":  # golden replays are shared jobs: wait for the first results of both arms
            deadline = time.monotonic() + 90
            while verdict(a.url, since)["metrics"].get("golden", {}).get("result") == "nodata":
                if time.monotonic() > deadline:
                    raise GamedayError("no golden-set results for both versions within 90 s")
                for _ in range(int(plan.round_seconds)):
                    fleet.advance("stable", 1.0)
                    fleet.advance("canary", 1.0)
                time.sleep(1.0)
        replica_config = replica_config_of(b_config)
        if s.needs == "drift":  # the baseline pinned from stable's mirrored samples in the shared store
            prepare_drift(fleet, a.url, replica_config)
        exprs = alert_exprs(replica_config) if s.alerts else {}
        asked = a
        body: dict[str, Any] = {}
        partitioned_at: int | None = None
        faults_over = PARTITION_AFTER_LOOKS + PARTITION_LOOKS + (s.restart_after or 0) + (
            2 if s.restart_after is not None else 0)
        for look in range(max(plan.max_rounds, s.min_rounds)):
            if s.change_after is not None and look == s.change_after and s.change:
                fleet.set_profile(s.change_version, replica=s.replica, **dict(s.change))
            if look == KILL_AFTER_LOOKS:
                a.kill()
                asked = b
                row.faults.append(f"look {look}: replica-a SIGKILLed; the gate asks replica-b")
            if look == PARTITION_AFTER_LOOKS:
                link.cut()
                partitioned_at = look
                row.faults.append(f"look {look}: replica-b cut from PostgreSQL")
            if partitioned_at is not None and look == partitioned_at + PARTITION_LOOKS:
                link.restore()
                partitioned_at = None
                row.faults.append(f"look {look}: reconnected")
            if s.restart_after is not None and look == PARTITION_AFTER_LOOKS + PARTITION_LOOKS + s.restart_after:
                b.stop()  # after the faults: the survivor restarts, as a rolling update would restart it
                b = spawn(b_config, "replica-b-restarted", workdir)
                stack.callback(b.stop)
                _wait_ready(b)
                asked = b
                row.faults.append(f"look {look}: replica-b restarted")
                row.verdicts.append(str(verdict(b.url, since)["verdict"]))  # before any new data: never pass
            for _ in range(int(plan.round_seconds)):
                fleet.advance("stable", 1.0)
                fleet.advance("canary", 1.0)
            round_traffic(s, fleet, asked.url, ports, plan, look, users=users, answered=set(),
                          mirror_cut=partitioned_at is not None, faults=row.faults)
            if s.expect is Expect.ALERTS:  # every one must fire after the change, none before; faults all played
                if alert_round(s, row, look, exprs, prom_url) and look > faults_over:
                    break
                continue
            body = verdict(asked.url, since)
            row.verdicts.append(str(body["verdict"]))
            if loop is not None:
                loop.service = asked.url
                loop.step(prom_url)
            with trail.open("a") as f:  # every look's whole answer, for the one who reads a mismatch
                f.write(json.dumps({"look": look, "replica": asked.name, "body": body}) + "\n")
            done = look > faults_over and decided(s.expect, row.verdicts[-1], body)
            if s.change_after is not None and look <= s.change_after + 2:
                done = False
            # Traffic flows while Flagger analyses: its window on the replica asked after the kill started
            # looks later than the gate's `since`, so a decided look does not end the scenario until Flagger's
            # loop has ended too (its intervals after the last look read frozen data).
            if done and loop is not None and loop.phase not in (FAILED, SUCCEEDED):
                done = False
            if done or (s.expect in (Expect.NODATA, Expect.NOT_PASS, Expect.INCONCLUSIVE)
                        and look + 1 >= plan.max_rounds // 2 and look > faults_over):
                break
        if partitioned_at is not None:
            link.restore()
        if loop is not None:  # Flagger's intervals after the last look, to its end or FLAGGER_INTERVALS more
            loop.service = asked.url
            row.flagger = loop.run(prom_url, intervals=FLAGGER_INTERVALS)
        ready = httpx.get(b.url + "/readyz", timeout=5).status_code == 200 if b.alive() else False
        row.faults.append("replica-b ready after the partition" if ready else "replica-b NOT ready after the partition")
        if s.expect is Expect.ALERTS:
            problems = alert_problems(s, row, prom_url)
            if not ready:
                problems.append("replica-b did not recover from the partition")
            row.ok = not problems
            row.detail = "; ".join(problems or [*row.faults, *(f"{k} {v}" for k, v in row.prometheus.items())])
            row.seconds = time.monotonic() - t0
            return row
        final = row.verdicts[-1] if row.verdicts else "none"
        # A drifted canary is flagged, not gated: drift is advisory by default, so any verdict class goes.
        want = {"pass": ("pass",), "fail": ("fail",), "nodata": ("nodata", "inconclusive"),
                "not-pass": ("fail", "nodata", "inconclusive"),
                "drift": ("pass", "fail", "nodata", "inconclusive")}.get(s.expect, (s.expect,))
        problems = [] if final in want else [f"verdict {final}, expected {s.expect}: {body.get('reason', '')}"]
        if s.reason and s.reason not in str(body.get("reason", "")):
            problems.append(f"reason {str(body.get('reason', ''))[:160]!r} does not name {s.reason!r}")
        if "pass" in row.verdicts and s.expect not in (Expect.PASS, Expect.DRIFT):
            problems.append("a pass on the way")
        drift = [body.get("metrics", {}).get(n, {}).get("result") for n in ("drift_prompts", "drift_outputs")]
        if s.expect is Expect.DRIFT and "fail" not in drift:
            problems.append(f"drift not flagged (prompts {drift[0]}, outputs {drift[1]})")
        if not ready:
            problems.append("replica-b did not recover from the partition")
        want_flagger = FLAGGER_END.get(s.expect)
        if want_flagger and not row.flagger.startswith(want_flagger):
            problems.append(f"Flagger's loop ended {row.flagger or 'unplayed'}, expected {want_flagger}")
        if row.flagger.startswith("Succeeded") and s.expect is not Expect.PASS:
            problems.append(f"Flagger promoted a canary expected {s.expect}")
        cost = body.get("metrics", {}).get("cost_per_token", {})
        if s.costly and cost.get("result") != "fail":
            problems.append(f"cost_per_token {cost.get('result')} at {cost.get('ratio')}×, expected fail")
        if not s.costly and s.expect in (Expect.PASS, Expect.FAIL) and cost.get("result") == "fail":
            problems.append(f"cost_per_token failed at {cost.get('ratio')}× on a canary that costs the same")
        row.ok = not problems
        row.detail = "; ".join([*problems, f"every look's answer: {trail}"] if problems else row.faults)
    row.seconds = time.monotonic() - t0
    return row


@dataclass
class ClusterRig:
    """What every cluster scenario runs against: the simulator, PostgreSQL, the scripted API, Prometheus; each
    scenario starts two observer replicas of its own on a fresh database."""

    fleet: Any
    pg: Any
    api: Any
    prom_url: str
    ports: dict[str, int]
    plan: Plan
    kubeconfig: Path
    work: Path

    def play(self, s: Scenario) -> ClusterRow:
        """Run `s` on two fresh replicas, with the kill and the partition."""
        single = yaml.safe_load(config_yaml(self.ports, self.plan, s, self.work))
        return run_cluster_scenario(s, fleet=self.fleet, ports=self.ports, plan=self.plan, prom_url=self.prom_url,
                                    pg=self.pg, kubeconfig=self.kubeconfig, single=single, workdir=self.work,
                                    api=self.api)

    def could_not_run(self, s: Scenario, reason: str) -> ClusterRow:
        """The row of a scenario the rig could not play."""
        return ClusterRow(scenario=s.name, title=s.title, expected=s.expect, ok=False, detail=reason)


@contextmanager
def cluster_rig(plan: Plan, *, seed: int) -> Iterator[ClusterRig]:
    """Start the rig (GamedayError when PostgreSQL is missing); the Argo Rollout and its pods are published."""
    if not available():
        raise GamedayError("the cluster game day needs PostgreSQL (Debian package postgresql): run `make setup`")
    ports = {**{f"stable{i}": free_port() for i in range(STABLE_PODS)}, "canary0": free_port(),
             "dcgm": free_port(), "observer": free_port(), "observer_b": free_port(), "proxy": free_port(),
             "router": free_port()}
    base = observer_config(ports, plan, SCENARIOS[0])
    # The rig's endpoint picker routes each simulated version under an adapter's name (the adapter scenario's
    # targets); no Argo scenario reads it (their discovered versions have no router).
    base = base.model_copy(update={"fleet": base.fleet.model_copy(update={"versions": [
        v.model_copy(update={"router": v.router.model_copy(update={"model": ROUTED_AS[v.name]})})
        if v.router is not None else v for v in base.fleet.versions]})})
    api = ScriptedKubeApi()
    with ExitStack() as stack:
        fleet = stack.enter_context(run_fleet(base, {"stable": sim_profile({}, plan, plan.stable_rps),
                                                     "canary": sim_profile({}, plan, plan.canary_rps)},
                                              seed=seed, answer_dir=GOLDEN_SETS))
        pg = stack.enter_context(run_postgres())
        stack.enter_context(api.running())
        prom = stack.enter_context(run_prometheus([f"127.0.0.1:{ports['observer']}",
                                                   f"127.0.0.1:{ports['observer_b']}"], scrape_interval="1s"))
        ports["prometheus"] = int(prom.url.rsplit(":", 1)[1])
        work = Path(tempfile.mkdtemp(prefix="observer-gameday-cluster-"))
        stack.callback(shutil.rmtree, work, ignore_errors=True)
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
        publish(api, ports)
        yield ClusterRig(fleet=fleet, pg=pg, api=api, prom_url=prom.url, ports=ports, plan=plan,
                         kubeconfig=kubeconfig, work=work)


def print_cluster(rows: Sequence[ClusterRow], console: Console, *, json_line: bool = False) -> bool:
    """Print the table (and the JSON line); True when every scenario matched."""
    t = Table(title="observer game day — cluster topology", caption="OK" if all(r.ok for r in rows) else "MISMATCH")
    for col in ("scenario", "expected", "verdicts (per look)", "Flagger", "ok", "faults / detail"):
        t.add_column(col)
    for r in rows:
        seq = " ".join(v[0] for v in r.verdicts)
        t.add_row(f"{r.scenario}: {r.title}", r.expected, f"{seq} → {r.verdicts[-1] if r.verdicts else '-'}",
                  r.flagger or "-", "[green]yes[/]" if r.ok else "[red]NO[/]", f"{r.detail} ({r.seconds:.0f}s)")
    console.print(t)
    if json_line:
        print(json.dumps({"scenarios_total": len(rows), "scenarios_same_verdict": sum(r.ok for r in rows),
                          "scenarios": {r.scenario: r.verdicts[-1] if r.verdicts else None for r in rows}}))
    return all(r.ok for r in rows)
