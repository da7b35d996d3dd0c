"""A headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, for the
playground's browser tests; ``pytest.skip`` with the reason when either is missing."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from tests.helpers.waiting import wait_until

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_driver(width: int = 1280, height: int = 860) -> Any:
    """A started headless Chromium WebDriver; skips the test when no browser or driver is installed."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="no selenium here (pip install selenium)")
    from selenium.webdriver.chrome.service import Service

    binary = os.environ.get("RADIXLM_CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("no headless Chromium here: apt-get install chromium chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(service=Service(driver_path), options=options)


def wait_for(driver: Any, script: str, what: str, timeout: float = 60.0) -> Any:
    """Poll a JavaScript expression (``return ...``) until it is truthy; return its value."""
    return wait_until(lambda: driver.execute_script(script), timeout, what, interval=0.1)


def browser_errors(driver: Any) -> list[str]:
    """SEVERE entries of the browser console since the last call (CSP violations, exceptions)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
