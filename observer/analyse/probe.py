"""The synthetic probe: a judge-free streamed chat request per version through the route users call.

Unlike golden replays (scored, every few minutes, to the version's own URL) the probe only asks whether the
path answers and how fast the first token comes: a gateway, ingress or router in front of the engine that
stalls or fails shows here while vLLM's own series stay green. Its codes use the sampling proxy's convention,
so the client-side SLOs read either: the HTTP status, 502 for a connection that failed or a stream that broke
before any token, 504 for no complete answer within the timeout.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import httpx
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.histogram import Hist
from observer.config.fleet import VersionSpec
from observer.config.probe import ProbeSpec
from observer.conventions import vllm
from observer.fleetview import FleetView

log = logging.getLogger("observer.probe")
CODES = ("200", *names.WATCHED_CODES)
"""Codes every probed version exports from its first probe (0 until seen): the answers and the watched failures."""


def target(spec: ProbeSpec, v: VersionSpec, model: str) -> tuple[str | None, dict[str, str]]:
    """The chat URL and headers of the probe of version `v` (None: the version has no URL to probe)."""
    fields = {"version": v.name, "role": v.role, "model": model, "group": v.group or ""}
    base = spec.url.format(**fields) if spec.url is not None else v.openai
    headers = {k: value.format(**fields) for k, value in spec.headers.items()}
    return (None if base is None else base.rstrip("/") + "/chat/completions"), headers


async def ask(http: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, object],
              timeout: float, clock: Callable[[], float] = time.perf_counter) -> tuple[str, float | None]:
    """(code, TTFT seconds) of one streamed request; TTFT only for an answer with a first token."""
    t0 = clock()
    ttft: float | None = None
    try:
        async with http.stream("POST", url, json=body, headers=headers, timeout=timeout) as r:
            if r.status_code != 200:
                return str(r.status_code), None
            async for line in r.aiter_lines():
                if ttft is None and line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                    chunk = json.loads(line[5:])
                    if isinstance(chunk, dict) and chunk.get("error"):
                        return "500", None  # vLLM reports a failure inside the stream
                    ttft = clock() - t0
    except httpx.TimeoutException:
        return "504", None
    except (httpx.HTTPError, ValueError):
        return "502", None
    return ("200", ttft) if ttft is not None else ("502", None)


@dataclass
class Probe:
    """Probes each chosen version once per run; counts codes and first-token times per version."""

    spec: ProbeSpec
    fleet: FleetView
    http: httpx.AsyncClient
    served_models: Callable[[str], Sequence[str]]  # a version's model names as its scrapes see them
    codes: Counter[tuple[str, str]] = field(default_factory=Counter)
    ttft: dict[str, Hist] = field(default_factory=dict)

    def chosen(self) -> list[VersionSpec]:
        wanted = set(self.spec.versions)
        return [v for v in self.fleet.versions() if not v.retired
                and (not wanted or v.name in wanted or v.role in wanted)]

    async def run(self) -> None:
        """One probe of every chosen version (sequential: the probe must never load the fleet)."""
        live = {v.name for v in self.fleet.versions()}
        for key in [k for k in self.codes if k[0] not in live]:  # bounded: a version gone takes its series
            del self.codes[key]
        self.ttft = {k: h for k, h in self.ttft.items() if k in live}
        for v in self.chosen():
            model = v.model or next(iter(sorted(self.served_models(v.name))), None)
            url, headers = target(self.spec, v, model or "")
            if url is None or model is None:
                continue  # nothing to call yet (no URL, or no model seen): no count, not a failure
            body = {"model": model, "messages": [{"role": "user", "content": self.spec.prompt}],
                    "max_tokens": self.spec.max_tokens, "stream": True, "temperature": 0}
            code, ttft = await ask(self.http, url, headers, body, self.spec.timeout_seconds)
            for c in CODES:
                self.codes.setdefault((v.name, c), 0)
            self.codes[(v.name, code)] += 1
            if ttft is not None:
                self.ttft.setdefault(v.name, Hist(vllm.TTFT_EDGES)).observe(ttft)
            if code != "200":
                log.warning("probe of version %s through %s: %s", v.name, url, code)


class ProbeCollector(Collector):
    """observer_probe_requests_total{version, code} and observer_probe_ttft_seconds{version}."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(names.PROBE_REQUESTS, "Synthetic probe requests through the configured "
                                       "route, by status code (502: no connection or a broken stream; 504: "
                                       "timeout).", labels=[names.VERSION, names.CODE])
        for (version, code), n in sorted(self.probe.codes.items()):
            requests.add_metric([version, code], float(n))
        ttft = HistogramMetricFamily(names.PROBE_TTFT, "Time to the first token of the synthetic probe (client "
                                     "side, through the configured route).", labels=[names.VERSION])
        for version, h in sorted(self.probe.ttft.items()):
            ttft.add_metric([version], h.buckets(), h.total)
        yield from (requests, ttft)
