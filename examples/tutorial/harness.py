"""The tutorial's harness in Python (docs/tutorial.md): keeps a running total.

One process lives for the whole episode, so `total` is its memory across turns. When
the spec names a `model`, the session's proxy sets OPENAI_BASE_URL and the harness
asks the model for each sum instead (every call is recorded, with its token data).
"""

import json
import os
import re
import urllib.request

from episodes.harness import sdk

total = 0


def ask_model(question):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(
            {"model": "any", "messages": [{"role": "user", "content": question}]}
        ).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],  # the session's token
        },
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def handle(turn, message, emit):
    global total
    question = f"What is {total} + {message['add']}?"
    emit({"thinking": question})  # an event: streamed, and kept in the transcript
    if "OPENAI_BASE_URL" in os.environ:
        numbers = re.findall(r"-?\d+", ask_model(question))
        total = int(numbers[-1]) if numbers else total
    else:
        total += message["add"]
    return {"total": total}  # the reply


sdk.serve(handle)
