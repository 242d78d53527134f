"""Bad input gets one line naming what is wrong: the checks every ONNX backend shares,
what JAX itself rejects, and float64 where JAX's x64 mode cannot be turned on. And
float64, which runs under x64 mode for one operator's call, never leaves x64 on for
the rest of the process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import pytest
from d5_plugin_jax import _jax
from d5_plugin_jax.operators import JaxBackend
from d5_plugin_jax.ops import JaxOperator, Slot
from d5_plugin_jax.ops._base import Kernel, Signature

from d5core.api import TensorDescriptor, UsageError
from d5core.testing.operators import OperatorErrorTests, create_operator, one_line_error

jax = _jax.jax()
JAX = JaxBackend()


class TestJaxRefusesBadInputInOneLine(OperatorErrorTests):
    backend = JAX
    float16_refusal = "input X has dtype float16; the jax backend supports float32, float64"


class _Unchecked(JaxOperator):
    """A matrix product that leaves every shape check to JAX."""

    op_type = "UncheckedMatMul"
    slots: ClassVar[tuple[Slot, ...]] = (Slot("A"), Slot("B"))

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        return lambda a, b: (jax.numpy.matmul(a, b),)


def test_what_jax_rejects_is_one_line_naming_the_operator_and_the_shapes() -> None:
    op = _Unchecked()
    with pytest.raises(UsageError) as excinfo:
        op.prepare_forward([np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)])
    message = one_line_error(excinfo)
    assert message.startswith("UncheckedMatMul: jax rejected inputs of shapes (2, 3), (4, 5): ")


@contextmanager
def _no_switch(enabled: bool) -> Iterator[None]:
    yield  # a JAX whose x64 switch changes nothing


@pytest.fixture
def without_x64(monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX as a build or process that cannot turn x64 mode on."""
    monkeypatch.setattr(jax, "enable_x64", _no_switch)


def _float64(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(1).normal(size=shape)


@pytest.mark.usefixtures("without_x64")
def test_float64_without_x64_is_refused_in_one_line_when_the_operator_is_made() -> None:
    with pytest.raises(UsageError) as excinfo:
        create_operator(JAX, "Relu", {}, [((2, 3), "float64")])
    message = one_line_error(excinfo)
    assert message.startswith("Relu in float64 needs JAX's x64 mode, which this build/process ")
    assert "use float32" in message


def test_float64_without_x64_is_refused_when_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _float64((2, 3))
    op = JAX.create("Relu", {}, [TensorDescriptor.of(x)])
    monkeypatch.setattr(jax, "enable_x64", _no_switch)
    with pytest.raises(UsageError) as excinfo:
        op.prepare_forward([x])
    assert "Relu in float64 needs JAX's x64 mode" in one_line_error(excinfo)


def test_a_jax_without_the_x64_switch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(jax, "enable_x64")
    with pytest.raises(UsageError) as excinfo:
        _jax.require_x64("Conv in float64")
    assert "(jax.enable_x64 is missing)" in one_line_error(excinfo)


def test_float32_needs_no_x64(without_x64: None) -> None:
    x = np.ones((2, 3), np.float32)
    (y,) = JAX.create("Relu", {}, [TensorDescriptor.of(x)]).forward([x])
    assert y.dtype == np.float32


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_float64_leaves_x64_off_for_the_rest_of_the_process(direction: str) -> None:
    x, w = _float64((1, 2, 5, 5)), _float64((3, 2, 3, 3))
    op = JAX.create("Conv", {}, [TensorDescriptor.of(x), TensorDescriptor.of(w)])
    if direction == "forward":
        run: Any = op.prepare_forward([x, w])
    else:
        run = op.prepare_backward([np.ones((1, 3, 3, 3))], [x, w])
    results = run()
    assert all(r.dtype == np.float64 for r in results)  # the compiled code keeps its types
    assert jax.numpy.zeros(1).dtype == np.float32
    assert jax.config.jax_enable_x64 is False
    assert op.details()["x64"] is True
