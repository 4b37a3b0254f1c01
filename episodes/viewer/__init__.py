"""`episodes view`: a local web app for batches and episodes, read from Temporal alone.

Visibility (the search attributes in `episodes.search_attributes`) lists batches and
their episodes; histories, read by `episodes.client.histories.transcript` through the client's data
converter (so encrypted or externally stored payloads come back decoded when this
process has the keys), give transcripts; the `progress` query follows running
episodes. Nothing is stored beside Temporal. See docs/viewer.md.

- `visibility`: listing queries and rows; `stats`: a batch's figures (pure);
- `transcripts`: one episode, paged and clipped; `search`: text search over a batch;
- `app`: the aiohttp routes and `serve()`; `static/`: the pages (HTML, JS, CSS).
"""

from __future__ import annotations

from episodes import _moved

# `episodes.viewer.fleet` before "fleet" came to mean the model upstreams only.
_moved.alias(__name__, {"fleet": "episodes.viewer.priority"})

from episodes.viewer.app import DEFAULT_UI, make_app, serve  # noqa: E402

__all__ = ["DEFAULT_UI", "make_app", "serve"]
