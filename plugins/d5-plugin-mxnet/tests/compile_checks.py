"""What the tests of the executor's compiles share: comparing outputs bit for bit, and
symbols without the names MXNet numbers its operators with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["assert_same", "normalized"]


def assert_same(got: Mapping[str, Any], want: Mapping[str, Any]) -> None:
    """The same names, in the same order, with equal dtypes, shapes and bits."""
    assert list(got) == list(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


def normalized(symbol: Any) -> list[tuple[Any, ...]]:
    """The nodes of ``symbol`` without the names MXNet numbers its operators with."""
    nodes = json.loads(symbol.tojson())["nodes"]
    return [
        (n["op"], n["name"] if n["op"] == "null" else "", n.get("attrs", {}), n["inputs"])
        for n in nodes
    ]
