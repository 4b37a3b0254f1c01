"""A real browser reads batches and episodes in the episodes viewer (`episodes view`).

Headless Chromium (as in test_ui.py) against the viewer served in this process on the
session's dev server and worker: a batch page with its figures and a search hit, an
agent episode's tool and model calls (tokens colored by logprob), a running episode
that grows while the page is open, and a 1,000-turn episode that opens on its first
page and pages in the rest. Screenshots go to the test's tmp dir, or to
$EPISODES_UI_SCREENSHOTS (`EPISODES_UI_SCREENSHOTS=docs` refreshes docs/viewer-*.png).
The browser runs in a thread: the viewer and the worker share this event loop.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from episodes.client import EpisodesClient
from episodes.viewer import serve
from tests.conftest import ROOT
from tests.support.envs import ENDLESS
from tests.support.helpers import spec, wait_until
from tests.workflows.test_ui import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS, WAIT_S
from tests.workflows.test_ui import pytestmark as ui_marks

pytestmark = [*ui_marks, pytest.mark.timeout(300)]
SLOW = [sys.executable, str(ROOT / "tests/support/harnesses/chaos_harness.py"), "log"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert CHROMIUM and CHROMEDRIVER
    profile = tmp_path_factory.mktemp("chromium")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(CHROMEDRIVER, log_output=str(profile / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = Path(os.environ.get("EPISODES_UI_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture
async def viewer_url(client) -> Any:  # type: ignore[no-untyped-def]
    async with serve(client, port=0) as running:
        yield running.url


def _body(driver: Any) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def _until(driver: Any, pred: Callable[[], Any], what: str) -> Any:
    """`pred` true on the page its script rendered (not the server's first view)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            value = not driver.find_elements(By.CSS_SELECTOR, ".first-view") and pred()
            if value:
                return value
        except WebDriverException:
            pass  # the page re-rendered under us; look again
        time.sleep(0.2)
    raise AssertionError(
        f"the viewer never showed {what} within {WAIT_S:.0f} s: {_body(driver)[:800]}"
    )


def _page(url: str, path: str) -> str:
    return url + path


async def _indexed(client, query: str, n: int) -> bool:  # type: ignore[no-untyped-def]
    return (await client.count_workflows(query)).count == n


async def test_batch_page_figures_and_a_search_hit(client, worker, viewer_url, browser, shots):
    name = f"vb-{uuid.uuid4().hex[:6]}"
    s = spec(
        name=name,
        tasks=[
            {"id": "add", "data": {"messages": ["2+2", "3+3"], "expected": ["2+2", "3+3"]}},
            {"id": "echo", "data": {"messages": ["needle", "hay"], "expected": ["needle", "x"]}},
            {
                "id": "count",
                "data": {"messages": ["one", "two", "three"], "expected": ["no", "no", "no"]},
            },
        ],
    )
    ec = EpisodesClient(client, task_queue="episodes-test")
    await asyncio.gather(
        *(ec.run_episode(s, t, k, batch_id=name) for t in s.tasks for k in range(3))
    )
    q = f'EpisodeBatch = "{name}" AND EpisodeTermination = "env_done"'
    assert await wait_until(lambda: _indexed(client, q, 9), timeout=30, interval=0.3)

    def drive() -> dict[str, str]:
        from selenium.webdriver.common.by import By

        seen = {}
        browser.get(_page(viewer_url, "/"))
        _until(browser, lambda: name in _body(browser), "the batch on the index page")
        browser.save_screenshot(str(shots / "viewer-index.png"))
        browser.find_element(By.LINK_TEXT, name).click()
        _until(
            browser,
            lambda: "pass@1" in _body(browser) and "Tasks (3)" in _body(browser),
            "the batch's figures",
        )
        seen["batch"] = _body(browser)
        # The script's twins of markup.py's histogram, counts and JSON, in the browser.
        seen["equal"] = browser.execute_script(
            "return bars({counts: [9], edges: [1, 1]}, (x) => x.toFixed(3)).outerHTML"
        )
        seen["spread"] = browser.execute_script(
            "return bars({counts: [4, 5], edges: [0, 0.5, 1]}, (x) => x.toFixed(3)).outerHTML"
        )
        seen["words"] = browser.execute_script(
            "return [plural(1, 'batch'), plural(2, 'batch'), prettyJson({a: [1, 2, 3]})]"
        )
        browser.save_screenshot(str(shots / "viewer-batch.png"))
        box = browser.find_element(By.CSS_SELECTOR, "input[name=q]")
        box.send_keys("needle")
        box.submit()
        _until(browser, lambda: "hits in 9 of 9 episodes" in _body(browser), "the search's end")
        seen["hits"] = browser.find_element(By.ID, "hits").text
        browser.execute_script("document.getElementById('hits').scrollIntoView({block:'center'})")
        browser.save_screenshot(str(shots / "viewer-search.png"))
        browser.find_element(By.CSS_SELECTOR, "#hits a").click()
        _until(browser, lambda: "Conversation" in _body(browser), "the hit's episode")
        seen["episode"] = browser.current_url
        return seen

    seen = await asyncio.to_thread(drive)
    assert "9\nepisodes" in seen["batch"] and "env_done" in seen["batch"]
    assert "0.333\npass@1" in seen["batch"], seen["batch"][:400]  # only "add" passes
    assert seen["equal"] == (
        '<div><div class="bars one"><div style="height:100.0%" title="1.000: 9"></div></div>'
        '<div class="axis one"><span>1.000</span></div></div>'
    )
    assert seen["spread"].count("<span>") == 2 and 'class="bars one"' not in seen["spread"]
    assert seen["words"] == ["1 batch", "2 batches", '{\n "a": [1, 2, 3]\n}']
    assert f"{name}.echo.s0 · turn 0 · message" in seen["hits"]
    assert "6 hits in 9 of 9 episodes" in seen["hits"]  # echo's 3 samples: message, reply
    assert urllib.parse.unquote(seen["episode"]).endswith(f"/episode/{name}.echo.s0#turn-0")


async def test_agent_episode_shows_tool_and_model_calls(
    client, worker, viewer_url, browser, shots, monkeypatch
):
    from episodes.model.scripted.server import ScriptedUpstream, kv_policy
    from episodes.types.spec import parse_spec
    from tests.episodes.session.test_agent_session import UPSTREAM_KEY, agent_spec

    monkeypatch.setenv("EPISODES_TEST_UPSTREAM_KEY", UPSTREAM_KEY)
    async with ScriptedUpstream(policy=kv_policy, key=UPSTREAM_KEY) as upstream:
        s = parse_spec({**agent_spec(upstream.base_url), "name": f"vk-{uuid.uuid4().hex[:6]}"})
        r = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert r.termination == "env_done", r.error

    def drive() -> dict[str, Any]:
        from selenium.webdriver.common.by import By

        browser.get(_page(viewer_url, "/episode/" + urllib.parse.quote(r.workflow_id, safe="")))
        _until(browser, lambda: "tool put(" in _body(browser), "the tool calls")
        # Open the first model call and the first tool call: their bodies show.
        for kind in ("model", "tool"):
            browser.execute_script(
                "document.querySelector('summary .kind.' + arguments[0])"
                ".closest('details').open = true",
                kind,
            )
        tokens = browser.find_elements(By.CSS_SELECTOR, ".tokens span[title^='logprob']")
        browser.execute_script(
            "document.querySelector('.kind.model').closest('details')"
            ".scrollIntoView({block: 'start'}); window.scrollBy(0, -90)"
        )
        browser.save_screenshot(str(shots / "viewer-episode.png"))
        ui = browser.find_element(By.PARTIAL_LINK_TEXT, "Temporal UI").get_attribute("href")
        return {"body": _body(browser), "tokens": len(tokens), "ui": ui}

    seen = await asyncio.to_thread(drive)
    assert "env_done" in seen["body"] and "tool put(" in seen["body"]
    assert "model scripted" in seen["body"] and "tokens" in seen["body"]
    assert seen["tokens"] > 0, "the sampled tokens are shown with their logprobs"
    assert seen["ui"].endswith(
        "/namespaces/default/workflows/" + urllib.parse.quote(r.workflow_id, safe="")
    )


async def test_running_episode_updates_as_turns_arrive(client, worker, viewer_url, browser, shots):
    messages = [f"live-{i}" for i in range(10)]
    s = spec(
        name=f"vr-{uuid.uuid4().hex[:6]}",
        command=[*SLOW, "delay=0.6"],
        tasks=[{"id": "t", "data": {"messages": messages, "expected": messages}}],
    )
    handle = await EpisodesClient(client, task_queue="episodes-test").start_episode(s, s.tasks[0])

    def drive() -> dict[str, Any]:
        from selenium.webdriver.common.by import By

        browser.get(_page(viewer_url, "/episode/" + urllib.parse.quote(handle.id, safe="")))
        _until(browser, lambda: "Conversation" in _body(browser), "the running episode")
        first = len(browser.find_elements(By.CSS_SELECTOR, "section.turn"))
        _until(browser, lambda: "live: running" in _body(browser), "the live status")
        # New turns appear without a reload: the page keeps its element.
        marker = browser.execute_script("return window.__marker = Math.random()")
        _until(
            browser,
            lambda: len(browser.find_elements(By.CSS_SELECTOR, "section.turn")) >= first + 2,
            "turns arriving while the page is open",
        )
        browser.save_screenshot(str(shots / "viewer-live.png"))
        same_page = browser.execute_script("return window.__marker") == marker
        # When the episode ends the page reloads once with its outcome.
        _until(browser, lambda: "Outcome" in _body(browser), "the outcome after the end")
        return {"first": first, "same_page": same_page, "body": _body(browser)}

    seen = await asyncio.to_thread(drive)
    await handle.result()
    assert seen["first"] < len(messages) and seen["same_page"]
    assert "env_done" in seen["body"] and "live-9" in seen["body"]


async def test_a_1000_turn_episode_opens_on_its_first_page(
    client, worker, viewer_url, browser, shots
):
    s = spec(name=f"vt-{uuid.uuid4().hex[:6]}", env=ENDLESS, max_turns=1000, tasks=[{"id": "t"}])
    r = await EpisodesClient(client, task_queue="episodes-test").run_episode(s, s.tasks[0])
    assert (r.termination, r.turns) == ("max_turns", 1000)

    def drive() -> dict[str, Any]:
        from selenium.webdriver.common.by import By

        turns = lambda: browser.find_elements(By.CSS_SELECTOR, "section.turn")  # noqa: E731
        browser.get(_page(viewer_url, "/episode/" + urllib.parse.quote(r.workflow_id, safe="")))
        _until(
            browser,
            lambda: "Show 50 more turns (50 of 1000 shown)" in _body(browser),
            "the first page and the pager",
        )
        first = len(turns())
        browser.save_screenshot(str(shots / "viewer-long.png"))
        browser.find_element(By.ID, "more").click()
        _until(browser, lambda: len(turns()) >= 100, "the second page")
        # Straight to a late turn by its address (what a search hit links to).
        browser.get(
            _page(
                viewer_url, "/episode/" + urllib.parse.quote(r.workflow_id, safe="") + "#turn-700"
            )
        )
        _until(browser, lambda: browser.find_elements(By.ID, "turn-700"), "turn 700")
        return {"first": first, "late": browser.find_element(By.ID, "turn-700").text}

    seen = await asyncio.to_thread(drive)
    assert seen["first"] == 50
    assert "Turn 700" in seen["late"] and "m700" in seen["late"]
