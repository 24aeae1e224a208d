"""The dashboard in a real browser (Debian's Chromium driven by Playwright) at phone width."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import wait_for, write_spec
from tests.integration.test_web import dashboard

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]
PHONE = {"width": 390, "height": 844}
RSS_LIMIT = 80 * 1024 * 1024

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed (dev extra)")
if not Path(CHROMIUM).exists():
    pytest.skip("no chromium: `apt-get install -y chromium` to run the browser tests",
                allow_module_level=True)  # fmt: skip


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def test_jobs_table_updates_live_at_phone_width(tmp_path: Path, browser: Any) -> None:
    with dashboard(tmp_path) as (daemon, url):
        assert daemon.cli("start", str(write_spec(tmp_path, "sleeper", SLEEP))).returncode == 0
        daemon.wait_state("sleeper", "running")
        page = browser.new_page(viewport=PHONE)
        page.goto(url)
        assert "token" not in page.url  # the token went into the cookie
        page.wait_for_selector('tr[data-job="sleeper"][data-state="running"]', timeout=10_000)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"the page scrolls sideways on a phone ({width}px)"
        assert daemon.cli("stop", "sleeper", "--no-wait").returncode == 0
        page.wait_for_selector('tr[data-job="sleeper"][data-state="stopped"]', timeout=10_000)

        page.click('a[href="/jobs/sleeper"]')
        page.wait_for_selector("#chart", timeout=10_000)
        page.wait_for_function(
            "document.querySelector('#events').textContent.includes('state_changed')",
            timeout=10_000,
        )


def test_rss_with_twenty_jobs_and_the_page_open(tmp_path: Path, browser: Any) -> None:
    with dashboard(tmp_path) as (daemon, url):
        for i in range(20):
            assert (
                daemon.cli("start", str(write_spec(tmp_path, f"job{i:02d}", SLEEP))).returncode == 0
            )
        for i in range(20):
            daemon.wait_state(f"job{i:02d}", "running", timeout=60)
        context = browser.new_context(viewport=PHONE)  # its pages share the cookie
        page = context.new_page()
        page.goto(url)
        page.wait_for_function("document.querySelectorAll('tr[data-job]').length == 20",
                               timeout=15_000)  # fmt: skip
        job_page = context.new_page()
        job_page.goto(url.split("/?token=")[0] + "/jobs/job00")
        job_page.wait_for_selector("#chart", timeout=10_000)
        assert daemon.cli("stop", "job19", "--no-wait").returncode == 0
        page.wait_for_selector('tr[data-job="job19"][data-state="stopped"]', timeout=10_000)
        assert daemon.proc is not None
        rss = wait_for(lambda: psutil.Process(daemon.proc.pid).memory_info().rss, 5, "rss")
        print(f"rsupd RSS with 20 jobs and the dashboard open: {rss / 2**20:.1f} MiB")
        assert rss < RSS_LIMIT
