"""A harness that talks to its model a lot: CHATTY_CALLS model calls per turn, one
conversation for the whole session, each call adding a user message of CHATTY_BYTES
(2 KB) and the assistant's answer. Stdlib + the harness SDK only."""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from episodes.harness import sdk

CALLS = int(os.environ.get("CHATTY_CALLS", "10"))
SIZE = int(os.environ.get("CHATTY_BYTES", "2048"))
URL = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
HEADERS = {
    "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
    "Content-Type": "application/json",
}
messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a patient agent."}]


def _filler(n: int) -> str:
    words = (f"step{n}-word{i}" for i in range(SIZE))
    return " ".join(words)[:SIZE]


def handle(turn: int, message: Any, emit: Any) -> Any:
    for _ in range(CALLS):
        messages.append({"role": "user", "content": _filler(len(messages))})
        body = json.dumps({"model": "m", "messages": messages}).encode()
        req = urllib.request.Request(URL, data=body, headers=HEADERS)
        with urllib.request.urlopen(req, timeout=60) as resp:
            answer = json.loads(resp.read())
        messages.append(answer["choices"][0]["message"])
    return {"calls": CALLS, "messages": len(messages)}


if __name__ == "__main__":
    sdk.serve(handle)
