"""The MXNet executor runs the operators of transformer and recurrent models, forward
against onnxruntime and backward against central differences (float64), and its level-0
operators of those models agree with d5's numpy reference.

The graphs, comparisons and tests are the shared kit's
(:mod:`d5core.testing.transformer_graphs`). What is MXNet's own is here: MXNet 1.9 has
no arrays with an axis of size 0, so such tensors are not drawn and a Shape with an empty
result is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet.executor import MXNetExecutor
from d5_plugin_mxnet.operators import MXNetBackend

from d5core.api import TensorDescriptor, UsageError
from d5core.testing.transformer_graphs import GraphOperatorTests, TransformerExecutorTests


class TestMXNetExecutorRunsTransformers(TransformerExecutorTests):
    executor = MXNetExecutor


@pytest.mark.parametrize(("shape", "attributes"), [((), {}), ((2, 3), {"start": 2})])
def test_an_empty_shape_is_refused_in_one_line(
    shape: tuple[int, ...], attributes: dict[str, Any]
) -> None:
    op = MXNetBackend().create("Shape", attributes, [TensorDescriptor(shape)])
    with pytest.raises(UsageError, match=r"^Shape: .*cannot hold an axis of size 0") as info:
        op.forward([np.zeros(shape, np.float32)])
    assert "\n" not in str(info.value)


class TestMXNetTransformerOperatorsAgreeWithTheReference(GraphOperatorTests):
    """MXNet's float64 Gelu gradient is off by up to about 3e-7 relative, as
    TensorFlow's is (see :class:`GraphOperatorTests`): the kit's float64 tolerances."""

    backend = MXNetBackend()
    zero_size_tensors = False

    def excluded(self, op_type: str, attributes: Mapping[str, Any], inputs: Sequence[Any]) -> bool:
        """A Shape with an empty result (of a scalar, or an empty ``start:end``): MXNet
        1.9 has no arrays of size 0, so it is refused in one line (pinned by
        test_an_empty_shape_is_refused_in_one_line)."""
        if op_type != "Shape":
            return False
        dims = list(np.shape(inputs[0]))
        return not dims[slice(attributes.get("start"), attributes.get("end"))]
