"""List + watch of one Kubernetes collection (a reflector), and the API client it runs on.

The client is lightkube's (kubeconfig, exec plugins, TLS) or, in a pod, the service account, whose
token file is re-read every minute (bound tokens rotate; a token read once expires within the hour).
The watch loop is ours: lightkube's `watch` drops BOOKMARK events and reads an in-stream `ERROR`
event (how the API says `410 Gone`) as an object, so it could neither resume cheaply nor relist.

Semantics, as client-go's reflector: list (paged) → watch from the list's resourceVersion with
bookmarks → resume from the last seen resourceVersion when a watch ends or drops → relist on
`410 Gone` (in-stream or as the status), after a malformed event, and every `relist_seconds`. API
errors back off exponentially and keep the last good cache; each names what failed and how to fix it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from observer.config.discovery import KubernetesDiscovery
from observer.errors import ConfigError, ObserverError

log = logging.getLogger("observer.discovery")

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PAGE_SIZE = 500
Obj = Mapping[str, Any]


class KubeApiError(ObserverError):
    """A failed API call: `reason` is a bounded label value, the message says what to do."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class _Gone(Exception):
    """The resourceVersion we watch from is too old (410 Gone): relist."""


class TokenFileAuth(httpx.Auth):
    """Bearer token read from a file, re-read every `refresh_seconds` (kubelet rotates bound tokens)."""

    def __init__(self, path: Path, *, refresh_seconds: float = 60.0) -> None:
        self.path = path
        self.refresh_seconds = refresh_seconds
        self._token = ""
        self._read_at = -1e18

    def _current(self) -> str:
        now = time.monotonic()
        if now - self._read_at >= self.refresh_seconds:
            self._token = self.path.read_text(encoding="utf-8").strip()
            self._read_at = now
        return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._current()}"
        yield request


def api_client(*, kubeconfig: str | None, context: str | None, timeout_seconds: float = 10.0,
               service_account: Path = SERVICE_ACCOUNT) -> httpx.AsyncClient:
    """An HTTP client for the API server: in a pod the service account, else the kubeconfig."""
    from lightkube.config import client_adapter
    from lightkube.config.kubeconfig import KubeConfig

    timeout = httpx.Timeout(timeout_seconds)
    if kubeconfig is None and (service_account / "token").exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host
        return httpx.AsyncClient(base_url=f"https://{host}:{port}", timeout=timeout,
                                 verify=str(service_account / "ca.crt"),
                                 auth=TokenFileAuth(service_account / "token"))
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    config = KubeConfig.from_file(path).get(context_name=context)  # type: ignore[no-untyped-call]
    return client_adapter.AsyncClient(config, timeout=timeout)


def client_for(spec: KubernetesDiscovery) -> httpx.AsyncClient:
    """The API client of `discovery.kubernetes`; ConfigError naming the key when it cannot be set up."""
    try:
        return api_client(kubeconfig=spec.kubeconfig, context=spec.context)
    except Exception as e:  # lightkube raises its own ConfigError, OSError, KeyError for a bad kubeconfig
        raise ConfigError(f"cannot set up the Kubernetes API client: {type(e).__name__}: {e}",
                          path="discovery.kubernetes.kubeconfig") from e


def validate(spec: KubernetesDiscovery | None) -> None:
    """What `observer check-config` can know of discovery: a kubeconfig named in the file must load (with its
    context). Without one the client comes from the pod's service account or $KUBECONFIG, which belong to
    where the observer runs, not to the config: `serve` reports those."""
    if spec is None or not spec.models or spec.kubeconfig is None:
        return
    client_for(spec)  # reads the file; no connection is opened before a first request


@dataclass
class ReflectorStats:
    """Counters of one reflector (exported as observer_discovery_*)."""

    errors: Counter[str] = field(default_factory=Counter)   # reason → count
    relists: Counter[str] = field(default_factory=Counter)  # why → count
    events: Counter[str] = field(default_factory=Counter)   # ADDED/MODIFIED/DELETED/BOOKMARK
    watch_resumes: int = 0


def _describe(status: int, body: str, *, verb: str, resource: str, namespace: str) -> KubeApiError:
    try:
        detail = str(json.loads(body).get("message", ""))[:300]
    except (ValueError, AttributeError):
        detail = body[:200]
    where = f"{resource} in namespace {namespace}"
    if status == 401:
        return KubeApiError("unauthorized", f"the API server refused our credentials for {verb} {where} (expired "
                                        f"token or wrong kubeconfig): {detail}")
    if status == 403:
        return KubeApiError("forbidden", f"forbidden: the observer may not {verb} {where}; grant the verbs get, list "
                                     f"and watch on {resource} to its service account (docs/kubernetes.md, RBAC): "
                                     f"{detail}")
    if status == 404:
        hint = f" (is the CRD {resource} installed?)" if "." in resource else ""
        return KubeApiError("not_found", f"{verb} {where}: 404 not found{hint}: {detail}")
    return KubeApiError("http_error", f"{verb} {where}: HTTP {status}: {detail}")


