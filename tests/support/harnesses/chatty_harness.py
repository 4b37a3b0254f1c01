"""A harness that keeps one conversation with its model across turns (stdlib only).

Each turn makes CHATTY_CALLS calls, each adding a user message and the answer. On
the turn named by CHATTY_COMPACT_AT it first compacts the conversation (the system
message and a summary replace the rest), as agents do near their context limit, so
a call extends only part of an earlier conversation. The reply lists, per call, how
many messages it sent.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from episodes.harness import sdk

CALLS = int(os.environ.get("CHATTY_CALLS", "3"))
COMPACT_AT = int(os.environ.get("CHATTY_COMPACT_AT", "-1"))
# How long a call may wait for its answer (a test that holds calls sets it longer).
TIMEOUT_S = float(os.environ.get("CHATTY_TIMEOUT_S", "60"))
URL = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
HEADERS = {
    "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
    "Content-Type": "application/json",
}
messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a patient agent."}]


def handle(turn: int, message: Any, emit: Any) -> Any:
    global messages
    if turn == COMPACT_AT:
        messages = [messages[0], {"role": "user", "content": f"summary of {len(messages)}"}]
    sent = []
    for i in range(CALLS):
        messages.append({"role": "user", "content": f"turn {turn} call {i}: {message} " * 8})
        body = json.dumps({"model": "m", "messages": messages}).encode()
        req = urllib.request.Request(URL, data=body, headers=HEADERS)
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            answer = json.loads(resp.read())
        messages.append(answer["choices"][0]["message"])
        sent.append(len(messages) - 1)
    return {"sent": sent}


if __name__ == "__main__":
    sdk.serve(handle)
