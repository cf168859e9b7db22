"""The explorer in a real browser (Debian's headless chromium through its driver): the
catalog and table pages of the sample table load without console errors, every plot draws
the marks the table's system tables call for, links navigate, and time travel shows the
chosen version's files. Screenshots go to test-artifacts/ui/."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from support.browser import headless_chromium

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
pytestmark = pytest.mark.xdist_group("browser")  # one chromium at a time on a small machine


@pytest.fixture(scope="module")
def browser():
    d = headless_chromium()
    yield d
    d.quit()


def load(d, url: str, state: str) -> None:
    d.get("about:blank")
    d.get(url)
    WebDriverWait(d, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == state)


def console_errors(d) -> list[dict]:
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def shot(d, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert d.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def marks(d, plot: str, css: str) -> list:
    return d.find_elements(By.CSS_SELECTOR, f'svg[data-plot="{plot}"] {css}')


def test_catalog_page_lists_the_tables_and_links_to_a_table(browser, sample):
    d = browser
    load(d, sample["url"], "catalog")
    links = d.find_elements(By.CSS_SELECTOR, "#tables a.table-link")
    assert sorted(a.text for a in links) == ["shop.empty", "shop.orders"]
    shot(d, "catalog")
    assert console_errors(d) == []
    next(a for a in links if a.text == "shop.orders").click()
    WebDriverWait(d, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "table")
    assert d.current_url.endswith("#/t/shop.orders")
    assert d.find_element(By.TAG_NAME, "h1").text.startswith("shop.orders")
    d.find_element(By.ID, "to-catalog").click()  # and back
    WebDriverWait(d, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "catalog")


def test_table_page_draws_every_plot_from_the_table(browser, sample):
    d, t = browser, sample["table"]
    load(d, sample["url"] + "#/t/shop.orders", "table")
    # the expiry preview comes last (after every plot), then shades the time plot
    WebDriverWait(d, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-expiry") == "shown")
    snaps = t.inspect.snapshots()
    files = t.inspect.files()
    tags = t.inspect.tags()
    partitions = len(set(files["partition"].to_pylist()))
    for plot in ("rows", "files"):
        (line,) = marks(d, plot, "path.mark-line")
        assert int(line.get_attribute("data-points")) == snaps.num_rows
    (line,) = marks(d, "bytes", "path.mark-line")
    assert int(line.get_attribute("data-points")) == snaps.num_rows  # a short history: every version
    (ticks,) = marks(d, "time", "path.mark-ticks")
    assert int(ticks.get_attribute("data-points")) == snaps.num_rows
    assert sorted(m.get_attribute("data-tag") for m in marks(d, "time", "path.mark-tag")) == sorted(tags["tag_name"].to_pylist())
    for plot in ("partition-files", "partition-rows", "partition-deleted"):
        assert len(marks(d, plot, "rect.mark")) == partitions
    per_partition = {r.get_attribute("data-label"): int(r.get_attribute("data-value")) for r in marks(d, "partition-files", "rect.mark")}
    assert per_partition == {p: files["partition"].to_pylist().count(p) for p in set(files["partition"].to_pylist())}
    deleted = {r.get_attribute("data-label"): float(r.get_attribute("data-value")) for r in marks(d, "partition-deleted", "rect.mark")}
    assert deleted["day=2026-01-02"] == pytest.approx(20 / 85) and sum(v > 0 for v in deleted.values()) == 1
    sizes = files["size"].to_pylist()
    buckets = max(math.floor(math.log2(s)) for s in sizes) - min(math.floor(math.log2(s)) for s in sizes) + 1
    assert len(marks(d, "sizes", "rect.mark")) == buckets
    for rect in d.find_elements(By.CSS_SELECTOR, "svg rect.mark"):  # drawn, not zero-sized by mistake
        assert rect.size["width"] > 0
    advice = d.find_elements(By.CSS_SELECTOR, "#health .advice")
    assert {a.get_attribute("data-kind") for a in advice} >= {"small-files", "deleted-rows", "expiry"}
    assert any("lamina" in c.text and "compact" in c.text for c in d.find_elements(By.CSS_SELECTOR, "#health code"))
    shot(d, "table")
    assert console_errors(d) == []


def _shown_files(d) -> tuple[int, set[str]]:
    version, paths = d.execute_script(
        "const t = document.getElementById('files-table');"
        "return [t.getAttribute('data-version'), [...t.querySelectorAll('.file-path')].map((e) => e.textContent)];"
    )
    return int(version), set(paths)


def _picked(d, version: int) -> None:
    WebDriverWait(d, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-picked") == str(version))


def test_time_travel_shows_the_chosen_versions_files(browser, sample):
    d, t = browser, sample["table"]
    load(d, sample["url"] + "#/t/shop.orders", "table")
    assert _shown_files(d) == (t.version, set(t.inspect.files()["path"].to_pylist()))
    Select(d.find_element(By.ID, "pick")).select_by_value("tag:first-load")
    _picked(d, 1)
    assert _shown_files(d)[1] == set(t.inspect.files(version="first-load")["path"].to_pylist())
    assert "version 1" in d.find_element(By.ID, "layout-title").text  # the layout plots follow
    d.find_element(By.ID, "pick-version").send_keys("3")
    d.find_element(By.ID, "pick-go").click()
    _picked(d, 3)
    assert _shown_files(d)[1] == set(t.inspect.files(version=3)["path"].to_pylist())
    rows = d.find_elements(By.CSS_SELECTOR, "#sample-table tbody tr")
    assert 0 < len(rows) <= 25
    shot(d, "time-travel")
    assert console_errors(d) == []


def test_a_table_location_alone_opens_its_page(browser, sample, tmp_path):
    from lamina.ui.api import Explorer
    from lamina.ui.server import start_server, url_of

    server = start_server(Explorer(sample["table"].uri))
    try:
        load(browser, url_of(server), "table")  # the one table's page, straight away
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith("orders")
        assert console_errors(browser) == []
    finally:
        server.shutdown()
        server.server_close()
