"""The explorer's worker threads: the reads one request makes in parallel (version files and
manifests on an object store, the catalog page's tables)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

__all__ = ["pool"]

pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lamina-ui")
