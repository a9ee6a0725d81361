"""Concurrent async scraping of vLLM and DCGM-exporter targets.

One `Scraper` fetches every distinct target of a cycle at once (bounded by `concurrency`), each under a
hard per-target deadline that covers connect, headers and the whole body, with the body size enforced
while streaming. A dead, slow or garbage target therefore costs at most its timeout and never delays
the others; it comes back as a failed `ScrapeResult` with a bounded `ScrapeReason` token (a metric
label) and a message naming the target. `TargetHealth` turns results into the per-target self-metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx

from observer.collect.model import DcgmScrape, RouterScrape, VllmScrape
from observer.errors import ObserverError, ParseError, SampleLimitError

log = logging.getLogger("observer.scrape")

ACCEPT = ("text/plain;version=0.0.4;q=1.0,text/plain;version=1.0.0;q=0.9,"
          "application/openmetrics-text;q=0.5,*/*;q=0.1")
"""Plain text first: vLLM behind prometheus_client >= 0.23.1 rewrites `vllm:` to `vllm_` in OpenMetrics."""

_TEXT_TYPES = ("text/plain", "application/openmetrics-text")
_THREAD_PARSE_BYTES = 1 << 20  # parse bigger bodies off the event loop so /metrics stays responsive
_MESSAGE_CHARS = 300
_P = TypeVar("_P", VllmScrape, DcgmScrape, RouterScrape)


class TargetKind(StrEnum):
    """What a target exposes."""

    VLLM = "vllm"
    DCGM = "dcgm"
    LLMD_EPP = "llm-d-epp"
    DYNAMO = "dynamo"

    @property
    def router(self) -> bool:
        """A router in front of vLLM (its families are per routed model)."""
        return self in (TargetKind.LLMD_EPP, TargetKind.DYNAMO)


class ScrapeReason(StrEnum):
    """Why a scrape failed: a bounded token used as the `reason` label."""

    REFUSED = "refused"  # connection refused: nothing listens
    CONNECT_ERROR = "connect_error"  # other connect failures (DNS, unreachable, reset while connecting)
    TIMEOUT = "timeout"  # no complete answer within scrape.timeout_seconds
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    HTTP_OTHER = "http_other"  # 1xx/3xx (redirects are not followed)
    PROTOCOL_ERROR = "protocol_error"  # the peer did not speak HTTP
    CONTENT_TYPE = "content_type"  # not text/plain or application/openmetrics-text
    BODY_TOO_LARGE = "body_too_large"  # over scrape.max_body_bytes (declared or streamed)
    TRUNCATED = "truncated"  # connection closed early, or the body does not end at a line end / # EOF
    ENCODING = "encoding"  # the body is not UTF-8
    PARSE_ERROR = "parse_error"  # not a valid exposition
    NOT_EXPOSITION = "not_exposition"  # an HTML page (a login page, a proxy's error page), not metrics
    SAMPLE_LIMIT = "sample_limit"  # over scrape.max_samples_per_target or max_models_per_target
    NO_DATA = "no_data"  # valid, but no vLLM families / no GPUs in it: probably the wrong URL
    INTERNAL = "internal"  # a bug in the observer; logged with its traceback


@dataclass(frozen=True, order=True)
class Target:
    """One scrape target: what it is and its URL (scraped once per cycle whatever versions share it)."""

    kind: TargetKind
    url: str

    @property
    def shown(self) -> str:
        """The URL as it may be shown, logged or exported: credentials and query string redacted."""
        return redact_url(self.url)


def redact_url(url: str) -> str:
    """`url` without its secrets: userinfo becomes `***@`, a query string `?***` (tokens travel there)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<unparseable URL>"
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    if parts.username is not None or parts.password is not None:
        netloc = "***@" + netloc
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", ""))


@dataclass(frozen=True)
class ScrapeResult:
    """The outcome of scraping one target once."""

    target: Target
    started: float
    """Unix time the scrape started (the sample timestamp)."""
    duration_seconds: float
    reason: ScrapeReason | None = None
    message: str = ""
    body_bytes: int = 0
    vllm: VllmScrape | None = None
    dcgm: DcgmScrape | None = None
    router: RouterScrape | None = None

    @property
    def ok(self) -> bool:
        """True when the target answered with a valid, recognised exposition."""
        return self.reason is None


class ScrapeFailure(ObserverError):
    """One fetch failed; `reason` is the bounded ScrapeReason (also a metric label)."""

    def __init__(self, message: str, *, reason: ScrapeReason) -> None:
        self.reason = reason
        super().__init__(message)


