"""An explorer server (port 0, in this process) on the sample catalog
(support.ui_sample), shared by a module's tests."""

from __future__ import annotations

import pytest

from lamina.ui.api import Explorer
from lamina.ui.server import start_server, url_of
from support.ui_sample import build_catalog, listing


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ui"))
    uri, table = build_catalog(root)
    before = listing(root)
    explorer = Explorer(uri)
    server = start_server(explorer)
    yield {"root": root, "uri": uri, "table": table, "url": url_of(server), "before": before, "explorer": explorer}
    server.shutdown()
    server.server_close()
    explorer.close()
