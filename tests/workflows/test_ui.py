"""A real browser finds an episode in the Temporal UI by a search attribute.

Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium opens
the dev server's UI, filters the workflow list with a search-attribute query, opens
the episode and reads its summary, current details, the drive's activity summary
and its `record_turns` Updates on the timeline.
Screenshots go to the test's tmp dir, or to $EPISODES_UI_SCREENSHOTS when set
(`EPISODES_UI_SCREENSHOTS=docs` refreshes the ones in docs/).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest

from episodes.client import EpisodesClient
from tests.conftest import ROOT
from tests.support.helpers import spec, wait_until

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
CHROMEDRIVER = shutil.which("chromedriver")
# Marks, not a fixture: a skip must come before the session's dev server starts.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("selenium") is None,
        reason="the UI test needs selenium (pip install selenium)",
    ),
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="the UI test needs Chromium and its driver "
        "(Debian: apt-get install chromium chromium-driver)",
    ),
]
# Without the background-networking flags Chromium dials out at start; offline, the
# refused connections break it. A fresh profile keeps runs independent.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--window-size=1400,900",
]
WAIT_S = 60.0


def _ui_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


async def test_ui_finds_the_episode_by_search_attribute(
    client, worker, dev_server, tmp_path
) -> None:
    batch = f"ui-{uuid.uuid4().hex[:6]}"
    # Turns slower than the recorder's linger, so the timeline shows `record_turns`
    # Updates (a fast episode's turns all ride the drive's result).
    slow = [
        sys.executable,
        str(ROOT / "tests/support/harnesses/chaos_harness.py"),
        "log",
        "delay=0.3",
    ]
    s = spec(
        name=batch,
        command=slow,
        tasks=[
            {
                "id": "solved",
                "data": {"messages": ["hello", "world"], "expected": ["hello", "world"]},
            },
            {"id": "missed", "data": {"messages": ["hello", "world"], "expected": ["no", "pe"]}},
        ],
    )
    ec = EpisodesClient(client, task_queue="episodes-test")
    solved, missed = await asyncio.gather(*(ec.run_episode(s, t, batch_id=batch) for t in s.tasks))
    assert (solved.reward, missed.reward) == (1.0, 0.0)
    query = f'EpisodeBatch = "{batch}" AND EpisodeReward >= 0.5'
    # Visibility lags a little behind completion; the browser should not race it.
    assert await wait_until(
        lambda: _count(client, f'EpisodeBatch = "{batch}"', 2), timeout=30, interval=0.3
    )
    ui = dev_server.ui_url
    assert ui is not None
    assert await wait_until(lambda: asyncio.to_thread(_ui_answers, ui), timeout=30, interval=0.5), (
        f"the Temporal UI at {ui} does not answer"
    )

    out = Path(os.environ.get("EPISODES_UI_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    # In a thread: the in-process worker shares this event loop and must stay free to
    # answer the queries the UI sends (current details) while the browser waits.
    seen = await asyncio.to_thread(_drive, ui, query, solved.workflow_id, out, tmp_path / "profile")

    assert missed.workflow_id not in seen["list"], "the reward filter was not applied"
    assert seen["summary"] == "script · task solved · sample 0"
    assert f"batch {batch}" in seen["details"]
    # The UI renders "2/10" with a fraction slash (U+2044); compare the words around it.
    assert seen["current"].startswith("done · turn 2"), seen["current"]
    assert "env_done" in seen["current"] and "last turn (1)" in seen["current"]
    for name in ("ui-list.png", "ui-episode.png", "ui-timeline.png"):
        assert (out / name).stat().st_size > 10_000, f"{name} looks empty"


async def _count(client, query: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    return (await client.count_workflows(query)).count == n


def _drive(ui: str, query: str, wid: str, out: Path, profile: Path) -> dict[str, str]:
    """The browser's part, blocking: returns the texts the checks need."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    assert CHROMIUM and CHROMEDRIVER
    options = webdriver.ChromeOptions()
    # Both paths given, so Selenium Manager never tries to download a browser or driver.
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(CHROMEDRIVER, log_output=str(profile.parent / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT_S)
    seen: dict[str, str] = {}
    try:
        # The UI's list page takes the visibility query in its URL, as typed in its filter bar.
        url = f"{ui}/namespaces/default/workflows?query={urllib.parse.quote(query)}"
        driver.get(url)
        link = f"a[href*='/workflows/{wid}/']"
        _until(driver, lambda: driver.find_elements(By.CSS_SELECTOR, link), f"{wid} in the list")
        seen["list"] = driver.find_element(By.TAG_NAME, "body").text
        driver.save_screenshot(str(out / "ui-list.png"))

        driver.find_element(By.CSS_SELECTOR, link).click()
        body = lambda: driver.find_element(By.TAG_NAME, "body").text  # noqa: E731
        # Activity summaries label the timeline's rows: "<activity> • <summary>"; the
        # drive's Updates, one row per batch of recorded turns, by their name.
        _until(
            driver,
            lambda: "drive • drive from turn 0 (max 10)" in body() and "record_turns" in body(),
            "the drive and its record_turns Updates on the timeline",
        )
        timeline = driver.find_element(By.XPATH, "//h2[normalize-space()='Timeline']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", timeline)
        driver.save_screenshot(str(out / "ui-timeline.png"))

        tab = driver.find_element(By.CSS_SELECTOR, "[data-testid='user-metadata-tab']")
        # Clear of the sticky top bar, which would otherwise take the click.
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", tab)
        tab.click()
        # Summary, details and current details are markdown, each rendered in an iframe.
        # Current details come from a query the worker answers, so they may lag the rest.
        for key, frame, ready in [
            ("summary", "user-metadata-summary", "task"),
            ("details", "user-metadata-details", "batch"),
            ("current", "user-metadata-current-details", "last turn"),
        ]:
            _until(driver, lambda f=frame, r=ready: r in _frame_text(driver, f), f"the {key} panel")
            seen[key] = _frame_text(driver, frame)
        driver.save_screenshot(str(out / "ui-episode.png"))
    except Exception:
        with contextlib.suppress(Exception):  # evidence only; never mask the real failure
            driver.save_screenshot(str(profile.parent / "failure.png"))
        raise
    finally:
        driver.quit()
    return seen


def _frame_text(driver, frame_id: str) -> str:  # type: ignore[no-untyped-def]
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        driver.switch_to.frame(driver.find_element(By.ID, frame_id))
        return driver.find_element(By.TAG_NAME, "body").text.strip()
    except WebDriverException:
        return ""
    finally:
        driver.switch_to.default_content()


def _until(driver, pred, what: str) -> None:  # type: ignore[no-untyped-def]
    from selenium.common.exceptions import WebDriverException

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except WebDriverException:
            pass  # the page re-rendered under us; look again
        time.sleep(0.25)
    raise AssertionError(f"the UI never showed {what} within {WAIT_S:.0f} s ({driver.current_url})")
