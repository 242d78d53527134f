"""The plugin module of d5-plugin-onnxruntime.

Nothing here imports onnxruntime at module level: listing plugins must not pay for it.
The hooks import it when they are called.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from d5core.api import hookimpl

if TYPE_CHECKING:
    from d5core.api import TraceProfiler

__all__ = [
    "d5_environment_info",
    "d5_plugin_api",
    "d5_plugin_check",
    "d5_thread_settings",
    "d5_trace_profiler",
]

d5_plugin_api = ">=1.12,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    import onnxruntime as ort

    from d5_plugin_onnxruntime.executor import default_session_options

    options = default_session_options()
    return {
        "onnxruntime": ort.__version__,
        "device": ort.get_device(),
        "providers": list(ort.get_available_providers()),
        "graph_optimization_level": str(options.graph_optimization_level).rsplit(".", 1)[-1],
        "intra_op_num_threads": options.intra_op_num_threads,
        "inter_op_num_threads": options.inter_op_num_threads,
    }


@hookimpl
def d5_thread_settings() -> Mapping[str, str] | None:
    if "onnxruntime" not in sys.modules:  # never import onnxruntime to answer
        return None
    from d5_plugin_onnxruntime.executor import default_session_options

    options = default_session_options()  # what every executor's session gets
    return {
        "onnxruntime.SessionOptions.intra_op_num_threads": str(options.intra_op_num_threads),
        "onnxruntime.SessionOptions.inter_op_num_threads": str(options.inter_op_num_threads),
    }


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper

        from d5_plugin_onnxruntime.executor import OnnxRuntimeExecutor
    except Exception as exc:
        return [f"cannot import onnxruntime ({exc}); pip install 'onnxruntime==1.32.0'"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "x"], ["y"], transB=1)], "check", [x], [y]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    try:
        out = OnnxRuntimeExecutor(model).inference(
            {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
        )["y"]
    except Exception as exc:
        return [f"onnxruntime {ort.__version__} could not run a 2x3 Gemm: {exc}"]
    if not np.array_equal(out, np.array([[5.0, 14.0], [14.0, 50.0]], dtype=np.float32)):
        return [f"onnxruntime {ort.__version__} computed a wrong 2x3 matrix product"]
    return []


@hookimpl
def d5_trace_profiler(executor: str, level: str, subject: object) -> TraceProfiler | None:
    """ONNX Runtime's profiler when ``subject`` is the ``onnxruntime`` executor about to
    be traced; ``None`` otherwise, a training run included (ONNX Runtime profiles a
    session, so there is nothing to profile without the executor). Never imports
    onnxruntime."""
    if executor != "onnxruntime":
        return None
    from d5_plugin_onnxruntime.trace import profiler_for

    return profiler_for(subject, level)
