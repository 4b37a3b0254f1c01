"""The scripted upstream's chat template: real prompt tokenization, extension across turns."""

from __future__ import annotations

import json

import openai
import pytest

from episodes.model.scripted.chat_template import SPECIALS, ChatTemplate, piece_id, tokenize
from episodes.model.scripted.server import ScriptedUpstream

pytestmark = pytest.mark.timeout(60)


def test_tokenize_joins_back_and_keeps_specials_and_newlines_apart() -> None:
    text = "<|im_start|>user\n  hi  there\n<think>x</think>ok <|im_end|>\n"
    pieces = tokenize(text)
    assert "".join(pieces) == text
    assert pieces[:4] == ["<|im_start|>", "user", "\n", "  hi"]
    assert "<think>" in pieces and piece_id("<|im_end|>") == SPECIALS["<|im_end|>"]
    assert piece_id("word") == piece_id("word") >= 100


def test_rendering_an_assistant_turn_repeats_what_was_sampled() -> None:
    t = ChatTemplate()
    call = {"id": "c1", "function": {"name": "put", "arguments": '{"key": "a"}'}}
    sampled = [p for _, seg in t.completion("let me", [call]) for p in seg]
    history = [{"role": "user", "content": "go"}]
    prompt = t.prompt(history, [])
    assistant = {"role": "assistant", "content": "let me", "tool_calls": [call]}
    after = t.prompt([*history, assistant, {"role": "tool", "content": "ok"}], [])
    assert after[: len(prompt) + len(sampled)] == prompt + sampled
    # Dropping reasoning rewrites the earlier turn: the next prompt no longer extends it.
    drop = ChatTemplate(drop_reasoning=True)
    sampled = [p for _, seg in drop.completion("<think>hm</think>yes", []) for p in seg]
    again = drop.prompt([*history, {"role": "assistant", "content": "<think>hm</think>yes"}], [])
    assert again[: len(prompt) + len(sampled)] != prompt + sampled
    assert "<think>" not in again


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_serves_template_ids_streamed_or_not(stream: bool) -> None:
    step = {"content": "ok", "tool_calls": [{"name": "put", "arguments": {"key": "a"}}]}
    async with ScriptedUpstream([step], template=ChatTemplate()) as up:
        client = openai.AsyncOpenAI(base_url=up.base_url, api_key="k", max_retries=0)
        extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
        kwargs = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": True}
        if stream:
            chunks = [
                c.model_dump()
                async for c in await client.chat.completions.create(
                    stream=True, extra_body=extra, **kwargs
                )
            ]
            from episodes.model.stream import assemble

            answer = assemble(chunks)
        else:
            answer = (await client.chat.completions.create(extra_body=extra, **kwargs)).model_dump()
    t = ChatTemplate()
    choice = answer["choices"][0]
    args = choice["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"key": "a"}
    expected = [*tokenize(f"ok<tool_call>\nput\n{args}\n</tool_call>"), "<|im_end|>"]
    assert choice["token_ids"] == [piece_id(p) for p in expected]
    assert [e["token"] for e in choice["logprobs"]["content"]] == [
        f"token_id:{piece_id(p)}" for p in expected
    ]
    prompt = t.prompt([{"role": "user", "content": "hi"}], [])
    assert answer["prompt_token_ids"] == [piece_id(p) for p in prompt]
