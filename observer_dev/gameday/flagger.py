"""Flagger's canary analysis loop, emulated for the game day: a scripted stand-in for the Flagger controller (no
cluster runs here) that follows its documented loop (docs/gitbook/usage/deployment-strategies.md, v1.44) on
the Canary the observer renders (observer/render/flagger.py):

* every `interval`: the `rollback` webhooks first (a 2xx answer rolls the canary back now); then the `rollout`
  webhooks and every metric's query against its `thresholdRange` (a non-2xx answer, a value out of range, or
  no value at all is a failed check);
* `threshold` failed checks roll the canary back (phase Failed);
* a passing interval raises the canary's weight by `stepWeight` up to `maxWeight`; at `maxWeight` the
  `confirm-promotion` webhooks are asked: a 2xx answer promotes (phase Succeeded), anything else holds the
  canary at its weight (phase Waiting) and asks again the next interval.

The weights here are bookkeeping: the simulated fleet's traffic split does not follow them. The metric queries
go to the rig's real Prometheus; the webhooks, with Flagger's payload (its `checksum` one per scenario, as
Flagger's is one per canary revision), to the URLs the Canary names: the config's `canary.observer_url`, the
observer under test in the game day. In the cluster game day the Service behind that URL is emulated by
`service`, the replica that is up: the hooks go there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from observer.config import ObserverConfig
from observer.render import flagger as flagger_render

FAILED, SUCCEEDED, WAITING, PROGRESSING = "Failed", "Succeeded", "Waiting", "Progressing"


@dataclass
class FlaggerLoop:
    """One Canary's analysis, interval by interval."""

    canary: dict[str, Any]
    templates: dict[str, str]  # MetricTemplate name → query
    variables: dict[str, str]
    checksum: str = "gameday"
    service: str | None = None  # where the Canary's webhook URLs' Service routes now (scheme://host:port)
    weight: int = 0
    failed_checks: int = 0
    intervals: int = 0
    phase: str = PROGRESSING
    why: str = ""
    log: list[str] = field(default_factory=list)

    @classmethod
    def for_config(cls, config: ObserverConfig, *, canary: str, baseline: str,
                   checksum: str = "gameday") -> FlaggerLoop:
        """The loop of the rendered example Canary, for the pair (canary, baseline) at revision `checksum`."""
        c = flagger_render.canary(config)
        templates = {t["metadata"]["name"]: t["spec"]["query"] for t in flagger_render.metric_templates(config)}
        return cls(canary=c, templates=templates, variables={"canary": canary, "baseline": baseline},
                   checksum=checksum)

    @property
    def analysis(self) -> dict[str, Any]:
        out: dict[str, Any] = self.canary["spec"]["analysis"]
        return out

    def _hooks(self, kind: str) -> list[tuple[str, int, dict[str, Any]]]:
        out = []
        name, ns = self.canary["metadata"]["name"], self.canary["metadata"]["namespace"]
        for hook in self.analysis["webhooks"]:
            if hook["type"] != kind:
                continue
            payload = {"name": name, "namespace": ns, "phase": self.phase, "checksum": self.checksum,
                       "metadata": {**hook.get("metadata", {}), **self.variables}}
            url = hook["url"]
            if self.service is not None:
                url = self.service.rstrip("/") + "/" + url.split("://", 1)[-1].split("/", 1)[1]
            try:
                r = httpx.post(url, json=payload, timeout=15)
                body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                out.append((hook["name"], r.status_code, body))
            except httpx.HTTPError as e:
                out.append((hook["name"], 0, {"reason": str(e)}))
        return out

    def _metric(self, m: dict[str, Any], prom_url: str) -> tuple[bool, float | None]:
        query = self.templates[m["templateRef"]["name"]]
        for k, v in {**m.get("templateVariables", {}), **self.variables}.items():
            query = query.replace("{{ variables." + k + " }}", v)
        r = httpx.get(f"{prom_url}/api/v1/query", params={"query": query}, timeout=10).json()
        result = r.get("data", {}).get("result", []) if r.get("status") == "success" else []
        if not result:
            return False, None  # Flagger: "no values found", a failed check
        value = float(result[0]["value"][1])
        rng = m["thresholdRange"]
        ok = ("min" not in rng or value >= rng["min"]) and ("max" not in rng or value <= rng["max"])
        return ok, value

    def step(self, prom_url: str) -> str:
        """One interval; the phase after it."""
        if self.phase in (FAILED, SUCCEEDED):
            return self.phase
        self.intervals += 1
        for name, code, body in self._hooks("rollback"):
            if 200 <= code < 300:
                return self._end(FAILED, f"rollback webhook {name}: {body.get('reason', '')}")
        failed = [f"{name} {code}" for name, code, _ in self._hooks("rollout")
                  if not 200 <= code < 300]
        for m in self.analysis["metrics"]:
            ok, value = self._metric(m, prom_url)
            if not ok:
                failed.append(f"{m['name']}={value}")
        if failed:
            self.failed_checks += 1
            self.log.append(f"{self.intervals}: failed {', '.join(failed)}")
            if self.failed_checks >= self.analysis["threshold"]:
                return self._end(FAILED, f"{self.failed_checks} failed checks: {', '.join(failed)}")
            return self.phase
        if self.weight < self.analysis["maxWeight"]:
            self.weight = min(self.weight + self.analysis["stepWeight"], self.analysis["maxWeight"])
            self.log.append(f"{self.intervals}: weight {self.weight}")
            return self.phase
        answers = self._hooks("confirm-promotion")
        if all(200 <= code < 300 for _, code, _ in answers):
            return self._end(SUCCEEDED, f"promoted at {self.weight} %")
        self.phase = WAITING
        self.why = "; ".join(f"{name} {code}: {body.get('reason', '')}" for name, code, body in answers)
        self.log.append(f"{self.intervals}: held at {self.weight} %")
        return self.phase

    def _end(self, phase: str, why: str) -> str:
        self.phase, self.why = phase, why
        self.log.append(f"{self.intervals}: {phase} ({why})")
        return phase

    def run(self, prom_url: str, *, intervals: int) -> str:
        """Up to `intervals` intervals, or until Failed or Succeeded; a summary line."""
        for _ in range(intervals):
            if self.step(prom_url) in (FAILED, SUCCEEDED):
                break
        return f"{self.phase} after {self.intervals} ({self.why[:80]})" if self.why else \
            f"{self.phase} at {self.weight} % after {self.intervals}"

