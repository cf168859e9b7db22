"""``lamina ui``: a local, read-only web explorer of a catalog's tables or of one table
(lamina.ui.server serves the page and its JSON API, lamina.ui.api computes the data: from
the version history (``history``), the files' layout (``layout``) and the health advice
(``health``), with its caches (``caches``) and worker threads (``pool``))."""

from lamina.errors import ExplorerError
from lamina.ui.api import Explorer
from lamina.ui.server import serve, start_server

__all__ = ["Explorer", "ExplorerError", "serve", "start_server"]
