"""`GET /report` and `GET /report/canary/{canary}?baseline=…`: the canary report, one page per pair.

Server-rendered (Jinja2, autoescaped) from the canary service's latest verdicts and the arms' data behind
them: no store or Prometheus query except the worst answers' text, which only a request carrying the
private-route token gets (header `Authorization: Bearer`, or the cookie `POST /report/login` sets). Pages load
nothing from elsewhere and run no script: the Content-Security-Policy forbids both, so a hostile version name or
sample text can at worst show up as text. Every state has a page that says what it is: an unknown pair (404 with
the known ones), no verdict yet, nodata metrics, areas that never ran, a source that is down.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Protocol
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Cookie, Header, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from observer.analyse.canary.results import Evidence, Verdict
from observer.analyse.pairs import Pair
from observer.config.spec import ObserverConfig
from observer.export.report import model
from observer.export.report.model import Example

COOKIE = "observer_report_token"
CSP = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; "
       "frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "Cache-Control": "no-store"}


class Canaries(Protocol):
    """What the pages need of the canary service."""

    @property
    def pairs(self) -> Sequence[Pair]: ...

    def latest(self, canary: str, baseline: str) -> Verdict | None: ...

    def evidence(self, canary: str, baseline: str) -> Evidence | None: ...

    def looks(self, canary: str, baseline: str) -> int: ...


Examples = Callable[..., Awaitable[Sequence[Example]]]
"""`await worst(canary, *, since, limit)`: the worst answers as text."""


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                      lstrip_blocks=True)
    env.filters["urlpart"] = lambda s: quote(str(s), safe="")
    env.filters["when"] = lambda t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    env.filters["age"] = _age
    return env


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def rollout_commands(config: ObserverConfig, group: str | None) -> list[str]:
    """The kubectl lines for the Rollout discovery knows owns `group`'s pods (none when it knows none)."""
    k = config.discovery.kubernetes
    if k is None or group is None:
        return []
    found = next((m for m in k.models if m.name == group), None)
    if found is None or found.rollout is None:
        return []
    target = f"{found.rollout} -n {k.namespace}"
    return [f"kubectl argo rollouts get rollout {target}", f"kubectl argo rollouts abort {target}",
            f"kubectl argo rollouts promote {target}"]


def router(config: ObserverConfig, canaries: Canaries, *, token: str | None, anonymous: bool,
           examples: Examples | None, group_of: Callable[[str], str | None],
           kappa: Callable[[], float | None] = lambda: None, clock: Callable[[], float] = time.time) -> APIRouter:
    """The report pages' router."""
    env = _environment()
    spec = config.canary
    r = APIRouter(prefix="/report", tags=["report"], include_in_schema=False)

    def html(template: str, status: int = 200, **values: Any) -> HTMLResponse:
        body = env.get_template(template).render(spec=spec, **values)
        return HTMLResponse(body, status_code=status, headers=HEADERS)

    def allowed(authorization: str | None, cookie: str | None) -> bool:
        if token is None:
            return anonymous
        given = ""
        if authorization is not None:
            scheme, _, value = authorization.partition(" ")
            given = value.strip() if scheme.lower() == "bearer" else ""
        elif cookie:
            given = cookie
        return bool(given) and hmac.compare_digest(given.encode(), token.encode())

    def index_rows() -> list[dict[str, Any]]:
        now = clock()
        rows = []
        for p in canaries.pairs:
            v = canaries.latest(p.canary, p.baseline)
            rows.append({"canary": p.canary, "baseline": p.baseline, "verdict": None if v is None else str(v.verdict),
                         "score": None if v is None else v.score,
                         "age": None if v is None else max(0.0, now - v.evaluated_at),
                         "looks": canaries.looks(p.canary, p.baseline),
                         "weight": None if v is None or v.expected_share is None else v.expected_share,
                         "reason": "" if v is None else v.reason})
        return rows

    @r.get("", response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        return html("index.html", pairs=index_rows(), interval=spec.interval_seconds)

    @r.get("/canary/{canary}", response_class=HTMLResponse)
    async def pair(
        canary: str,
        baseline: Annotated[str | None, Query(max_length=200)] = None,
        authorization: Annotated[str | None, Header()] = None,
        observer_report_token: Annotated[str | None, Cookie()] = None,
    ) -> HTMLResponse:
        known = [(p.canary, p.baseline) for p in canaries.pairs]
        matches = [(c, b) for c, b in known if c == canary and (baseline is None or b == baseline)]
        if len(matches) != 1:
            why = (f"canary {canary!r} has {len(matches)} baselines: name one" if matches else
                   f"no pair canary {canary!r}" + (f" against baseline {baseline!r}" if baseline else ""))
            return html("missing.html", 404, why=why, pairs=index_rows())
        c, b = matches[0]
        ev = canaries.evidence(c, b)
        if ev is None:
            return html("pending.html", canary=c, baseline=b, interval=spec.interval_seconds,
                        looks=canaries.looks(c, b))
        v = ev.verdict
        shown = allowed(authorization, observer_report_token)
        worst: Sequence[Example] | None = None
        if shown:
            worst = () if examples is None else await examples(c, since=v.evaluated_at - v.window_seconds,
                                                          limit=spec.report.examples)
        looks, judge_kappa, commands = canaries.looks(c, b), kappa(), rollout_commands(config, group_of(c))

        def render() -> HTMLResponse:
            view = model.page(config, v, ev.canary, ev.baseline, now=clock(), looks=looks, kappa=judge_kappa,
                              commands=commands, examples=worst)
            return html("pair.html", p=view, token_configured=token is not None,
                        path=f"/report/canary/{quote(c, safe='')}?baseline={quote(b, safe='')}")

        # Drawing the plots takes tens of milliseconds: off the event loop, so scrapes and the gate's verdict
        # calls are not held up by someone reading a report.
        return await asyncio.to_thread(render)

    @r.post("/login")
    async def login(request: Request) -> Response:
        # A plain urlencoded form, read here: no multipart parser for two fields.
        body = await request.body()
        form = parse_qs(body[:2000].decode(errors="replace"), max_num_fields=4)
        given, next_page = (form.get("token") or [""])[0], (form.get("next") or ["/report"])[0]
        # Only a path of this site: never an open redirect.
        target = next_page if next_page.startswith("/report") and "//" not in next_page else "/report"
        if token is None or not given or not hmac.compare_digest(given.encode(), token.encode()):
            return html("missing.html", 403, why="token not accepted", pairs=index_rows())
        out = RedirectResponse(target, status_code=303)
        out.set_cookie(COOKIE, given, httponly=True, samesite="strict", path="/report",
                       secure=request.url.scheme == "https", max_age=8 * 3600)
        return out

    return r
