"""A real browser shows an encrypted transcript decoded through the codec server, and
only ciphertext without it.

An episode runs with AES-GCM on (client and worker share `data_converter`). The dev
server's UI is started with `--ui-codec-endpoint` pointing at our codec server: the
first `record_turns` Update on the Event History page shows the turn's message and
reply. Then the same database is served again without the codec endpoint: the same
Update shows no plaintext. Screenshots: ui-codec-decoded.png and ui-codec-encrypted.png
(in the test's tmp dir, or $EPISODES_UI_SCREENSHOTS: `EPISODES_UI_SCREENSHOTS=docs`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import sys
import uuid
from pathlib import Path

from episodes.client import EpisodesClient
from episodes.client.connect import connect
from episodes.client.devserver import DevServer, free_port
from episodes.payloads import AesGcmEncryption, PayloadsConfig, data_converter
from episodes.payloads.codec_server import start_codec_server
from tests.conftest import ROOT
from tests.support.helpers import spec, wait_until
from tests.workflows.test_ui import (
    CHROMEDRIVER,
    CHROMIUM,
    CHROMIUM_FLAGS,
    _ui_answers,
    _until,
    pytestmark,  # noqa: F401 (the same skips: selenium, Chromium and its driver)
)

MARKER = "DECODED-" + uuid.uuid4().hex[:8]
KEYS = {"UI_CODEC_KEYS": "ui1:" + base64.b64encode(b"U" * 32).decode()}
CONFIG = PayloadsConfig(encryption=AesGcmEncryption(keys_env="UI_CODEC_KEYS"))
UPDATE_ROW = "//*[normalize-space(text())='Workflow Execution Update Accepted']"


async def test_ui_decodes_the_transcript_with_the_codec_server_only(tmp_path: Path) -> None:
    from workers.worker import EpisodeWorker, WorkerOptions

    port, ui_port = free_port(), free_port()
    ui = f"http://127.0.0.1:{ui_port}"
    codec = await start_codec_server(CONFIG, "127.0.0.1", 0, ui_origin=ui, environ=KEYS)
    db = tmp_path / "temporal.db"
    out = Path(os.environ.get("EPISODES_UI_SCREENSHOTS") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    server = DevServer(port=port, ui_port=ui_port, db_file=db, ui_codec_endpoint=codec.url)
    await asyncio.to_thread(server.start)
    try:
        client = await connect(
            server.address, timeout_s=30, data_converter=data_converter(CONFIG, environ=KEYS)
        )
        queue = f"ui-codec-{uuid.uuid4().hex[:6]}"
        worker = EpisodeWorker(client, WorkerOptions(task_queue=queue))
        running = asyncio.create_task(worker.run())
        try:
            # Turns slower than the recorder's linger, so the first turn is recorded by a
            # `record_turns` Update (a fast episode's turns all ride the drive's result).
            slow = [
                sys.executable,
                str(ROOT / "tests/support/harnesses/chaos_harness.py"),
                "log",
                "delay=0.5",
            ]
            s = spec(
                name="ui-codec",
                command=slow,
                tasks=[{"id": "t0", "data": {"messages": [MARKER, "bye", "end"]}}],
            )
            result = await EpisodesClient(client, task_queue=queue).run_episode(s, s.tasks[0])
            assert result.termination == "env_done"
        finally:
            worker.request_stop()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        history = await client.get_workflow_handle(result.workflow_id).fetch_history()
        assert all(MARKER.encode() not in e.SerializeToString() for e in history.events)

        assert await wait_until(lambda: asyncio.to_thread(_ui_answers, ui), timeout=30)
        decoded = await asyncio.to_thread(
            _update_page,
            ui,
            result.workflow_id,
            out / "ui-codec-decoded.png",
            tmp_path / "p1",
            True,
        )
        assert MARKER in decoded and "record_turns" in decoded
    finally:
        await asyncio.to_thread(server.stop)
        await codec.aclose()

    # The same history, served again without a codec endpoint.
    plain = DevServer(port=port, ui_port=ui_port, db_file=db)
    await asyncio.to_thread(plain.start)
    try:
        assert await wait_until(lambda: asyncio.to_thread(_ui_answers, ui), timeout=30)
        encrypted = await asyncio.to_thread(
            _update_page,
            ui,
            result.workflow_id,
            out / "ui-codec-encrypted.png",
            tmp_path / "p2",
            False,
        )
    finally:
        await asyncio.to_thread(plain.stop)
    assert "record_turns" in encrypted and MARKER not in encrypted
    assert "binary/encrypted" in encrypted or "YmluYXJ5L2VuY3J5cHRlZA" in encrypted
    for name in ("ui-codec-decoded.png", "ui-codec-encrypted.png"):
        assert (out / name).stat().st_size > 10_000, f"{name} looks empty"


def _update_page(ui: str, wid: str, shot: Path, profile: Path, expect_marker: bool) -> str:
    """Open the episode's Event History, expand its first `record_turns` Update, screenshot."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    assert CHROMIUM and CHROMEDRIVER
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    service = Service(CHROMEDRIVER, log_output=str(profile.parent / f"{profile.name}.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    body = lambda: driver.find_element(By.TAG_NAME, "body").text  # noqa: E731
    try:
        driver.get(f"{ui}/namespaces/default/workflows/{wid}")
        tab = "//a[contains(., 'Event History')]"
        _until(driver, lambda: driver.find_elements(By.XPATH, tab), "the Event History tab")
        driver.find_element(By.XPATH, tab).click()
        _until(driver, lambda: driver.find_elements(By.XPATH, UPDATE_ROW), "a record_turns Update")
        row = driver.find_elements(By.XPATH, UPDATE_ROW)[-1]  # descending: the first Update
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
        row.click()
        _until(driver, lambda: "Accepted Request" in body(), "the Update's request")
        if expect_marker:
            _until(driver, lambda: MARKER in body(), "the decoded turn")
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", row)
        driver.execute_script("window.scrollBy(0, -60)")
        driver.save_screenshot(str(shot))
        return body()
    except Exception:
        with contextlib.suppress(Exception):
            driver.save_screenshot(str(profile.parent / f"{profile.name}-failure.png"))
        raise
    finally:
        driver.quit()
