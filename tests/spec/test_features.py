"""Reader and writer features (lamina.spec.features): a feature this Lamina does not know stops
what needs it and nothing else."""

from __future__ import annotations

import pytest

import lamina
from lamina.errors import UnsupportedFeature
from lamina.io import FileIO
from lamina.spec.layout import version_path
from lamina.spec.version import VersionManifest

from support.sample import SCHEMA, batch


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "t")


def test_unknown_reader_and_writer_features(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(batch(0, 3))
    io = FileIO(uri)
    vm = VersionManifest.from_json(io.get(version_path(1)), "v1")
    io.put_if_absent(version_path(2), vm.next(version=2, parent_version=1, writer_features=vm.writer_features + ("time-machine",), commit_id="w").to_json())
    t2 = lamina.open_table(uri)  # readers are fine with an unknown writer feature
    assert t2.version == 2
    with pytest.raises(UnsupportedFeature, match="time-machine"):
        t2.append(batch(3, 1))
    io.put_if_absent(version_path(3), vm.next(version=3, parent_version=2, reader_features=("quantum-dv",), commit_id="r").to_json())
    with pytest.raises(UnsupportedFeature, match="quantum-dv"):
        lamina.open_table(uri)
    assert lamina.open_table(uri, version=1).scan().to_arrow().num_rows == 3
