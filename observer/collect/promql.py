"""A PromQL client for Prometheus, Thanos and Mimir/Cortex: auth, tenant headers, retries, split ranges.

Credentials are read from files on every request (a rotated Secret is picked up). A request that times
out, or answers 429 or 5xx, is retried with exponential back-off; any other refusal is final and named
precisely (credentials, tenant, the query itself). A `success` answer that carries warnings — how Thanos
reports a partial response, and how Prometheus flags a doubtful query — is an error too: the caller turns
it into *no data, with this reason*, never into data. Range queries longer than `max_points_per_series`
steps are split into consecutive queries and joined.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from observer.config.prometheus import PrometheusClientSpec
from observer.errors import ObserverError

RETRY_STATUS = frozenset({429, 502, 503, 504})


class PromQLError(ObserverError):
    """The Prometheus-compatible API could not answer a query; the message says why and what to check."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason  # bounded: unreachable, timeout, unauthorized, tenant, refused, warnings, malformed


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise PromQLError(f"cannot read the {what} file {path}: {e.strerror}", reason="unauthorized") from e


def tls_context(spec: PrometheusClientSpec) -> ssl.SSLContext | bool:
    """Verification (and client certificate) for HTTPS; True: the system's CAs."""
    if spec.ca_file is None and spec.cert_file is None:
        return True
    ctx = ssl.create_default_context(cafile=spec.ca_file)
    if spec.cert_file is not None and spec.key_file is not None:
        ctx.load_cert_chain(spec.cert_file, spec.key_file)
    return ctx


def build_client(spec: PrometheusClientSpec) -> httpx.AsyncClient:
    """An HTTP client with the spec's TLS settings (auth and headers are added per request)."""
    return httpx.AsyncClient(verify=tls_context(spec), timeout=spec.timeout_seconds, follow_redirects=False)


class PromQLClient:
    """Instant and range queries against one base URL."""

    def __init__(self, url: str, spec: PrometheusClientSpec, *, http: httpx.AsyncClient,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.url = url.rstrip("/")
        self.spec = spec
        self.http = http
        self.sleep = sleep
        self.retried = 0

    def _auth(self) -> tuple[dict[str, str], httpx.BasicAuth | None]:
        headers = dict(self.spec.headers)
        if self.spec.bearer_token_file:
            headers["Authorization"] = f"Bearer {_read(self.spec.bearer_token_file, 'bearer token')}"
        auth = None
        if self.spec.basic_auth_username and self.spec.basic_auth_password_file:
            auth = httpx.BasicAuth(self.spec.basic_auth_username,
                                   _read(self.spec.basic_auth_password_file, "basic-auth password"))
        return headers, auth

    async def query(self, promql: str, *, at: float) -> list[dict[str, Any]]:
        """Instant query at `at`."""
        return await self._get("query", promql, {"time": f"{at:.3f}"})

    async def query_range(self, promql: str, *, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """Range query [start, end] every `step`, split into pieces of at most max_points_per_series steps."""
        limit = self.spec.max_points_per_series
        merged: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        t = start
        while t <= end + 1e-9:
            piece_end = min(end, t + (limit - 1) * step)
            for series in await self._get("query_range", promql, {"start": f"{t:.3f}", "end": f"{piece_end:.3f}",
                                                                   "step": f"{step:g}"}):
                key = tuple(sorted(series.get("metric", {}).items()))
                into = merged.setdefault(key, {"metric": series.get("metric", {}), "values": []})
                into["values"].extend(series.get("values", []))
            t = piece_end + step
        return list(merged.values())

    async def _get(self, endpoint: str, promql: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/{endpoint}"
        query = {"query": promql, **params}
        if not self.spec.partial_response:
            query["partial_response"] = "false"  # Thanos: all-or-error; Prometheus and Mimir ignore it
        delay = self.spec.backoff_seconds
        for attempt in range(self.spec.retries + 1):
            headers, auth = self._auth()
            try:
                r = await self.http.get(url, params=query, headers=headers, auth=auth or httpx.USE_CLIENT_DEFAULT,
                                        timeout=self.spec.timeout_seconds)
            except httpx.TimeoutException as e:
                failure = PromQLError(f"query to {self.url} timed out after {self.spec.timeout_seconds:g}s "
                                      f"({promql[:120]!r}); raise canary.prometheus.timeout_seconds or narrow the "
                                      "query", reason="timeout")
                cause: BaseException = e
            except httpx.HTTPError as e:
                failure = PromQLError(f"could not query Prometheus at {self.url}: {type(e).__name__}: {e}",
                                      reason="unreachable")
                cause = e
            else:
                if r.status_code not in RETRY_STATUS:
                    return self._answer(r, promql)
                failure = PromQLError(f"{self.url} answered {r.status_code} ({_detail(r)}) after "
                                      f"{attempt + 1} attempt(s)", reason="unreachable")
                cause = failure
            if attempt < self.spec.retries:
                self.retried += 1
                await self.sleep(delay)
                delay *= 2
        raise failure from cause

    def _answer(self, r: httpx.Response, promql: str) -> list[dict[str, Any]]:
        detail = _detail(r)
        if r.status_code in (401, 403):
            if "org id" in detail.lower() or "tenant" in detail.lower():
                raise PromQLError(f"{self.url} rejected the tenant ({r.status_code}: {detail}); set "
                                  "canary.prometheus.headers.X-Scope-OrgID to a tenant it serves", reason="tenant")
            raise PromQLError(f"{self.url} refused our credentials ({r.status_code}: {detail}); check "
                              "canary.prometheus.bearer_token_file / basic auth", reason="unauthorized")
        try:
            body = r.json()
        except ValueError as e:
            raise PromQLError(f"{self.url} answered {r.status_code} with a body that is not JSON "
                              f"({r.text[:80]!r}): is the URL the Prometheus API root?", reason="malformed") from e
        if r.status_code != 200 or not isinstance(body, dict) or body.get("status") != "success":
            raise PromQLError(f"{self.url} refused {promql[:120]!r}: {detail}", reason="refused")
        warnings = body.get("warnings") or []
        if warnings:
            raise PromQLError(f"{self.url} answered with warnings (partial or doubtful data, not used): "
                              f"{'; '.join(str(w) for w in warnings)[:300]}", reason="warnings")
        data = body.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list):
            raise PromQLError(f"{self.url} answered without data.result", reason="malformed")
        return result


def _detail(r: httpx.Response) -> str:
    try:
        body = r.json()
        if isinstance(body, dict) and body.get("error"):
            return str(body["error"])[:200]
    except ValueError:
        pass
    return r.text.strip()[:200] or f"HTTP {r.status_code}"
