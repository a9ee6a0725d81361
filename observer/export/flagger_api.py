"""Flagger's webhooks: `POST /api/v1/flagger/{confirm-promotion,rollback,rollout}` answer from the canary verdict.

Flagger (v1.44) calls a webhook with `{"name", "namespace", "phase", "checksum", "metadata"}` and reads only the
status code: 2xx means the check passed. So each hook maps the verdict to the one code that is safe for it:

* `confirm-promotion` answers 200 only on `pass`; anything else (fail, inconclusive, nodata, idle) answers 403
  and Flagger holds the promotion, asking again at its next interval.
* `rollback` answers 200 on `fail` (Flagger rolls the canary back) and 409 otherwise.
* `rollout` (a check during the analysis) answers 412 on `fail`, counted toward the Canary's failure
  `threshold`, and 200 otherwise: an undecided verdict neither promotes (only confirm-promotion does) nor rolls
  back.

The pair: the versions named in the webhook's `metadata.canary` and `metadata.baseline` (names or roles, as the
verdict API takes them), else Flagger's own names, the target `<name>` against `<name>-primary`.
`metadata.weight` is the split the judge expects (Flagger's payload does not carry the current weight; without
it the split check is skipped). `metadata.step_seconds` is the analysis's planned length from the revision's
start (interval × maxWeight ÷ stepWeight, or × iterations): the sliced tests spend most of their α there.
The window starts when this observer first heard of the payload's `checksum`
(Flagger's hash of the canary's spec, new with every revision): Flagger reuses the names for every revision, so
without it a new revision would be judged on the requests of the one before (a rolled-back bad one, or a
healthy one diluting a bad one). The memory is per process and bounded; after a restart the window starts
again, which holds the gate longer and never passes it sooner.

A malformed payload answers 400 and a pair the observer does not know 404: never a 2xx that lets a promotion
through. Every answer's body carries the verdict, its one-line reason and the
report URL, so Flagger's events and logs show why.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Request, Response

from observer import jsonsafe
from observer.export.canary_api import MAX_REASON, VerdictProvider

Hook = Literal["confirm-promotion", "rollback", "rollout"]
HOOKS: tuple[Hook, ...] = ("confirm-promotion", "rollback", "rollout")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9:._-]{1,63}$")


class BadPayload(ValueError):
    """A webhook body Flagger would not send: what is wrong with it."""


MAX_REVISIONS = 1024
"""Canaries whose revision start is remembered; the least recently heard of is forgotten first."""


class Revisions:
    """When this process first heard of each Canary's current revision (the payload's `checksum`)."""

    def __init__(self, *, clock: Callable[[], float] = time.time, max_canaries: int = MAX_REVISIONS) -> None:
        self._clock = clock
        self._max = max_canaries
        self._seen: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    def start(self, namespace: str, name: str, checksum: str) -> float:
        """The analysis start of `checksum` for the Canary: now if it is new (a new revision restarts it)."""
        key = (namespace, name)
        seen = self._seen.get(key)
        if seen is None or seen[0] != checksum:
            seen = (checksum, self._clock())
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        return seen[1]


def parse_payload(raw: bytes) -> tuple[str, str, dict[str, str], str]:
    """(name, namespace, metadata, checksum) of a Flagger webhook body; BadPayload naming what is wrong."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise BadPayload(f"the body is not JSON ({e.__class__.__name__}): Flagger sends "
                         '{"name", "namespace", "phase", "checksum", "metadata"}') from None
    if not isinstance(data, dict):
        raise BadPayload("the body is not a JSON object")
    name, namespace = data.get("name"), data.get("namespace")
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadPayload(f"`name` must be the Canary's name (a Kubernetes object name), got {name!r}")
    if not isinstance(namespace, str) or not _NAME.match(namespace):
        raise BadPayload(f"`namespace` must be a Kubernetes namespace, got {namespace!r}")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise BadPayload("`metadata` must map names to strings (the webhook's metadata in the Canary)")
    for key in ("canary", "baseline"):
        if key in metadata and not _VERSION.match(metadata[key]):
            raise BadPayload(f"metadata.{key} {metadata[key]!r} is not a version name or role")
    if "step_seconds" in metadata:
        step_seconds(metadata)
    checksum = data.get("checksum") or ""
    if not isinstance(checksum, str) or len(checksum) > 256:
        raise BadPayload("`checksum` must be the canary revision's hash (a string)")
    return name, namespace, dict(metadata), checksum


