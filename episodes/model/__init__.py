"""The path of one model call: the harness's request through the session's proxy to an
inference upstream and back, recorded.

`proxy` (the per-session OpenAI-compatible endpoint: the token, the forced model and
params, the record) on `serve` (its HTTP/1.1 server); `record` and `conversation` (what a
call's record holds: the messages it adds); `sender` (retries, the key, moves between
replicas) over `fleet` (the inference upstreams one worker sees: load, health, each one's
adaptive `limiter`); `upstream` / `upstream_aiohttp` (the HTTP client) on `wire` (one
upstream connection's bytes); `stream` (server-sent events folded into one response;
stdlib-only, the LLM harness imports it in the box) and `fastjson` (the JSON on that
path). `scripted/` is a real OpenAI-compatible server with no model behind it (tests,
benchmarks, the demo). Exact replay of recorded calls is `episodes.replay`.

Only this docstring here: the image ships this package's `stream` with an empty
`__init__`, and `scripted.chat_template` is imported without the servers.
"""
