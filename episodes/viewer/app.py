"""The viewer's web app: a JSON API over Temporal and the static pages that call it.

Pages are plain addresses (`/`, `/batch/<id>`, `/episode/<workflow id>`, `/compare`,
`/compare-batches?a=<batch>&b=<batch>`),
each a static HTML file served with its first view rendered in (`episodes.viewer.pages`:
headless tools and slow machines see content), whose script then reads its address
and fetches the API for the live page. The API (all GET, under `/api/`) reads
visibility, histories through the client's data converter, and the `progress` query:
nothing is stored here.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import quote

from aiohttp import web
from temporalio.client import Client

import episodes.viewer.visibility as visibility
from episodes.viewer.hosts import host_check
from episodes.viewer.pages import batch_view, batches_compared, first_view
from episodes.viewer.search import MAX_EPISODES, MAX_HITS, search_batch
from episodes.viewer.transcripts import Episodes, NotFound, clip

log = logging.getLogger(__name__)
DEFAULT_UI = "http://127.0.0.1:8233"
PAGE_TURNS = 50
MAX_PAGE_TURNS = 500
STATIC = resources.files("episodes.viewer") / "static"
PAGES = {
    "index": "index.html",
    "batch": "batch.html",
    "episode": "episode.html",
    "compare": "compare.html",
    "compare-batches": "compare-batches.html",
}
LOADING = '<p class="muted">loading…</p>'  # what each page's <main> holds until filled
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
CLIENT: web.AppKey[Client] = web.AppKey("client", Client)
EPISODES: web.AppKey[Episodes] = web.AppKey("episodes", Episodes)
SETTINGS: web.AppKey[dict[str, Any]] = web.AppKey("settings", dict)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(
        data, status=status, dumps=lambda v: json.dumps(v, ensure_ascii=False, default=str)
    )


def _int(request: web.Request, name: str, default: int, hi: int | None = None) -> int:
    raw = request.query.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer, not {raw!r}") from None
    return min(value, hi) if hi is not None else value


@web.middleware
async def _errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """API errors are JSON with one line; a bad filter is the user's, 400."""
    try:
        return await handler(request)
    except NotFound as e:
        return _json({"error": str(e)}, 404)
    except visibility.BadQuery as e:
        return _json({"error": str(e)}, 400)
    except web.HTTPException as e:
        if request.path.startswith("/api/") and e.status >= 400:
            return _json({"error": e.text or e.reason}, e.status)
        raise
    except Exception as e:  # a failed RPC, an unexpected history: say so, keep serving
        log.exception("viewer request %s failed", request.path_qs)
        first = (str(e) or type(e).__name__).splitlines()[0]
        return _json({"error": f"{type(e).__name__}: {first}"}, 500)


def _page(name: str) -> Any:
    """The page's HTML with its first view rendered in (`episodes.viewer.pages`)."""

    async def handler(request: web.Request) -> web.Response:
        title, main, status = await first_view(
            name,
            request.match_info,
            request.query,
            client=request.app[CLIENT],
            episodes=request.app[EPISODES],
        )
        text = (STATIC / PAGES[name]).read_text()
        # Marked: the page's script replaces it with the live page once its data is in.
        first = f'<div class="first-view">{main}</div>'
        text = text.replace(LOADING, first, 1).replace(
            "<title>episodes</title>", f"<title>{escape(title)}</title>", 1
        )
        return web.Response(text=text, status=status, content_type="text/html")

    return handler


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    ext = "." + name.rsplit(".", 1)[-1]
    if "/" in name or ext not in _TYPES or not (STATIC / name).is_file():
        raise web.HTTPNotFound()
    return web.Response(text=(STATIC / name).read_text(), content_type=_TYPES[ext])


async def config(request: web.Request) -> web.Response:
    return _json(request.app[SETTINGS])


async def batches(request: web.Request) -> web.Response:
    filters = visibility.Filters.from_params(request.query)
    return _json(await visibility.batches(request.app[CLIENT], filters))


async def episodes(request: web.Request) -> web.Response:
    """Episodes matching the index page's filters (newest first, bounded)."""
    filters = visibility.Filters.from_params(request.query)
    limit = _int(request, "limit", 200, hi=visibility.INDEX_SCAN)
    rows, truncated = await visibility.list_rows(request.app[CLIENT], filters.query(), limit)
    return _json({"query": filters.query(), "episodes": rows, "truncated": truncated})


async def batch(request: web.Request) -> web.Response:
    name = request.query.get("id") or ""
    if not name:
        raise web.HTTPBadRequest(text="id (the batch) is required")
    try:
        threshold = float(request.query.get("threshold") or 1.0)
    except ValueError:
        raise web.HTTPBadRequest(text="threshold must be a number") from None
    return _json(await batch_view(request.app[CLIENT], name, threshold))


