"""A deterministic tokenizer and a ChatML-style chat template for the scripted upstream.

With a real model, the next call's prompt ids begin with the previous call's prompt
ids and its sampled ids (the *extension property*), as long as the chat template
renders the earlier assistant turn exactly as it was sampled. Trainers merge such
calls into one sample (`episodes.training.samples`); templates that rewrite history
(Qwen3 and DeepSeek-R1 drop earlier reasoning) break it, and the sample splits. This
module gives the scripted upstream both behaviours, with no model and no download:

    <|im_start|>system\\n# Tools\\n{tool JSON, one a line}<|im_end|>\\n      (with tools)
    <|im_start|>{role}\\n{body}<|im_end|>\\n                               (each message)
    <|im_start|>assistant\\n                                               (generation prompt)

An assistant body is its content, then per tool call `<tool_call>\\n{name}\\n{arguments}
\\n</tool_call>`; a tool's body is `<tool_response>\\n{content}\\n</tool_response>`. A
sampled completion is the assistant body's tokens plus `<|im_end|>` (the stop token, as
vLLM includes it in `token_ids`). `drop_reasoning` strips `<think>...</think>` from
every earlier assistant message, as DeepSeek-R1's template does (Qwen3's keeps the
reasoning after the last user message: not modelled).

Tokens: the special strings below, then per remaining text a newline, or a word with
the horizontal whitespace before it, or trailing whitespace. Every template boundary
is a special token or a newline, so tokenizing the rendered prompt gives exactly the
concatenation of the pieces' tokens, and the property holds. Ids: specials are small
fixed ids; a word's id is a CRC32 of its text (stable across runs and processes).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

SPECIALS: dict[str, int] = {
    "<|endoftext|>": 0,
    "<|im_start|>": 1,
    "<|im_end|>": 2,
    "<think>": 3,
    "</think>": 4,
    "<tool_call>": 5,
    "</tool_call>": 6,
    "<tool_response>": 7,
    "</tool_response>": 8,
}
END = "<|im_end|>"
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
_PIECE_RE = re.compile(r"\n|[^\S\n]*\S+|[^\S\n]+")
_THINK_RE = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
FIRST_WORD_ID = 100


def tokenize(text: str) -> list[str]:
    """The token pieces of `text` (they join back to it)."""
    pieces: list[str] = []
    for part in _SPECIAL_RE.split(text):
        if part in SPECIALS:
            pieces.append(part)
        elif part:
            pieces.extend(_PIECE_RE.findall(part))
    return pieces


def piece_id(piece: str) -> int:
    special = SPECIALS.get(piece)
    if special is not None:
        return special
    return FIRST_WORD_ID + zlib.crc32(piece.encode("utf-8")) % 150_000


def text_of(content: Any) -> str:
    """A message's content as text (a string, or a list of `{"type": "text"}` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


# A streamed completion's pieces: the delta a chunk carries, and the tokens it carries.
Segment = tuple[dict[str, Any], list[str]]


@dataclass(frozen=True)
class ChatTemplate:
    """`<|im_start|>role ... <|im_end|>` rendering (see the module doc)."""

    # Strip `<think>...</think>` from earlier assistant turns (breaks the extension property).
    drop_reasoning: bool = False

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[str]:
        """The prompt's token pieces, ending with the generation prompt."""
        text = ""
        if tools:
            listed = "\n".join(json.dumps(t, sort_keys=True) for t in tools)
            text += f"<|im_start|>system\n# Tools\n{listed}{END}\n"
        for m in messages:
            text += f"<|im_start|>{m.get('role')}\n{self._body(m)}{END}\n"
        return tokenize(text + "<|im_start|>assistant\n")

    def _body(self, m: dict[str, Any]) -> str:
        content = text_of(m.get("content"))
        role = m.get("role")
        if role == "tool":
            return f"<tool_response>\n{content}\n</tool_response>"
        if role != "assistant":
            return content
        if self.drop_reasoning:
            content = _THINK_RE.sub("", content)
        calls = [c.get("function") or {} for c in m.get("tool_calls") or []]
        return content + "".join(_call_text(c.get("name"), c.get("arguments")) for c in calls)

    def completion(self, content: str | None, calls: list[dict[str, Any]]) -> list[Segment]:
        """What the model samples for an assistant turn, as streamed segments: one per
        content or argument token, the tool calls' framing with their heads, then the
        stop token. `calls` are OpenAI tool calls (`id`, `function.name/arguments`)."""
        segments: list[Segment] = [({"content": p}, [p]) for p in tokenize(content or "")]
        for i, call in enumerate(calls):
            fn = call["function"]
            head = {"index": i, "id": call["id"], "type": "function"}
            head["function"] = {"name": fn["name"], "arguments": ""}
            segments.append(({"tool_calls": [head]}, tokenize(f"<tool_call>\n{fn['name']}\n")))
            for p in tokenize(fn["arguments"]):
                segments.append(({"tool_calls": [{"index": i, "function": {"arguments": p}}]}, [p]))
            segments.append(({}, tokenize("\n</tool_call>")))
        segments.append(({}, [END]))
        return segments


def _call_text(name: Any, arguments: Any) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return f"<tool_call>\n{name}\n{args}\n</tool_call>"
