"""The JAX executor runs the operators of transformer and recurrent models: forward
against onnxruntime, gradients (float64) against central differences, with the shared
kit's graphs (:mod:`d5core.testing.transformer_graphs`): an attention block whose shapes
are computed by Shape, Gather, Concat and Range nodes, one-operator graphs, and LSTM
and GRU layers in every direction and layout."""

from __future__ import annotations

from d5_plugin_jax.executor import JaxExecutor

from d5core.testing.transformer_graphs import TransformerExecutorTests


class TestJaxExecutorRunsTransformers(TransformerExecutorTests):
    executor = JaxExecutor
