"""The native backend as d5 loads it: its entry points, hooks, details and the one-line
usage errors for inputs it cannot run."""

from __future__ import annotations

import numpy as np
import pytest
from d5_kernels import plugin, runtime
from d5_kernels.operators import NativeBackend

from d5core.api import TensorDescriptor, UsageError
from d5core.testing.operators import backend_by_name

NATIVE = NativeBackend()


def test_the_backend_is_registered_as_native() -> None:
    backend = backend_by_name("native")
    assert isinstance(backend, NativeBackend)
    assert backend.dtypes == ("float32", "float64")


def test_hooks_report_the_isa_threads_and_a_working_gemm() -> None:
    info = plugin.d5_environment_info()
    assert info["isa"] == runtime.isa()
    assert info["omp_threads"] == runtime.num_threads()
    assert info["compiler"]
    assert plugin.d5_thread_settings() == {"d5_kernels.omp_threads": str(runtime.num_threads())}
    assert plugin.d5_plugin_check() == []


def test_details_name_the_isa_and_the_algorithm() -> None:
    op = NATIVE.create("Conv", {}, [TensorDescriptor((1, 2, 4, 4)), TensorDescriptor((3, 2, 3, 3))])
    assert op.details()["algorithm"] == "im2col + packed GEMM"
    assert op.details()["isa"] == runtime.isa()


def test_prepared_callables_reuse_their_buffers_and_match_forward() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3)), rng.standard_normal((3, 4))
    op = NATIVE.create("Gemm", {}, [TensorDescriptor.of(a), TensorDescriptor.of(b)])
    timed = op.prepare_forward([a, b])
    first = timed()
    assert timed()[0] is first[0]
    np.testing.assert_allclose(first[0], op.forward([a, b])[0])
    grads = op.prepare_backward([np.ones((5, 4))], [a, b])()
    np.testing.assert_allclose(grads[0], np.ones((5, 4)) @ b.T)


@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes", "message"),
    [
        ("Conv", {}, [(1, 2, 4, 4, 4), (3, 2, 3, 3, 3)], "native Conv is 2-D"),
        ("Conv", {"group": 2}, [(1, 3, 4, 4), (2, 1, 3, 3)], "groups"),
        ("Conv", {"kernel_shape": [2, 2]}, [(1, 2, 4, 4), (3, 2, 3, 3)], "kernel_shape"),
        ("MaxPool", {"kernel_shape": [2]}, [(1, 2, 4)], "2 spatial axes only"),
        ("AveragePool", {}, [(1, 2, 4, 4)], "kernel_shape is required"),
        ("Gemm", {"transA": 1}, [(3, 4), (4, 5)], "inner dimensions differ"),
        ("Gemm", {"gamma": 1.0}, [(3, 4), (4, 5)], "unknown attribute 'gamma'"),
        ("MatMul", {}, [(2, 3, 4), (3, 4, 6)], "do not broadcast"),
        ("Softmax", {"axis": 3}, [(2, 3)], "out of range"),
        ("BatchNormalization", {}, [(2, 3), (3,), (3,), (2,), (3,)], "input_mean"),
        ("Relu", {}, [(2, 3), (2, 3)], "takes 1 input"),
    ],
)
def test_bad_inputs_are_one_line_usage_errors(op_type, attributes, shapes, message) -> None:
    with pytest.raises(UsageError, match=message) as excinfo:
        NATIVE.create(op_type, attributes, [TensorDescriptor(s) for s in shapes])
    assert "\n" not in str(excinfo.value)
    assert str(excinfo.value).startswith(op_type) or "native" in str(excinfo.value)


def test_unsupported_dtypes_and_operators_are_refused() -> None:
    with pytest.raises(UsageError, match="supports float32, float64"):
        NATIVE.create("Relu", {}, [TensorDescriptor((2,), "float16")])
    with pytest.raises(UsageError, match="no operator 'Tanh'"):
        NATIVE.create("Tanh", {}, [TensorDescriptor((2,))])
    op = NATIVE.create("Relu", {}, [TensorDescriptor((2,))])
    with pytest.raises(UsageError, match="input X has dtype int32; the native backend supports"):
        op.forward([np.ones(2, np.int32)])