class Reflector:
    """Keeps `objects` (name → object) equal to the collection at `path`, calling `on_change` after changes."""

    def __init__(self, client: httpx.AsyncClient, *, resource: str, path: str, namespace: str,
                 label_selector: str | None = None, watch_timeout_seconds: int = 290,
                 relist_seconds: float = 1800.0, backoff_seconds: float = 1.0, max_backoff_seconds: float = 60.0,
                 on_change: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.resource = resource
        self.path = path
        self.namespace = namespace
        self.label_selector = label_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self.relist_seconds = relist_seconds
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self.on_change = on_change
        self.clock = clock
        self.objects: dict[str, Obj] = {}
        self.synced = False
        self.last_error: str | None = None
        self.stats = ReflectorStats()

    def _params(self, **more: str | int) -> dict[str, str | int]:
        params: dict[str, str | int] = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        params.update(more)
        return params

    async def run(self) -> None:
        """List and watch until cancelled; never raises for API trouble (it is logged, counted, backed off)."""
        delay = self.backoff_seconds
        why = "start"
        while True:
            try:
                self.stats.relists[why] += 1
                rv = await self._list()
                delay = self.backoff_seconds
                listed = self.clock()
                while self.clock() - listed < self.relist_seconds:
                    try:
                        rv = await self._watch(rv)
                        delay = self.backoff_seconds
                    except KubeApiError as e:
                        if e.reason != "unreachable":
                            raise
                        # As client-go: a refused connection retries the watch from where it was.
                        self._failed(e, delay)
                        await asyncio.sleep(delay)
                        delay = min(2 * delay, self.max_backoff_seconds)
                why = "resync"
            except _Gone:
                log.info("watch of %s in %s: resourceVersion too old (410 Gone); relisting", self.resource,
                         self.namespace)
                why = "gone"
            except KubeApiError as e:
                self._failed(e, delay)
                await asyncio.sleep(delay)
                delay = min(2 * delay, self.max_backoff_seconds)
                why = "error"

    def _failed(self, e: KubeApiError, delay: float) -> None:
        self.stats.errors[e.reason] += 1
        if self.last_error != str(e):
            log.warning("kubernetes discovery: %s; retrying in %.1fs, keeping the last good state", e, delay)
        self.last_error = str(e)

    async def _list(self) -> str:
        items: dict[str, Obj] = {}
        params = self._params(limit=PAGE_SIZE)
        while True:
            data = await self._get_json(params, verb="list")
            for obj in data.get("items") or ():
                name = _name(obj)
                if name is not None:
                    items[name] = obj
            meta = data.get("metadata") or {}
            if not meta.get("continue"):
                break
            params = self._params(limit=PAGE_SIZE, **{"continue": str(meta["continue"])})
        rv = str(meta.get("resourceVersion") or "")
        self.objects = items
        self.synced = True
        self.last_error = None
        self.on_change()
        return rv

    async def _get_json(self, params: Mapping[str, str | int], *, verb: str) -> Mapping[str, Any]:
        try:
            r = await self.client.get(self.path, params=dict(params))
        except httpx.HTTPError as e:
            raise KubeApiError("unreachable", f"{verb} {self.resource} in namespace {self.namespace}: the API server "
                                          f"is unreachable: {type(e).__name__}: {e}") from e
        if r.status_code == 410:
            raise _Gone()
        if r.status_code != 200:
            raise _describe(r.status_code, r.text, verb=verb, resource=self.resource, namespace=self.namespace)
        try:
            data = r.json()
        except ValueError as e:
            raise KubeApiError("malformed", f"{verb} {self.resource}: the answer is not JSON") from e
        if not isinstance(data, dict):
            raise KubeApiError("malformed", f"{verb} {self.resource}: the answer is not a JSON object")
        return data

    async def _watch(self, rv: str) -> str:
        """One watch request from `rv`; returns the last resourceVersion seen when it ends."""
        params = self._params(watch="true", allowWatchBookmarks="true", resourceVersion=rv,
                              timeoutSeconds=self.watch_timeout_seconds)
        timeout = httpx.Timeout(10.0, read=self.watch_timeout_seconds + 30.0)
        started = False
        try:
            async with self.client.stream("GET", self.path, params=params, timeout=timeout) as r:
                if r.status_code == 410:
                    raise _Gone()
                if r.status_code != 200:
                    body = (await r.aread()).decode("utf-8", "replace")
                    raise _describe(r.status_code, body, verb="watch", resource=self.resource,
                                    namespace=self.namespace)
                started = True
                async for event in _lines(r):
                    rv = self._apply(event, rv)
        except httpx.HTTPError as e:
            if not started:
                raise KubeApiError("unreachable", f"watch {self.resource} in namespace {self.namespace}: the API "
                                              f"server is unreachable: {type(e).__name__}: {e}") from e
            # The stream broke (API server restart, load balancer idle cut): resume from what we saw.
            self.stats.errors["watch_dropped"] += 1
            log.info("watch of %s in %s dropped (%s); resuming from resourceVersion %s", self.resource,
                     self.namespace, type(e).__name__, rv)
        self.stats.watch_resumes += 1
        return rv

    def _apply(self, line: str, rv: str) -> str:
        try:
            event = json.loads(line)
            kind = event["type"]
            obj = event["object"]
            if not isinstance(obj, dict) or not isinstance(kind, str):
                raise TypeError
        except (ValueError, KeyError, TypeError) as e:
            raise KubeApiError("malformed", f"watch {self.resource}: malformed event {line[:120]!r}; relisting") from e
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Gone()
            raise KubeApiError("watch_error", f"watch {self.resource} in namespace {self.namespace}: error event "
                                          f"{code}: {str(obj.get('message', ''))[:200]}")
        self.stats.events[kind if kind in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") else "other"] += 1
        new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
        if kind == "BOOKMARK":
            return new_rv
        name = _name(obj)
        if name is None:
            raise KubeApiError("malformed", f"watch {self.resource}: an event object has no metadata.name; relisting")
        if kind == "DELETED":
            self.objects.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self.objects[name] = obj
        else:
            return new_rv
        self.on_change()
        return new_rv


async def _lines(r: httpx.Response) -> AsyncIterator[str]:
    async for line in r.aiter_lines():
        if line.strip():
            yield line


def _name(obj: Obj) -> str | None:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else None
