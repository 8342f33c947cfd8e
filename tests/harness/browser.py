"""Headless Chromium (Debian's `chromium` package) driven by playwright, for the tests of `orsgen view`'s pages: open a
page from disk and keep what a person would not see: console errors (a script's, or a Content-Security-Policy
refusal), dialogs (dismissed), and every request the page made.

Playwright drives the system's Chromium (`executable_path`): `playwright install` downloads browsers, which this
closed network refuses. Without Chromium a test fails with the line that installs it."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
INSTALL = "the page tests need headless Chromium: apt-get update && apt-get install -y chromium"
# Chromium's own connections (updates, sync, ...) off: this network refuses them, and a page test counts requests.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a fresh profile: playwright gives each launch its own user-data-dir); the test fails
    in one line when it is not installed."""
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if path is None:
        pytest.fail(INSTALL, pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail('the page tests drive Chromium with playwright: pip install -e ".[test]"', pytrace=False)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=path, headless=True, args=FLAGS, timeout=60_000)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Opened:
    """A page as opened, and what it did."""

    page: Any
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def value(self, selector: str) -> Any:
        """The JSON value of the element's `data-value`."""
        return json.loads(self.page.locator(selector).get_attribute("data-value"))

    def rows(self, selector: str) -> list[dict[str, Any]]:
        """Each row of a table body: its data-* attributes, and its cells' texts and JSON `data-value`s."""
        return self.page.eval_on_selector_all(selector, """rows => rows.map(r => ({data: Object.assign({},
            r.dataset), cells: Array.from(r.cells).map(c => c.textContent), values: Array.from(r.cells).map(c =>
            c.dataset.value === undefined ? null : JSON.parse(c.dataset.value))}))""")

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).text_content())

    # A click on a link or a control that moves the fragment draws on the page's hashchange, a task after the click
    # returns: each action waits until the page has drawn the fragment it left (`body[data-drawn]`).
    def drawn(self) -> None:
        self.page.wait_for_function("document.body.dataset.drawn === location.hash")

    def click(self, selector: str) -> None:
        self.page.click(selector)
        self.drawn()

    def select(self, selector: str, value: str) -> None:
        self.page.select_option(selector, value)
        self.drawn()

    def fill(self, selector: str, value: str) -> None:
        self.page.fill(selector, value)
        self.drawn()

    def goto(self, path: Path, fragment: str) -> None:
        self.page.goto(path.resolve().as_uri() + fragment)
        self.drawn()


def open_page(browser: Any, path: Path, fragment: str = "") -> Opened:
    """Open `path` (file://, plus `fragment`) in a fresh context; once its script has drawn the tabs."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    opened = Opened(page)
    page.on("console", lambda message: message.type == "error" and opened.errors.append(message.text))
    page.on("pageerror", lambda error: opened.errors.append(str(error)))

    def dialog(d: Any) -> None:
        opened.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    context.on("request", lambda request: opened.requests.append(request.url))
    page.goto(path.resolve().as_uri() + fragment)
    try:
        page.wait_for_selector("#tabs a", timeout=30_000)
        opened.drawn()
    except Exception as exc:  # playwright's TimeoutError: say what the page said
        raise AssertionError(f"{path}: the page drew nothing; its errors: {opened.errors}") from exc
    return opened
