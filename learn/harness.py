"""The guess-number player: each turn asks the model for a number, through the session's proxy.

    {python} /path/to/learn/harness.py       (the spec names this file; stdlib + the sdk)

The conversation lives in this process across turns: each env message (its JSON, as
the env sent it) is appended as a user message, the model is called once with the
whole conversation (`OPENAI_BASE_URL`, `OPENAI_API_KEY`: the session's model proxy),
and its answer is appended as the assistant message. The reply is the answer as an
integer (the env counts anything else as an invalid guess).
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any

from episodes.harness import sdk


class Player:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.url = os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions"
        self.key = os.environ.get("OPENAI_API_KEY", "")

    def handle(self, turn: int, message: Any, emit: Any) -> Any:
        self.messages.append({"role": "user", "content": json.dumps(message)})
        body = json.dumps({"model": "policy", "messages": self.messages}).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"}
        request = urllib.request.Request(self.url, data=body, headers=headers)
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.load(response)
        content = answer["choices"][0]["message"]["content"] or ""
        self.messages.append({"role": "assistant", "content": content})
        try:
            return int(content)
        except ValueError:
            return content


if __name__ == "__main__":
    sdk.serve(Player().handle)
