"""Without a guess of its shapes (``test_mx_first_guess``), a first signature's symbol is
built node by node, MXNet inferring a shape or type when a node reads one it does not
know yet: a node that reads none (a Relu) costs no inference, and each array the symbol
reads is asked its shape once."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet.executor import MXNetExecutor
from d5_plugin_mxnet.graph.program import _Looked

from d5core.testing.executors import build_network, make_feeds, with_loss


def test_looked_up_shapes_read_as_a_list_of_them() -> None:
    table = {"a": [2, 3], "b": [4]}
    looked = _Looked(["a", "b", "a"], table, tuple)
    assert len(looked) == 3
    assert looked[0] == (2, 3) and looked[-1] == (2, 3)
    assert looked[1:] == [(4,), (2, 3)]
    assert list(looked) == [(2, 3), (4,), (2, 3)]
    assert set(looked) == {(2, 3), (4,)}
    with pytest.raises(IndexError):
        looked[3]


def test_a_shape_no_node_reads_is_never_looked_up() -> None:
    read: list[str] = []

    class Table(dict[str, Any]):
        def __getitem__(self, name: str) -> Any:
            read.append(name)
            return dict.__getitem__(self, name)

    looked = _Looked(["x", "y"], Table(x=(1,), y=(2,)), None)
    assert looked[1] == (2,)
    assert read == ["y"]


def test_a_first_signature_infers_fewer_times_than_it_has_nodes(
    monkeypatch: pytest.MonkeyPatch, inferences: list[int]
) -> None:
    net, loss = with_loss(build_network("lenet5", seed=0))
    ex = MXNetExecutor(net)
    monkeypatch.setattr(ex, "_first_guess", lambda *args: None)
    arrays = ex.to_native(make_feeds(net, 4, seed=0))
    derived = ex._derived(arrays, True, ex._heads(True, loss), {**ex._known})
    assert derived is not None
    nodes = [s for s in ex._steps[True] if s.node is not None]
    assert 0 < len(inferences) < len(nodes)
    assert all(isinstance(d, np.dtype) for d in derived.dtypes.values())
