"""Debian's chromium driven by Playwright, for the console's end-to-end tests.

    with Browser.launch() as browser:
        page = browser.page(width=1280)
        page.goto(server.base_url + "/ui/")

Playwright drives the system's /usr/bin/chromium (executable_path), never a
browser of its own download. When chromium is missing and the tests run as
root it is installed with apt-get; otherwise, or when the install fails, the
tests that need it are skipped with the reason.
"""

from __future__ import annotations

import os

import pytest

from apt import find_or_install

PACKAGES = ["chromium", "fonts-liberation"]  # the fonts chromium recommends: readable screenshots
# Headless, and quiet: with the closed network here, chromium's own background
# connections (updates, sync, field trials) would only fail, many at a time.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def find_chromium() -> str | None:
    return find_or_install("chromium", *PACKAGES)


def chromium_or_skip() -> str:
    found = find_chromium()
    if found is None:
        how = ("as root it is installed with apt-get, which failed" if os.geteuid() == 0
               else f"install {' '.join(PACKAGES)} (apt) or run as root")
        pytest.skip(f"the console's browser tests need Debian's chromium; {how}")
    return found


class Browser:
    """One chromium for a test module (Playwright gives it a new, empty user-data-dir);
    a fresh context (storage, clipboard) per page."""

    def __init__(self, playwright, chromium):
        self.playwright = playwright
        self.chromium = chromium

    @classmethod
    def launch(cls) -> Browser:
        sync_api = pytest.importorskip("playwright.sync_api", reason="the console's browser tests need playwright "
                                                                     "(the test extra: pip install -e '.[test]')")
        executable = chromium_or_skip()
        playwright = sync_api.sync_playwright().start()
        try:
            chromium = playwright.chromium.launch(executable_path=executable, args=FLAGS)
        except Exception:
            playwright.stop()
            raise
        return cls(playwright, chromium)

    def page(self, width: int = 1280, height: int = 900):
        context = self.chromium.new_context(viewport={"width": width, "height": height},
                                            permissions=["clipboard-read", "clipboard-write"])
        return context.new_page()

    def close(self) -> None:
        self.chromium.close()
        self.playwright.stop()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
