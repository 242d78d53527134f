"""What the tests of the executor's compiles share: comparing outputs bit for bit, and
symbols without the names MXNet numbers its operators with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from d5_plugin_mxnet.graph.program import build_symbol

__all__ = ["assert_derived_as_imperative", "assert_same", "normalized"]


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


def assert_derived_as_imperative(
    ex: Any, arrays: Mapping[str, Any], loss: str, heads: Any, derived: Any, known: dict[str, Any]
) -> None:
    """``derived`` (the executor's symbol for ``arrays`` built without an imperative pass)
    is the symbol an imperative pass builds: the same nodes, the same node constants (the
    very objects) and the same shape for every value."""
    env = ex._shape_pass_of(arrays, True, loss, known)
    shapes = {n: tuple(v.shape) for n, v in env.items()}
    dtypes = {n: np.dtype(v.dtype) for n, v in env.items()}
    symbol, fed = build_symbol(ex._steps[True], shapes, dtypes, heads, ex._node_constants, known)
    assert normalized(derived.symbol) == normalized(symbol)
    assert set(fed) == set(derived.fed)
    assert all(fed[n] is derived.fed[n] for n in fed)  # the same node constants
    assert {n: derived.shapes[n] for n in shapes} == shapes
