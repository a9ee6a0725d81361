"""A SCRIPTED STAND-IN for the Kubernetes API server, on 127.0.0.1 — not Kubernetes.

No real API server can run here, so this implements the part of its protocol discovery relies on, with
the real semantics: namespaced collections (`/api/v1/namespaces/NS/pods`, `/apis/GROUP/VERSION/
namespaces/NS/PLURAL`), equality label selectors, one global resourceVersion, paged lists
(`limit`/`continue`), and watches (`watch=true`) as chunked JSON lines from a resourceVersion, with
BOOKMARK events when `allowWatchBookmarks`, `timeoutSeconds`, ADDED/DELETED when an object moves into
or out of a watcher's selector, and an in-stream `ERROR` Status 410 when the resourceVersion is older
than the compacted history; and a JSON merge patch of one object (`PATCH .../PLURAL/NAME`,
`application/merge-patch+json`), refused with 409 Conflict when it carries a `metadata.resourceVersion` that is
not the object's. Faults are scripted: drop every open watch mid-stream, compact history, answer 403 for a
collection's reads or its patches, refuse connections. Mutations come from the test (`put`, `delete`) and
from patches.

It does not do admission, field selectors, set-based selectors, server-side apply, other patch types or
authentication.
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from observer_dev.promserver import free_port

Obj = dict[str, Any]


@dataclass
class _Event:
    rv: int
    collection: str
    type: str
    obj: Obj
    old: Obj | None


def _matches(obj: Obj | None, selector: Mapping[str, str]) -> bool:
    if obj is None:
        return False
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _parse_selector(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if part.strip():
            k, _, v = part.partition("=")
            out[k.strip()] = v.strip().lstrip("=")
    return out


def _merge(target: Obj, patch: Mapping[str, Any]) -> Obj:
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)
    return target


def _status(code: int, reason: str, message: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


@dataclass
class ScriptedKubeApi:
    """State and faults of the stand-in; `url` once started."""

    port: int = field(default_factory=free_port)
    bookmark_seconds: float = 0.5
    objects: dict[tuple[str, str], Obj] = field(default_factory=dict)  # (collection, name) → object
    events: list[_Event] = field(default_factory=list)
    rv: int = 100
    compacted: int = 0
    forbidden: set[str] = field(default_factory=set)
    patch_forbidden: set[str] = field(default_factory=set)  # collections whose objects may not be patched
    patches: list[tuple[str, str, Obj]] = field(default_factory=list)  # (collection, name, body) of every PATCH
    refusing: bool = False
    requests: list[tuple[str, str]] = field(default_factory=list)  # (collection, "list"|"watch")
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _drop: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self) -> Obj:
        """A kubeconfig for this server (no auth: the stand-in does not check credentials)."""
        return {"apiVersion": "v1", "kind": "Config", "current-context": "scripted",
                "clusters": [{"name": "scripted", "cluster": {"server": self.url}}],
                "contexts": [{"name": "scripted", "context": {"cluster": "scripted", "user": "scripted"}}],
                "users": [{"name": "scripted", "user": {}}]}

    # --- script ------------------------------------------------------------------------------------

    def put(self, collection: str, obj: Obj) -> None:
        """Create or replace an object (ADDED or MODIFIED), bumping the resourceVersion."""
        with self._cond:
            self.rv += 1
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            key = (collection, obj["metadata"]["name"])
            old = self.objects.get(key)
            self.objects[key] = obj
            self.events.append(_Event(self.rv, collection, "MODIFIED" if old else "ADDED", obj, old))
            self._cond.notify_all()

    def get(self, collection: str, name: str) -> Obj:
        with self._cond:
            return copy.deepcopy(self.objects[(collection, name)])

    def delete(self, collection: str, name: str) -> None:
        with self._cond:
            old = self.objects.pop((collection, name), None)
            if old is None:
                return
            self.rv += 1
            obj = copy.deepcopy(old)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.events.append(_Event(self.rv, collection, "DELETED", obj, old))
            self._cond.notify_all()

    def drop_watches(self) -> None:
        """Cut every open watch mid-stream (no final chunk), as an API server restart does."""
        with self._cond:
            self._drop += 1
            self._cond.notify_all()

    def compact(self) -> None:
        """Forget history: a watch from an older resourceVersion gets 410 Gone; open watches too."""
        with self._cond:
            self.compacted = self.rv
            self.events.clear()
            self._drop += 1
            self._cond.notify_all()

    def count(self, collection: str, verb: str) -> int:
        return sum(1 for c, v in self.requests if c == collection and v == verb)

    # --- serving -----------------------------------------------------------------------------------

    def handle_patch(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path).path.strip("/").split("/")
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        if h.headers.get("Content-Type") != "application/merge-patch+json":
            return self._json(h, 415, _status(415, "UnsupportedMediaType", "the stand-in takes merge patches only"))
        route = self._route("/".join(parts[:-1])) if len(parts) in (6, 7) else None
        if route is None:
            return self._json(h, 404, _status(404, "NotFound", f"the server could not find {h.path}"))
        namespace, plural = route
        collection, name = f"{namespace}/{plural}", parts[-1]
        self.patches.append((collection, name, body))
        if collection in self.patch_forbidden:
            return self._json(h, 403, _status(403, "Forbidden", f'{plural} "{name}" is forbidden: User "system:'
                                                                f'serviceaccount:obs:observer" cannot patch '
                                                                f'resource "{plural}" in the namespace "{namespace}"'))
        with self._cond:
            old = self.objects.get((collection, name))
            if old is None:
                return self._json(h, 404, _status(404, "NotFound", f'{plural} "{name}" not found'))
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != old["metadata"].get("resourceVersion"):
                return self._json(h, 409, _status(409, "Conflict", f'Operation cannot be fulfilled on {plural} '
                                                                   f'"{name}": the object has been modified'))
            obj = _merge(copy.deepcopy(old), body)
        self.put(collection, obj)
        self._json(h, 200, self.get(collection, name))

    def _route(self, path: str) -> tuple[str, str] | None:
        parts = path.strip("/").split("/")
        # api/v1/namespaces/NS/PLURAL or apis/G/V/namespaces/NS/PLURAL
        if len(parts) == 5 and parts[:2] == ["api", "v1"] and parts[2] == "namespaces":
            return parts[3], parts[4]
        if len(parts) == 6 and parts[0] == "apis" and parts[3] == "namespaces":
            return parts[4], parts[5] if parts[1] in ("", "core") else f"{parts[5]}.{parts[1]}"
        return None

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        if self.refusing:
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        u = urlsplit(h.path)
        q = {k: v[-1] for k, v in parse_qs(u.query).items()}
        route = self._route(u.path)
        if route is None:
            return self._json(h, 404, _status(404, "NotFound", f"the server could not find {u.path}"))
        namespace, collection = route
        collection = f"{namespace}/{collection}"
        watch = q.get("watch") in ("true", "1")
        self.requests.append((collection, "watch" if watch else "list"))
        if collection in self.forbidden:
            plural = collection.split("/", 1)[1]
            return self._json(h, 403, _status(403, "Forbidden", f'{plural} is forbidden: User "system:'
                                                                f'serviceaccount:obs:observer" cannot '
                                                                f'{"watch" if watch else "list"} resource '
                                                                f'"{plural}" in the namespace "{namespace}"'))
        selector = _parse_selector(q.get("labelSelector"))
        if watch:
            return self._watch(h, collection, selector, q)
        with self._cond:
            items = sorted((o for (c, _), o in self.objects.items() if c == collection and _matches(o, selector)),
                           key=lambda o: o["metadata"]["name"])
            rv = self.rv
        start = int(q.get("continue") or 0)
        limit = int(q.get("limit") or 0) or len(items) or 1
        page = items[start:start + limit]
        meta: Obj = {"resourceVersion": str(rv)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        self._json(h, 200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page})

    def _json(self, h: BaseHTTPRequestHandler, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _watch(self, h: BaseHTTPRequestHandler, collection: str, selector: Mapping[str, str],
               q: Mapping[str, str]) -> None:
        since = int(q.get("resourceVersion") or 0)
        bookmarks = q.get("allowWatchBookmarks") == "true"
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 1800)
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def send(event: Obj) -> None:
            line = (json.dumps(event) + "\n").encode()
            h.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            h.wfile.flush()

        with self._cond:
            drops = self._drop
            if since and since < self.compacted:
                send({"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since} "
                                                                         f"({self.compacted})")})
                h.wfile.write(b"0\r\n\r\n")
                return
        last_bookmark = time.monotonic()
        try:
            while True:
                with self._cond:
                    if self._drop == drops and not any(e.rv > since and e.collection == collection
                                                       for e in self.events):
                        self._cond.wait(timeout=0.1)
                    pending = [e for e in self.events if e.rv > since and e.collection == collection]
                    if self._drop != drops:
                        h.close_connection = True
                        h.connection.shutdown(socket.SHUT_RDWR)  # mid-stream, no terminating chunk
                        return
                    current = self.rv
                for e in pending:
                    since = e.rv
                    now_in, was_in = _matches(e.obj, selector), _matches(e.old, selector)
                    kind = e.type
                    if kind != "DELETED" and now_in and not was_in:
                        kind = "ADDED"
                    elif kind == "MODIFIED" and was_in and not now_in:
                        kind = "DELETED"
                    elif not (now_in or (kind == "DELETED" and was_in)):
                        continue
                    send({"type": kind, "object": e.obj})
                now = time.monotonic()
                if bookmarks and now - last_bookmark >= self.bookmark_seconds:
                    since = max(since, current)
                    send({"type": "BOOKMARK", "object": {"kind": collection.split("/")[1],
                                                         "metadata": {"resourceVersion": str(since)}}})
                    last_bookmark = now
                if now >= deadline:
                    h.wfile.write(b"0\r\n\r\n")
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            return

    @contextmanager
    def running(self) -> Iterator[ScriptedKubeApi]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                api.handle(self)

            def do_PATCH(self) -> None:
                api.handle_patch(self)

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.drop_watches()
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


# --- objects -----------------------------------------------------------------------------------------


def pod(name: str, *, labels: Mapping[str, str], port: int, ready: bool = True, ip: str | None = "127.0.0.1",
        node: str = "node-a", namespace: str = "llm-serving", port_name: str = "http",
        start_time: str | None = None, image: str = "vllm/vllm-openai:v0.33.0") -> Obj:
    """A Pod with one container port; Ready (Running, condition True) unless `ready=False`; `start_time`
    is its status.startTime (RFC 3339, as the API server writes it)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"nodeName": node, "containers": [{"name": "vllm", "image": image, "ports": [
                {"name": port_name, "containerPort": port}]}]},
            "status": {"phase": "Running", **({"podIP": ip} if ip else {}),
                       **({"startTime": start_time} if start_time else {}),
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pending(name: str, *, labels: Mapping[str, str], port: int, namespace: str = "llm-serving",
            message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are "
                           "available: 3 No preemption victims found for incoming pod.") -> Obj:
    """A Pod the scheduler cannot place: Pending, no node, no IP, PodScheduled False (Unschedulable) with the
    scheduler's `message`, as the API server shows a GPU pod on a full cluster."""
    obj = pod(name, labels=labels, port=port, ip=None, namespace=namespace)
    obj["spec"].pop("nodeName", None)
    obj["status"] = {"phase": "Pending", "qosClass": "Burstable", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
         "lastTransitionTime": "2026-12-05T10:00:00Z"}]}
    return obj


def rollout(name: str, *, steps: list[Obj], stable: str, current: str, step: int | None,
            aborted: bool = False, replicas: int = 20, namespace: str = "llm-serving") -> Obj:
    """An Argo Rollout (canary strategy) with the status fields discovery reads."""
    status: Obj = {"stableRS": stable, "currentPodHash": current, "abort": aborted}
    if step is not None:
        status["currentStepIndex"] = step
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "strategy": {"canary": {"steps": steps}}}, "status": status}