def step_seconds(metadata: dict[str, str]) -> float | None:
    """metadata.step_seconds as seconds (None when absent); BadPayload when it is not a positive number."""
    text = metadata.get("step_seconds")
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 86_400:
        raise BadPayload(f"metadata.step_seconds {text[:20]!r} is not a step length in seconds (0, 86400]")
    return value


def decide(hook: Hook, verdict: str, *, known: bool) -> tuple[int, str]:
    """(status code, decision) of `hook` for `verdict`; `known`: both versions exist."""
    if not known:
        return 404, "hold"
    if hook == "confirm-promotion":
        return (200, "promote") if verdict == "pass" else (403, "hold")
    if hook == "rollback":
        return (200, "roll back") if verdict == "fail" else (409, "keep")
    return (412, "check failed") if verdict == "fail" else (200, "check passed")


def router(provider: VerdictProvider, *, report_url: Callable[[str, str], str] | None = None,
           revisions: Revisions | None = None) -> APIRouter:
    """The Flagger webhook router over the canary verdicts of `provider`."""
    r = APIRouter(prefix="/api/v1/flagger", tags=["flagger"])
    seen = revisions if revisions is not None else Revisions()

    async def answer(hook: Hook, request: Request) -> Response:
        try:
            name, namespace, metadata, checksum = parse_payload(await request.body())
        except BadPayload as e:
            return _json(400, {"hook": hook, "decision": "hold", "reason": f"malformed Flagger payload: {e}"})
        canary = metadata.get("canary", name)
        baseline = metadata.get("baseline", f"{name}-primary")
        since = seen.start(namespace, name, checksum) if checksum else None
        v = await provider.verdict_for(canary, baseline, since=since, weight=metadata.get("weight", "any"),
                                       step_seconds=step_seconds(metadata))
        verdict = str(v.verdict)
        known = not v.unknown
        code, decision = decide(hook, verdict, known=known)
        body: dict[str, Any] = {"hook": hook, "decision": decision, "verdict": verdict, "canary": v.canary,
                                "baseline": v.baseline, "flagger": f"{namespace}/{name}",
                                "reason": v.reason[:MAX_REASON]}
        if not known:
            body["reason"] = (f"{v.reason[:MAX_REASON]}: name the versions in the webhook's metadata.canary and "
                              f"metadata.baseline, or name them {name} and {name}-primary")
        if report_url is not None and v.canary and v.baseline and known:
            body["report"] = report_url(v.canary, v.baseline)
        return _json(code, body)

    @r.post("/confirm-promotion", responses=_responses({200: "promote: the verdict is pass",
                                                        403: "hold: anything but pass"}),
            openapi_extra=_REQUEST)
    async def confirm_promotion(request: Request) -> Response:
        """Flagger's confirm-promotion gate: 200 only when the verdict is pass; 403 holds the promotion."""
        return await answer("confirm-promotion", request)

    @r.post("/rollback", responses=_responses({200: "roll back: the verdict is fail", 409: "keep: not a fail"}),
            openapi_extra=_REQUEST)
    async def rollback(request: Request) -> Response:
        """Flagger's rollback hook: 200 when the verdict is fail (Flagger rolls back); 409 otherwise."""
        return await answer("rollback", request)

    @r.post("/rollout", responses=_responses({200: "the check passed: not a fail",
                                              412: "the check failed: the verdict is fail"}),
            openapi_extra=_REQUEST)
    async def rollout(request: Request) -> Response:
        """A Flagger rollout check: 412 when the verdict is fail (counted toward the threshold); 200 otherwise."""
        return await answer("rollout", request)

    return r


_ANSWER = {"type": "object", "required": ["hook", "decision", "reason"],
           "properties": {k: {"type": "string"} for k in ("hook", "decision", "verdict", "canary", "baseline",
                                                          "flagger", "reason", "report")}}
_REQUEST: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["name", "namespace"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "phase": {"type": "string"},
                   "checksum": {"type": "string"},
                   "metadata": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}


def _responses(codes: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """The hook's own answers plus the two every hook gives (a malformed payload, an unknown pair)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code, text in {**codes, 400: "malformed Flagger payload (hold)", 404: "unknown pair (hold)"}.items():
        out[code] = {"description": text, "content": {"application/json": {"schema": _ANSWER}}}
    return out


def _json(code: int, body: dict[str, Any]) -> Response:
    return Response(jsonsafe.dumps(body, separators=(",", ":")), status_code=code, media_type="application/json")
