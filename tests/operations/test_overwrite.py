"""Overwrite: of everything, and of the rows a predicate matches."""

from __future__ import annotations

import pytest

import lamina
from lamina.errors import InvalidArgument

from support.sample import SCHEMA, batch, ids


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_overwrite_all_and_where(uri):
    t = lamina.create_table(uri, SCHEMA, properties={"write.max-rows-per-file": "10"})
    t.append(batch(0, 50))
    v = t.overwrite(batch(100, 5)).version
    assert ids(t.scan().to_arrow()) == list(range(100, 105))
    assert ids(t.scan(version=v - 1).to_arrow()) == list(range(50))
    t.append(batch(0, 50))
    # a predicate that cuts files in half: matching rows replaced, the rest kept
    t.overwrite(batch(20, 5), where="id >= 15 AND id < 35")
    got = ids(t.scan().to_arrow())
    assert got == sorted(list(range(100, 105)) + list(range(0, 15)) + list(range(20, 25)) + list(range(35, 50)))
    with pytest.raises(InvalidArgument, match="do not match"):
        t.overwrite(batch(0, 5), where="id >= 100")
