"""The canary report in a real browser: Debian's Chromium, driven by Playwright's Python package with
`executable_path` set (Playwright never downloads a browser here). The pages are served by uvicorn on a
loopback port over simulated fleet state (tests/support/report_app.py); each test checks what a person would
see, and the console. `OBSERVER_REPORT_SCREENSHOTS=DIR` saves each page kind's screenshot there (docs/img)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import report_app as ra

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed "
                                 "(make debian-packages)")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update"]
PAIR = "/report/canary/m0-canary?baseline=m0-stable"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=shutil.which("chromium"), args=FLAGS)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A fresh page that records console errors and every request that left the loopback server."""

    def __init__(self, browser: Any, base: str, *, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.context = browser.new_context(viewport={"width": 1320, "height": 900}, extra_http_headers=headers)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: None if r.url.startswith((base, "data:")) else self.outside.append(r.url))
        self.base = base

    def open(self, path: str) -> Any:
        response = self.page.goto(self.base + path)
        self.page.wait_for_load_state("load")
        return response

    def shot(self, name: str) -> None:
        where = os.environ.get("OBSERVER_REPORT_SCREENSHOTS")
        if where:
            Path(where).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(where) / name), full_page=True)

    def close(self) -> None:
        self.context.close()


@contextmanager
def report_page(browser: Any, pairs: int = 1, *, token: str | None = None, **build: Any) -> Iterator[Page]:
    """A browser page on a served report over `pairs` simulated pairs; server and page closed on the way out."""
    app, _, _ = ra.build(pairs, **build)
    with ra.serve(app) as base:
        p = Page(browser, base, token=token)
        try:
            yield p
        finally:
            p.close()


def _drawn(page: Any) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        "figure.plot img", "imgs => imgs.map(i => ({w: i.naturalWidth, h: i.naturalHeight, done: i.complete}))")


def test_failing_canary_page_in_chromium(browser: Any) -> None:
    with report_page(browser, 2, token=ra.TOKEN) as p:
        assert p.open(PAIR).status == 200
        verdict = p.page.inner_text("#verdict")
        assert "fail" in verdict and "critical metric failed: errors" in verdict
        assert p.page.inner_text(".failing-metric") == "errors"
        row = p.page.locator('tr[data-metric="errors"]').inner_text()
        assert "fail" in row and "critical" in row
        plots = _drawn(p.page)
        assert len(plots) == 5 and all(x["done"] and x["w"] > 0 and x["h"] > 0 for x in plots), plots
        assert p.page.locator(".missing-plot").count() == 0
        # the hostile sample renders as text: visible, not executed, no link to javascript:
        text = p.page.inner_text("#examples")
        assert '<script>alert("x")</script>' in text and "javascript:alert(1)" in text
        assert p.page.locator('#examples a, #examples script, #examples img').count() == 0
        assert p.page.evaluate("document.querySelectorAll('script').length") == 0
        assert p.errors == [] and p.outside == []
        p.shot("report-pair.png")


def test_without_token_no_sample_text_in_chromium(browser: Any) -> None:
    with report_page(browser) as p:
        p.open(PAIR)
        body = p.page.inner_text("body")
        assert "Sampled text is hidden" in body and "capital of France" not in body
        assert p.errors == []
        # the form logs in (an HttpOnly cookie) and comes back with the text
        p.page.fill("input[name=token]", ra.TOKEN)
        p.page.click("button[type=submit]")
        p.page.wait_for_load_state("load")
        assert "capital of France" in p.page.inner_text("#examples")
        assert p.page.evaluate("document.cookie") == ""  # HttpOnly: no script could read it
        assert p.errors == [] and p.outside == []


def test_index_unknown_and_down_pages_in_chromium(browser: Any) -> None:
    with report_page(browser, 3) as p:
        assert p.open("/report").status == 200
        assert p.page.locator("#pairs tr").count() == 4  # header + three pairs
        p.shot("report-index.png")
        assert p.errors == []
        assert p.open("/report/canary/nope").status == 404
        assert p.page.locator("#known li").count() == 3
        # Chromium logs the document's own 404 status, and nothing else may be logged
        assert [e for e in p.errors if "status of 404" not in e] == [] and p.outside == []
    with report_page(browser, down=True) as p:
        assert p.open(PAIR).status == 200
        assert "unreachable" in p.page.inner_text("#verdict")
        assert len(_drawn(p.page)) == 0 and p.page.locator(".missing-plot").count() == 5
        assert p.errors == []