async def compare_batches(request: web.Request) -> web.Response:
    a, b = _required(request, "a"), _required(request, "b")
    try:
        threshold = float(request.query.get("threshold") or 1.0)
    except ValueError:
        raise web.HTTPBadRequest(text="threshold must be a number") from None
    return _json(await batches_compared(request.app[CLIENT], a, b, threshold))


async def episode(request: web.Request) -> web.Response:
    wid = _required(request, "id")
    offset = _int(request, "offset", 0)
    limit = _int(request, "limit", PAGE_TURNS, hi=MAX_PAGE_TURNS)
    data = await request.app[EPISODES].page(wid, offset, limit)
    data["ui_url"] = ui_link(request.app[SETTINGS], wid)
    return _json(data)


async def part(request: web.Request) -> web.Response:
    wid, which = _required(request, "id"), _required(request, "part")
    turn = _int(request, "turn", -1)
    return _json({"value": await request.app[EPISODES].part(wid, turn, which)})


async def progress(request: web.Request) -> web.Response:
    wid = _required(request, "id")
    since = _int(request, "since", 0)
    limit = _int(request, "limit", PAGE_TURNS, hi=MAX_PAGE_TURNS)
    return _json(await request.app[EPISODES].progress(wid, since, limit))


async def search(request: web.Request) -> web.StreamResponse:
    """NDJSON, one hit a line as found, then the `done` line: the page shows hits while
    the search goes on through the batch."""
    name, text = _required(request, "batch"), _required(request, "q")
    max_episodes = _int(request, "max_episodes", MAX_EPISODES, hi=10 * MAX_EPISODES)
    max_hits = _int(request, "max_hits", MAX_HITS, hi=10 * MAX_HITS)
    resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await resp.prepare(request)
    try:
        async for line in search_batch(
            request.app[CLIENT], name, text, max_episodes=max_episodes, max_hits=max_hits
        ):
            await resp.write((json.dumps(clip(line), ensure_ascii=False) + "\n").encode())
    except (ConnectionResetError, OSError):
        return resp  # the page went away: the generator's cleanup stops the reads
    except Exception as e:  # headers are gone: the error is the last line
        first = (str(e) or type(e).__name__).splitlines()[0]
        await resp.write((json.dumps({"done": True, "error": first}) + "\n").encode())
    await resp.write_eof()
    return resp


def _required(request: web.Request, name: str) -> str:
    value = request.query.get(name, "")
    if not value:
        raise web.HTTPBadRequest(text=f"{name} is required")
    return value


def ui_link(settings: dict[str, Any], workflow_id: str) -> str:
    """The workflow's page in the Temporal UI."""
    ui, ns = settings["ui_address"].rstrip("/"), settings["namespace"]
    return f"{ui}/namespaces/{quote(ns, safe='')}/workflows/{quote(workflow_id, safe='')}"


def make_app(
    client: Client, *, ui_address: str = DEFAULT_UI, host: str = "127.0.0.1"
) -> web.Application:
    """`host`: the address it serves on; requests for any other Host get 403 (hosts.py)."""
    app = web.Application(middlewares=[host_check(host), _errors])
    app[CLIENT] = client
    app[EPISODES] = Episodes(client)
    app[SETTINGS] = {"ui_address": ui_address, "namespace": client.namespace}
    app.add_routes(
        [
            web.get("/", _page("index")),
            web.get("/batch/{id:.+}", _page("batch")),
            web.get("/episode/{id:.+}", _page("episode")),
            web.get("/compare", _page("compare")),
            web.get("/compare-batches", _page("compare-batches")),
            web.get("/static/{name}", static),
            web.get("/api/config", config),
            web.get("/api/batches", batches),
            web.get("/api/episodes", episodes),
            web.get("/api/batch", batch),
            web.get("/api/compare-batches", compare_batches),
            web.get("/api/episode", episode),
            web.get("/api/part", part),
            web.get("/api/progress", progress),
            web.get("/api/search", search),
        ]
    )
    return app


@dataclass
class Running:
    url: str
    port: int
    runner: web.AppRunner


@contextlib.asynccontextmanager
async def serve(
    client: Client, *, host: str = "127.0.0.1", port: int = 0, ui_address: str = DEFAULT_UI
) -> AsyncIterator[Running]:
    """Serve the viewer until the block ends (`port` 0: any free port)."""
    app = make_app(client, ui_address=ui_address, host=host)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        yield Running(url=f"http://{shown}:{bound}", port=bound, runner=runner)
    finally:
        await runner.cleanup()
