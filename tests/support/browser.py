"""Headless Chromium (Debian's chromium + chromium-driver) through Selenium, for the
explorer's browser tests."""

from __future__ import annotations

import os
import shutil

CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium_available() -> bool:
    return os.path.exists(CHROMEDRIVER) and shutil.which("chromium") is not None


def headless_chromium(width: int = 1400, height: int = 2600):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")  # type: ignore[assignment]
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              f"--window-size={width},{height}", "--no-proxy-server", "--disable-extensions"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