class _Failed(Exception):
    def __init__(self, reason: ScrapeReason, message: str, *, before_response: bool = False) -> None:
        self.reason = reason
        self.before_response = before_response  # the peer closed before answering: safe to retry a GET
        super().__init__(message)


def _trim(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


def _is_refused(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return True
        if isinstance(current, OSError) and current.errno == errno.ECONNREFUSED:
            return True
        current = current.__cause__ or current.__context__
    return "connection refused" in str(exc).lower() or "errno 111" in str(exc).lower()


def _check_content_type(value: str | None) -> None:
    if not value:
        return  # like Prometheus: no Content-Type means the classic text format
    media = value.split(";", 1)[0].strip().lower()
    if media not in _TEXT_TYPES:
        raise _Failed(ScrapeReason.CONTENT_TYPE,
                      f"Content-Type {_trim(value)!r} is not text/plain or application/openmetrics-text")


def _decode(body: bytes, content_type: str | None) -> str:
    """The body as text, if it is a complete exposition: UTF-8, not an HTML page, not cut off."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Failed(ScrapeReason.ENCODING, f"body is not UTF-8 (byte {e.start})") from e
    if text.lstrip()[:1] == "<":
        raise _Failed(ScrapeReason.NOT_EXPOSITION, "the body is an HTML/XML page, not a metrics exposition: "
                                                   "check the target URL")
    _check_complete(text, content_type)
    return text


def _check_complete(text: str, content_type: str | None) -> None:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "application/openmetrics-text":
        if text.rstrip("\n").rsplit("\n", 1)[-1].strip() != "# EOF":
            raise _Failed(ScrapeReason.TRUNCATED, "OpenMetrics body does not end with '# EOF'")
    elif text and not text.endswith("\n"):
        last = text.rsplit("\n", 1)[-1]
        raise _Failed(ScrapeReason.TRUNCATED,
                      f"body ends mid-line ({len(text)} bytes, last line {_trim(last)!r})")


@dataclass
class Scraper:
    """Fetches and parses targets; parsers are passed in so tests and the CLI can reuse it."""

    client: httpx.AsyncClient
    parse_vllm: Callable[[str], VllmScrape]
    parse_dcgm: Callable[[str], DcgmScrape]
    parse_router: Callable[[str, TargetKind], RouterScrape] | None = None
    timeout_seconds: float = 5.0
    max_body_bytes: int = 16 * 1024 * 1024
    concurrency: int = 32
    clock: Callable[[], float] = time.time
    _semaphore: asyncio.Semaphore | None = field(default=None, repr=False)

    async def scrape_all(self, targets: Iterable[Target]) -> dict[Target, ScrapeResult]:
        """Scrape every distinct target concurrently; each result is ready when the slowest finishes."""
        unique = sorted(set(targets))
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.concurrency)
        results = await asyncio.gather(*(self._bounded(t) for t in unique))
        return {r.target: r for r in results}

    async def _bounded(self, target: Target) -> ScrapeResult:
        assert self._semaphore is not None
        async with self._semaphore:
            return await self.scrape(target)

    async def scrape(self, target: Target) -> ScrapeResult:
        """Scrape one target; never raises: failures come back as a result with a reason."""
        started = self.clock()
        t0 = time.perf_counter()
        size = 0
        try:
            # One deadline for fetch *and* parse: a huge or slow-to-parse body cannot hold the cycle (the
            # sample limit stops a parse running on in its thread past the deadline).
            async with self._deadline("fetched and parsed"):
                body, content_type = await self._fetch_retrying(target)
                size = len(body)
                if target.kind.router:
                    router = await self._parse_router(target, _decode(body, content_type), len(body))
                    return ScrapeResult(target, started, time.perf_counter() - t0, None, "", size, router=router)
                vllm, dcgm = await self._parse(target, _decode(body, content_type), len(body))
        except _Failed as e:
            duration = time.perf_counter() - t0
            return ScrapeResult(target, started, duration, e.reason, f"{target.shown}: {e}", size)
        except Exception as e:  # a parser or library bug must not stop the cycle
            log.exception("internal error scraping %s", target.shown)
            duration = time.perf_counter() - t0
            return ScrapeResult(target, started, duration, ScrapeReason.INTERNAL,
                                f"{target.shown}: internal error {type(e).__name__}: {_trim(str(e))}", size)
        return ScrapeResult(target, started, time.perf_counter() - t0, None, "", size, vllm, dcgm)

    async def fetch_text(self, url: str) -> str:
        """GET `url` under the same deadline, size cap, headers and checks as a scrape; return the text.

        Raises ScrapeFailure with the bounded reason (the one-shot `observer scrape` uses this)."""
        try:
            async with self._deadline("fetched"):
                body, content_type = await self._fetch_retrying(Target(TargetKind.VLLM, url))
                return _decode(body, content_type)
        except _Failed as e:
            raise ScrapeFailure(f"could not scrape {redact_url(url)}: {e}", reason=e.reason) from e

    @contextlib.asynccontextmanager
    async def _deadline(self, what: str) -> AsyncIterator[None]:
        """One per-target deadline; running past it is reason `timeout`."""
        try:
            async with asyncio.timeout(self.timeout_seconds):
                yield
        except TimeoutError as e:
            raise _Failed(ScrapeReason.TIMEOUT, f"no complete answer ({what}) within {self.timeout_seconds:g}s") from e

    async def _fetch_retrying(self, target: Target) -> tuple[bytes, str | None]:
        try:
            return await self._fetch(target)
        except _Failed as e:
            if not e.before_response:
                raise
            return await self._fetch(target)  # once, on a fresh connection

    async def _fetch(self, target: Target) -> tuple[bytes, str | None]:
        try:
            async with self.client.stream("GET", target.url, headers={"Accept": ACCEPT},
                                          timeout=self.timeout_seconds, follow_redirects=False) as resp:
                status = resp.status_code
                if status >= 300 or status < 200:
                    reason = (ScrapeReason.HTTP_5XX if status >= 500 else
                              ScrapeReason.HTTP_4XX if status >= 400 else ScrapeReason.HTTP_OTHER)
                    raise _Failed(reason, f"HTTP {status} {resp.reason_phrase}".rstrip())
                content_type = resp.headers.get("content-type")
                _check_content_type(content_type)
                declared = resp.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                    raise _Failed(ScrapeReason.BODY_TOO_LARGE,
                                  f"Content-Length {int(declared)} exceeds {self.max_body_bytes} bytes")
                chunks: list[bytes] = []
                received = 0
                try:
                    async for chunk in resp.aiter_bytes():
                        received += len(chunk)
                        if received > self.max_body_bytes:
                            raise _Failed(ScrapeReason.BODY_TOO_LARGE,
                                          f"body exceeds {self.max_body_bytes} bytes (stopped reading)")
                        chunks.append(chunk)
                except (httpx.RemoteProtocolError, httpx.ReadError) as e:
                    raise _Failed(ScrapeReason.TRUNCATED,
                                  f"connection closed after {received} bytes: {_trim(str(e))}") from e
                except httpx.DecodingError as e:
                    raise _Failed(ScrapeReason.ENCODING, f"could not decode the compressed body: {e}") from e
                return b"".join(chunks), content_type
        except httpx.TimeoutException as e:
            raise _Failed(ScrapeReason.TIMEOUT,
                          f"{type(e).__name__} after {self.timeout_seconds:g}s") from e
        except httpx.ConnectError as e:
            if _is_refused(e):
                raise _Failed(ScrapeReason.REFUSED, "connection refused") from e
            raise _Failed(ScrapeReason.CONNECT_ERROR, f"could not connect: {_trim(str(e))}") from e
        except httpx.RemoteProtocolError as e:
            # "Server disconnected without sending a response": typically a keep-alive connection the peer
            # closed just as it was reused (an exporter whose idle timeout equals the scrape interval).
            raise _Failed(ScrapeReason.PROTOCOL_ERROR, f"not a valid HTTP answer: {_trim(str(e))}",
                          before_response="without sending" in str(e)) from e
        except httpx.LocalProtocolError as e:
            raise _Failed(ScrapeReason.PROTOCOL_ERROR, f"not a valid HTTP answer: {_trim(str(e))}") from e
        except (httpx.ReadError, httpx.WriteError, httpx.CloseError) as e:
            raise _Failed(ScrapeReason.CONNECT_ERROR,
                          f"connection failed: {_trim(str(e)) or type(e).__name__}",
                          before_response=isinstance(e, httpx.WriteError)) from e
        except httpx.UnsupportedProtocol as e:
            raise _Failed(ScrapeReason.CONNECT_ERROR, f"unsupported URL: {e}") from e

    async def _parse_router(self, target: Target, text: str, size: int) -> RouterScrape:
        if self.parse_router is None:
            raise _Failed(ScrapeReason.INTERNAL, "no router parser configured")
        parser = self.parse_router
        try:
            scrape = await self._run_parser(lambda t: parser(t, target.kind), text)
        except SampleLimitError as e:
            raise _Failed(ScrapeReason.SAMPLE_LIMIT, f"over the per-target limit: {_trim(str(e))}") from e
        except ParseError as e:
            raise _Failed(ScrapeReason.PARSE_ERROR, f"could not parse the exposition: {_trim(str(e))}") from e
        if not scrape.models and scrape.saturation is None:
            raise _Failed(ScrapeReason.NO_DATA, f"no {target.kind} router families in {size} bytes "
                                                f"({scrape.families_seen} families)")
        return scrape

    async def _parse(self, target: Target, text: str, size: int
                     ) -> tuple[VllmScrape | None, DcgmScrape | None]:
        try:
            if target.kind is TargetKind.VLLM:
                vllm = await self._run_parser(self.parse_vllm, text)
                if not vllm.models:
                    raise _Failed(ScrapeReason.NO_DATA, f"no vLLM model metrics in {size} bytes "
                                                        f"({vllm.families_seen} families)")
                return vllm, None
            dcgm = await self._run_parser(self.parse_dcgm, text)
            if not dcgm.gpus:
                raise _Failed(ScrapeReason.NO_DATA, f"no DCGM GPU metrics in {size} bytes")
            return None, dcgm
        except SampleLimitError as e:
            raise _Failed(ScrapeReason.SAMPLE_LIMIT, f"over the per-target limit: {_trim(str(e))}") from e
        except ParseError as e:
            raise _Failed(ScrapeReason.PARSE_ERROR, f"could not parse the exposition: {_trim(str(e))}") from e

    async def _run_parser(self, parser: Callable[[str], _P], text: str) -> _P:
        if len(text) > _THREAD_PARSE_BYTES:
            return await asyncio.to_thread(parser, text)
        return parser(text)


@dataclass(frozen=True)
class TargetStatus:
    """Self-metrics of one target as seen by one version (a DCGM exporter may serve several versions)."""

    version: str
    kind: TargetKind
    url: str
    up: bool | None
    """None before the first scrape."""
    last_duration_seconds: float | None
    last_success: float | None
    last_reason: ScrapeReason | None
    last_message: str
    errors: tuple[tuple[ScrapeReason, int], ...]


@dataclass
class _Health:
    up: bool | None = None
    duration: float | None = None
    last_success: float | None = None
    reason: ScrapeReason | None = None
    message: str = ""
    errors: dict[ScrapeReason, int] = field(default_factory=dict)


class TargetHealth:
    """Per-target up/down bookkeeping; logs a target going down (naming it and the reason) and recovering."""

    def __init__(self, bindings: Sequence[tuple[str, Target]]) -> None:
        self._bindings = tuple(bindings)
        self._health: dict[Target, _Health] = {t: _Health() for _, t in self._bindings}
        self._statuses = self._build_statuses()

    def rebind(self, bindings: Sequence[tuple[str, Target]]) -> None:
        """Scrape `bindings` from now on; targets that stay keep their health and error counts."""
        self._bindings = tuple(bindings)
        self._health = {t: self._health.get(t) or _Health() for _, t in self._bindings}
        self._statuses = self._build_statuses()

    @property
    def targets(self) -> list[Target]:
        """Distinct targets to scrape."""
        return sorted(self._health)

    def record(self, results: dict[Target, ScrapeResult]) -> None:
        """Fold one cycle's results in; log state changes."""
        for target, result in results.items():
            h = self._health.get(target)
            if h is None:
                continue
            h.duration = result.duration_seconds
            if result.ok:
                if h.up is False:
                    log.info("target %s (%s) is up again", target.shown, target.kind.value)
                h.up, h.last_success, h.reason, h.message = True, result.started, None, ""
                continue
            assert result.reason is not None
            h.errors[result.reason] = h.errors.get(result.reason, 0) + 1
            if h.up is not False or h.reason != result.reason:
                # result.message starts with the target URL
                log.warning("%s target down (%s): %s", target.kind.value, result.reason.value, result.message)
            else:
                log.debug("scrape of %s still failing (%s): %s", target.shown, result.reason.value,
                          result.message)
            h.up, h.reason, h.message = False, result.reason, result.message
        self._statuses = self._build_statuses()

    def _build_statuses(self) -> tuple[TargetStatus, ...]:
        return tuple(TargetStatus(version, target.kind, target.shown, h.up, h.duration, h.last_success, h.reason,
                                  h.message, tuple(sorted(h.errors.items())))
                     for version, target in self._bindings for h in (self._health[target],))

    def statuses(self) -> tuple[TargetStatus, ...]:
        """One status per (version, target) binding, in config order, as of the last cycle (an immutable
        tuple swapped in by `record`, so /metrics may read it from another thread)."""
        return self._statuses
