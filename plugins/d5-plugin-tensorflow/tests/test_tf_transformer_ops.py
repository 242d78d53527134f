"""The TensorFlow executor runs the operators of transformer and recurrent models, forward
against onnxruntime and backward against central differences (float64), and its level-0
operators of those models agree with d5's numpy reference.

The graphs, comparisons and tests are the shared kit's
(:mod:`d5core.testing.transformer_graphs`); TensorFlow needs nothing of its own there.
"""

from __future__ import annotations

from d5_plugin_tensorflow.executor import TensorFlowExecutor
from d5_plugin_tensorflow.operators import TensorFlowBackend

from d5core.testing.transformer_graphs import GraphOperatorTests, TransformerExecutorTests


class TestTensorFlowExecutorRunsTransformers(TransformerExecutorTests):
    executor = TensorFlowExecutor


class TestTensorFlowTransformerOperatorsAgreeWithTheReference(GraphOperatorTests):
    """In float64 TensorFlow's erf and the unrolled recurrent products round differently
    from numpy by up to about 1e-8 (absolute) in gradients: the kit's tolerances."""

    backend = TensorFlowBackend()
