"""Old home of the agent services, kept only so that old import paths still work.

What was here moved by concept: the path of one model call to `episodes.model` (the
scripted upstream to `episodes.model.scripted`), the MCP tool bridge to
`episodes.tools`, how a box reaches the worker's services to `episodes.tunnel`, one
session's services to `episodes.session.services`, exact replay to `episodes.replay`
and the listening sockets to `episodes.net`. Import from there.
"""

from episodes._moved import alias

alias(
    __name__,
    {
        "bridge": "episodes.tools.bridge",
        "bridge_http": "episodes.tools.bridge_http",
        "chat_template": "episodes.model.scripted.chat_template",
        "conversation": "episodes.model.conversation",
        "fastjson": "episodes.model.fastjson",
        "fleet": "episodes.model.fleet",
        "limiter": "episodes.model.limiter",
        "net": "episodes.net",
        "proxy": "episodes.model.proxy",
        "proxy_record": "episodes.model.record",
        "relay": "episodes.tunnel.relay",
        "replay": "episodes.replay",
        "scripted": "episodes.model.scripted.server",
        "scripted_policies": "episodes.model.scripted.policies",
        "sender": "episodes.model.sender",
        "serve": "episodes.model.serve",
        "serve_request": "episodes.model.serve",
        "services": "episodes.session.services",
        "stdio_relay": "episodes.tunnel.stdio_relay",
        "stream": "episodes.model.stream",
        "tunnel": "episodes.tunnel.stdio",
        "upstream": "episodes.model.upstream",
        "upstream_aiohttp": "episodes.model.upstream_aiohttp",
        "wire": "episodes.model.wire",
    },
)
