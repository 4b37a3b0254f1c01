"""The canary: secrets reach the harness (and the model upstream) and nothing else.

A dev server of its own, a real `episodes worker` subprocess holding two canary
secrets in its environment (and a third in a file), and the real `episodes run`
CLI (which has no canary at all) running: a harness that proves it got its secrets
(writes them to a file the test reads, replies with their sha256) and leaks them in
its reply, an event and stderr; one that prints its whole environment and crashes
mid-episode; one that does so before `ready`; and a model-proxy agent whose
upstream demands the canary key. Then every history is exported with the real
`temporal workflow show --output json`, its base64 payloads decoded, and the
exports, the worker's and CLI's output, the server's log and its SQLite files are
searched for each canary, plain and base64-encoded at the three alignments. The scan
is proven by finding what must be there (each secret's sha256 inside a decoded
payload, the `***` mask, the secret's reference name).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from episodes.client.devserver import DevServer, temporal_binary
from episodes.model.scripted.server import ScriptedUpstream, kv_policy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]
HARNESS = ROOT / "tests" / "support" / "harnesses" / "payload_harness.py"
CANARY_ENV = "canary-env-" + uuid.uuid4().hex  # in the worker's environment
CANARY_FILE = "canary-file-" + uuid.uuid4().hex  # in a file only the worker reads
CANARY_UPSTREAM = "sk-canary-" + uuid.uuid4().hex  # the model's upstream key
CANARIES = {"env": CANARY_ENV, "file": CANARY_FILE, "upstream": CANARY_UPSTREAM}


def b64_needles(secret: str) -> list[bytes]:
    """The secret base64-encoded at each of the 3 byte alignments: the characters that
    depend only on the secret's bytes, whatever surrounds it."""
    raw = secret.encode()
    out = []
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw)
        begin = -(-8 * shift // 6)
        end = 8 * (shift + len(raw)) // 6
        out.append(enc[begin:end])
    return out


def test_b64_needles_find_the_secret_however_it_is_aligned() -> None:
    for prefix in (b"", b"a", b"ab", b"abc"):
        blob = base64.b64encode(prefix + CANARY_ENV.encode() + b"tail")
        assert any(n in blob for n in b64_needles(CANARY_ENV)), prefix


def found(haystack: bytes, secret: str) -> list[str]:
    hits = []
    if secret.encode() in haystack:
        hits.append("plain")
    hits += [f"base64@{i}" for i, n in enumerate(b64_needles(secret)) if n in haystack]
    return hits


def decoded_payloads(node: Any, out: list[bytes]) -> list[bytes]:
    """The base64 `data` (and metadata values) of every payload in proto JSON, decoded."""
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict) and isinstance(node.get("data"), str):
            out.append(base64.b64decode(node["data"]))
            out += [base64.b64decode(v) for v in node["metadata"].values() if isinstance(v, str)]
        for value in node.values():
            decoded_payloads(value, out)
    elif isinstance(node, list):
        for value in node:
            decoded_payloads(value, out)
    return out


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _cli(
    args: list[str], log: Path, env: dict[str, str], timeout: float = 120, code: int = 0
) -> str:
    """The real `episodes` CLI; its stdout and stderr are appended to `log`. `code`: the
    exit code it must end with."""
    done = subprocess.run(
        [sys.executable, "-m", "episodes.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=log.parent,
    )
    with log.open("a") as f:
        f.write(f"$ episodes {' '.join(args)}\n{done.stdout}\n{done.stderr}\n")
    assert done.returncode == code, done.stderr[-3000:]
    return done.stdout + done.stderr


def _temporal(address: str, *args: str) -> str:
    done = subprocess.run(
        [temporal_binary(), *args, "--address", address, "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _specs(tmp: Path, proofs: Path, upstream_url: str) -> dict[str, Path]:
    secrets = {"APP_TOKEN": {"env": "CANARY_SOURCE"}, "DB_PASSWORD": {"file": str(tmp / "pw")}}
    harness = {
        "command": [sys.executable, str(HARNESS)],
        "secrets": secrets,
        # Not a secret, but named like one: the CLI warns about it.
        "env": {"PUBLIC_TOKEN": "not-a-secret"},
        "ready_timeout_s": 20,
        # The harness proves it got its secrets by writing them to the test's folder,
        # which a sandbox cannot reach: a process-group box (what a secret reaches on
        # the sandbox is the containment test's, tests/episodes/runtimes/test_containment.py).
        "runtime": {"type": "subprocess", "isolation": "none"},
    }

    def leak(var: str, crash: bool = False) -> dict[str, Any]:
        return {
            "secret": var,
            "proof_file": str(proofs / f"{var}-{crash}"),
            "leak": True,
            "crash": crash,
        }

    specs = {
        "leaky": {
            "name": "canary-leaky",
            "env": "script",
            "tasks": [
                {"id": "leak", "data": {"messages": [leak("APP_TOKEN"), leak("DB_PASSWORD")]}},
                {"id": "crash", "data": {"messages": [leak("APP_TOKEN", crash=True)]}},
            ],
            "harness": harness,
        },
        "start-crash": {
            "name": "canary-start-crash",
            "env": "script",
            "tasks": [{"id": "start", "data": {"messages": ["never sent"]}}],
            "harness": {**harness, "command": [*harness["command"], "crash-at-start"]},
        },
        "agent": {
            "name": "canary-agent",
            "env": "kv-store",
            "tasks": [{"id": "ab", "data": {"goal": {"a": "1", "b": "2"}}}],
            "max_turns": 4,
            "harness": {
                "command": "{python} -m episodes.harness.reference.llm --max-steps 8",
                "secrets": secrets,
            },
            "model": {
                "base_url": upstream_url,
                "model": "scripted",
                "api_key_env": "CANARY_UPSTREAM_KEY",
            },
        },
    }
    paths = {}
    for key, data in specs.items():
        paths[key] = tmp / f"{key}.yaml"
        paths[key].write_text(yaml.safe_dump(data))
    return paths


async def test_canary_secrets_reach_the_harness_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(CANARY_FILE + "\n")
    proofs = tmp_path / "proofs"
    proofs.mkdir()
    server = DevServer(
        auto_port=True, db_file=tmp_path / "temporal.db", log_file=tmp_path / "server.log"
    )
    await asyncio.to_thread(server.start)
    queue = f"canary-{uuid.uuid4().hex[:6]}"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("EPISODES_")}
    worker_log = tmp_path / "worker.log"
    cli_log = tmp_path / "cli.log"
    worker_env = {**base_env, "CANARY_SOURCE": CANARY_ENV, "CANARY_UPSTREAM_KEY": CANARY_UPSTREAM}
    run_args = ["--address", server.address, "--task-queue", queue]
    worker = None
    try:
        with worker_log.open("wb") as out:
            worker = subprocess.Popen(
                [*[sys.executable, "-m", "episodes.cli.main", "worker"], *run_args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=worker_env,
                cwd=tmp_path,
            )
        deadline = time.monotonic() + 30
        while b"worker " not in worker_log.read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, worker_log.read_text()
            await asyncio.sleep(0.1)

        async with ScriptedUpstream(policy=kv_policy, key=CANARY_UPSTREAM) as upstream:
            specs = _specs(tmp_path, proofs, upstream.base_url)
            outputs = {}
            for key, path in specs.items():
                outputs[key] = await asyncio.to_thread(
                    _cli,
                    ["run", str(path), *run_args, "--out", str(tmp_path / f"{key}.jsonl")],
                    cli_log,
                    base_env,
                    # Every episode of the crashing spec fails: the run says so (exit 1).
                    code=1 if key == "start-crash" else 0,
                )
            # The upstream got the key the worker holds (a wrong or missing one is a 401).
            chats = upstream.chat_requests
            assert chats and all(
                r["headers"].get("Authorization") == f"Bearer {CANARY_UPSTREAM}" for r in chats
            )

        results = {
            key: [json.loads(line) for line in (tmp_path / f"{key}.jsonl").read_text().splitlines()]
            for key in specs
        }
        by_task = {r["task_id"]: r for rs in results.values() for r in rs}
        assert by_task["leak"]["termination"] == "env_done"
        assert by_task["crash"]["termination"] == "harness_crashed"
        assert "***" in by_task["crash"]["error"]
        assert by_task["ab"]["termination"] == "env_done" and by_task["ab"]["reward"] == 1.0
        # The harness received each secret: it wrote them where the test reads them.
        assert (proofs / "APP_TOKEN-False").read_text() == CANARY_ENV
        assert (proofs / "DB_PASSWORD-False").read_text() == CANARY_FILE
        assert (proofs / "APP_TOKEN-True").read_text() == CANARY_ENV
        # The CLI warned about the secret-looking inline variable, in one line.
        assert "warning: " in outputs["leaky"] and "harness.env.PUBLIC_TOKEN" in outputs["leaky"]
        # A harness that dumps its environment and dies before `ready`: an outcome, scrubbed.
        start = results["start-crash"][0]
        assert start["termination"] == "harness_start_failed" and "***" in start["error"]
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)

    try:
        # Every run of every workflow on this server, exported by the real Temporal CLI.
        listed = json.loads(_temporal(server.address, "workflow", "list") or "[]")
        listed = listed if isinstance(listed, list) else [listed]
        assert len(listed) >= 4
        exports: list[bytes] = []
        for wf in listed:
            ex = wf["execution"]
            shown = _temporal(
                server.address, "workflow", "show", "-w", ex["workflowId"], "-r", ex["runId"]
            )
            exports.append(shown.encode())
            exports += decoded_payloads(json.loads(shown), [])
    finally:
        await asyncio.to_thread(server.stop)  # closes the database: everything is on disk

    history_text = b"\n".join(exports)
    db_bytes = b"".join(p.read_bytes() for p in tmp_path.glob("temporal.db*"))
    places = {
        "histories (CLI JSON + decoded payloads)": history_text,
        "worker log": worker_log.read_bytes(),
        "CLI output": cli_log.read_bytes(),
        "dev server log": (tmp_path / "server.log").read_bytes(),
        "dev server SQLite": db_bytes,
    }
    # The scan works: what must be there is found, in the decoded payloads and on disk.
    for must in (_sha(CANARY_ENV), _sha(CANARY_FILE)):
        assert must.encode() in history_text
        assert must.encode() in db_bytes
    assert b"the secret is ***" in history_text
    assert b"CANARY_SOURCE" in history_text  # the spec carries the reference
    assert b"canary-leaky" in places["CLI output"] and b"worker" in places["worker log"]
    leaks = {
        (where, name, how)
        for where, data in places.items()
        for name, secret in CANARIES.items()
        for how in found(data, secret)
    }
    assert not leaks, sorted(leaks)
    print(
        f"\ncanary scan: {len(listed)} workflow runs, {len(history_text)} bytes of histories, "
        f"{len(db_bytes)} bytes of SQLite, logs "
        + ", ".join(f"{k}={len(v)}B" for k, v in places.items() if not k.startswith("hist"))
    )
