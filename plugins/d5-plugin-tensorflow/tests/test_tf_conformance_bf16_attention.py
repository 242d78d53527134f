"""The tensorflow executor's passes of five bfloat16 Attention conformance cases, which
an independent recount disputed, are genuine: on each, its output is no farther from the
exact answer (float64 from the bfloat16 inputs, :mod:`d5core.testing.attention_reference`)
than onnx's own expected output is, and it passes d5's check, which gives bfloat16 two
ulps as onnx's runner does. The recount had held bfloat16 to rtol=1e-3, which even the
exact answer fails against onnx's expected outputs."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_tensorflow.executor import TensorFlowExecutor

from d5core.testing.attention_reference import attention_float64
from d5core.testing.executors import node_cases, run_case

CASES = ["3d_causal", "4d_attn_mask_causal", "4d_causal", "4d_causal_padded_kv", "4d_padded_kv"]


@pytest.mark.parametrize("variant", CASES)
def test_a_bf16_attention_pass_is_as_close_to_the_exact_answer_as_onnx_expected_output(
    variant: str,
) -> None:
    (single,) = node_cases(rf"^test_attention_{variant}_bf16$")
    (expanded,) = node_cases(rf"^test_attention_{variant}_bf16_expanded$")
    graph = single.model.graph
    inputs, (expected,) = single.data_sets[0]
    feeds = {info.name: value for info, value in zip(graph.input, inputs, strict=False)}
    exact = attention_float64(graph.node[0], feeds)

    assert run_case(TensorFlowExecutor, expanded).status == "passed"
    got = TensorFlowExecutor(expanded.model).inference(feeds)[expanded.model.graph.output[0].name]
    assert got.dtype == expected.dtype
    error = np.max(np.abs(np.asarray(got).astype(np.float64) - exact))
    stored_error = np.max(np.abs(expected.astype(np.float64) - exact))
    assert error <= stored_error
