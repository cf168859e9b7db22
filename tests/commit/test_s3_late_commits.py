"""The commit guarantee over a real S3 protocol (moto; radosgw with LAMINA_S3_BACKEND=radosgw):
a writer's conditional version PUT is held in a proxy (tests/support/s3proxy.py) while other
writers commit and expiry retires, then frees, the slot it targets; or the PUT lands and
its response is lost, so the S3 client retries a PUT that already landed.

The held writer talks to S3 through the proxy; everyone else talks to it directly.
"""

from __future__ import annotations

import collections
import threading
import uuid
from datetime import timedelta

import pytest

import lamina
from lamina.timeutil import now_ms
from lamina.commit import flush_hints
from lamina.maintenance import fsck

from support import BUCKET, workers
from support.delayed_writer import FREEING, rows_of, want
from support.s3proxy import S3Proxy

pytestmark = pytest.mark.xdist_group("s3")
NOW = timedelta(0)


@pytest.fixture
def proxy(s3):
    p = S3Proxy(s3.endpoint)
    yield p
    p.stop()


def _version_put(method: str, path: str) -> bool:
    return method == "PUT" and "/_lamina/versions/" in path and "/pending/" not in path


def _append_in_thread(table, data) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["version"] = table.append(data).version
        except BaseException as e:  # noqa: BLE001 - the test re-raises it
            out["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def _finish(th: threading.Thread, out: dict) -> int:
    th.join(120)
    assert not th.is_alive()
    if "error" in out:
        raise out["error"]
    return out["version"]


@pytest.mark.parametrize("props", [None, FREEING], ids=["expired", "freed"])
def test_version_put_held_in_the_network_past_expiry(s3, proxy, props):
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    direct = s3.storage_options
    t = lamina.create_table(uri, workers.schema(), properties=props, storage_options=direct)
    t.append(workers.batch(0, 0, 2))
    late = lamina.open_table(uri, storage_options=proxy.storage_options(direct))
    hold = proxy.hold(_version_put)
    th, out = _append_in_thread(late, workers.batch(1, 0, 2))  # aims at slot 2 on base 1
    assert hold.arrived.wait(60)
    for s in range(1, 6):
        t.append(workers.batch(0, s, 2))
    rep = t.maintenance.expire_versions(retain_last=1, reader_grace=NOW)
    assert rep.expired_versions == [0, 1, 2, 3, 4, 5] and (rep.freed_slots > 0) == (props is not None)
    hold.release.set()  # the PUT of slot 2 reaches the server now
    assert _finish(th, out) == 7
    statuses = [st for m, p, st in proxy.log if _version_put(m, p)]
    # freed: the late PUT landed (200), was withdrawn, and the rebased one landed (200);
    # expired: the late PUT found the expired version's file (412), the rebased one landed
    assert statuses == ([200, 200] if props else [412, 200])
    flush_hints()
    fresh = lamina.open_table(uri, storage_options=direct)
    assert fresh.version == 7
    assert rows_of(fresh.to_arrow()) == want(*((0, s) for s in range(6)), (1, 0))
    report = fsck(fresh)
    assert report.ok, (report.missing, report.errors)
    assert fresh.log.scan_slots().freeable_strays(now_ms(), fresh.metadata.properties) == []


def test_retried_version_put_that_had_landed_commits_once(s3, proxy):
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    direct = s3.storage_options
    lamina.create_table(uri, workers.schema(), storage_options=direct)
    t = lamina.open_table(uri, storage_options=proxy.storage_options(direct))
    lost = proxy.lose_response(_version_put)
    assert t.append(workers.batch(1, 0, 2)).version == 1
    assert lost.done.is_set()  # the first PUT reached the server and landed
    version_puts = [(p, st) for m, p, st in proxy.log if _version_put(m, p)]
    assert version_puts[0][1] is None and all(p == version_puts[0][0] for p, _ in version_puts)
    assert t.append(workers.batch(1, 1, 2)).version == 2
    flush_hints()
    fresh = lamina.open_table(uri, storage_options=direct)
    assert [h["version"] for h in fresh.history()] == [2, 1, 0]
    assert rows_of(fresh.to_arrow()) == collections.Counter(want((1, 0), (1, 1)))
