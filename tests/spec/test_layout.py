"""The on-disk layout: version file names (lamina.spec.layout)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lamina.spec.layout import parse_version_file_name, version_file_name


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_version_names_sort_newest_first_and_round_trip(v):
    name = version_file_name(v)
    assert len(name) == 25 and parse_version_file_name(name) == v
    if v > 0:
        assert version_file_name(v) < version_file_name(v - 1)
