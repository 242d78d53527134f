"""An operator backend agrees with d5's numpy reference: a test kit for operator plugins.

:class:`OperatorAgreementTests` draws problems for every operator of the reference (the
``numpy`` entry of ``d5.operators``) with hypothesis: shapes, attributes and data chosen
away from kinks (ReLU at 0, a division by nearly 0, ties in a max-pooling window), where
a one-sided derivative is as right as any other. Each problem goes through
:func:`d5core.validate.validate_operator`, which compares the backend's outputs and
backward with the reference's and checks the backward by central differences in float64.
A plugin author subclasses it in a test module and names the backend::

    from d5core.testing.operator_agreement import OperatorAgreementTests, property_examples
    from my_plugin.operators import MyBackend

    class TestMyBackendAgreesWithTheReference(OperatorAgreementTests):
        backend = MyBackend()
        examples = property_examples(10)

Beside the drawn problems, fixed problems put NaN, +inf and -inf first, in the middle and
last of a pooling window, a row of a matrix product or of a softmax, and in the input of an
activation (:func:`nonfinite_problems`): the backend's outputs must hold the reference's
non-finite values in the same places (NaN propagates, as in numpy). A backend whose
framework genuinely differs on some of them declares those cases, each with its reason, in
:attr:`OperatorAgreementTests.nonfinite_differences`; the test then fails if a declared case
agrees after all, so that no declaration outlives its cause.

The class attributes declare what a backend lacks or does its own way: the operators it
offers, the spatial ranks of its convolutions and pools, the sizes drawn, zero-size
tensors, dropout masks, tolerances, and (:meth:`OperatorAgreementTests.refusal`) problems
it refuses with a one-line error. The helpers (:func:`assert_agrees_with_reference`,
:func:`distinct`, :func:`broadcastable` and the rest) serve a plugin's own fixed cases.
Import this module in tests only: it imports hypothesis and pytest.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from d5core.errors import UsageError
from d5core.levels.operators import OperatorBackend, TensorDescriptor
from d5core.validate import Tolerances, validate_operator

__all__ = [
    "AUTO_PADS",
    "CORE_OPERATORS",
    "NONFINITE_VALUES",
    "PROPERTIES",
    "Extents",
    "OperatorAgreementTests",
    "assert_agrees_with_reference",
    "assert_refused",
    "away_from_zero",
    "broadcastable",
    "distinct",
    "nonfinite_problems",
    "normal",
    "property_examples",
    "reference_backend",
    "rng_of",
    "run_property",
    "small",
    "small_problems",
]

#: Every ``auto_pad`` value ONNX defines.
AUTO_PADS = ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]
REDUCTIONS = ["mean", "sum", "none"]

#: A drawn problem: the attributes and the inputs (floating ones are cast to the dtype
#: under test when checked).
Problem = tuple[dict[str, Any], list[np.ndarray]]


def property_examples(default: int, variable: str = "D5_PROPERTY_EXAMPLES") -> int:
    """How many examples each property draws: the environment ``variable``, else
    ``default``."""
    return int(os.environ.get(variable, str(default)))


def run_property(case: Callable[[st.DataObject], None], examples: int) -> None:
    """Run ``case`` on ``examples`` examples that hypothesis draws, the same ones on
    every run, with no deadline and no example database."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        case(data)

    run()


# -- data ---------------------------------------------------------------------------


def small(n: int) -> st.SearchStrategy[int]:
    """A size from 1 to ``n``."""
    return st.integers(1, n)


def rng_of(data: st.DataObject) -> np.random.Generator:
    """A numpy generator seeded by a drawn integer, so that hypothesis can replay and
    shrink the data as well as the shapes."""
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


def normal(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Standard-normal values of ``shape``."""
    return rng.standard_normal(tuple(shape))


def away_from_zero(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Normal values pushed at least 0.1 away from 0: no ReLU kink, no tiny divisor."""
    x = rng.standard_normal(tuple(shape))
    return np.where(x >= 0, x + 0.1, x - 0.1)


def distinct(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Values 0.1 apart in a random order, so that no pooling window holds a tie."""
    n = math.prod(shape)
    return (rng.permutation(n) * 0.1 - n * 0.05).reshape(tuple(shape))


def small_problems(seed: int = 7) -> dict[str, Problem]:
    """One small fixed float32 problem per reference operator, by operator type: what the
    tests of a backend's prepared callables (no conversion, no wait, the right kernel
    inside the timed region) run each operator on. Seeded, so every call gives the same
    arrays; a backend's tests replace the entries they need otherwise."""
    rng = np.random.default_rng(seed)

    def f(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def pos(*shape: int) -> np.ndarray:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)

    labels = np.array([[0, 2], [1, 1], [2, 0], [1, 0]])
    return {
        "Gemm": ({"transB": 1, "alpha": 0.5}, [f(3, 4), f(2, 4), f(2)]),
        "MatMul": ({}, [f(2, 3, 4), f(4)]),
        "Conv": ({"pads": [1, 0, 0, 1]}, [f(1, 2, 5, 5), f(3, 2, 3, 3), f(3)]),
        "ConvTranspose": ({"strides": [2], "pads": [1, 0]}, [f(1, 2, 4), f(2, 3, 3), f(3)]),
        "Relu": ({}, [f(3, 4)]),
        "LeakyRelu": ({"alpha": 0.2}, [f(3, 4)]),
        "Sigmoid": ({}, [f(3, 4)]),
        "Tanh": ({}, [f(3, 4)]),
        "Softmax": ({"axis": 0}, [f(3, 4)]),
        "LogSoftmax": ({}, [f(3, 4)]),
        "MaxPool": ({"kernel_shape": [2, 2], "pads": [1, 0, 0, 1]}, [f(1, 2, 5, 5)]),
        "AveragePool": ({"kernel_shape": [3], "ceil_mode": 1, "strides": [2]}, [f(1, 2, 6)]),
        "GlobalAveragePool": ({}, [f(2, 3, 4)]),
        "BatchNormalization": ({"training_mode": 1}, [f(2, 3, 4), pos(3), f(3), f(3), pos(3)]),
        "Dropout": ({"seed": 1}, [f(3, 4), np.array(0.5, np.float32), np.array(True)]),
        "Add": ({}, [f(3, 4), f(4)]),
        "Sub": ({}, [f(3, 4), f(3, 1)]),
        "Mul": ({}, [f(3, 4), f(3, 4)]),
        "Div": ({}, [f(3, 4), pos(4)]),
        "Sum": ({}, [f(3, 4), f(4), f(1, 4)]),
        "Reshape": ({}, [f(2, 3, 4), np.array([0, -1])]),
        "Flatten": ({"axis": 2}, [f(2, 3, 4)]),
        "Transpose": ({"perm": [2, 0, 1]}, [f(2, 3, 4)]),
        "Concat": ({"axis": 1}, [f(2, 3), f(2, 2)]),
        "Squeeze": ({}, [f(2, 1, 3), np.array([1])]),
        "Unsqueeze": ({}, [f(2, 3), np.array([0, -1])]),
        "Identity": ({}, [f(2, 3)]),
        "SoftmaxCrossEntropyLoss": ({}, [f(4, 3, 2), labels]),
        "MeanSquaredError": ({}, [f(3, 4), f(3, 4)]),
        # the operators of transformer and recurrent models
        "Gather": ({"axis": 1}, [f(3, 4), np.array([[0, -1], [2, 2]])]),
        "GatherElements": ({"axis": 1}, [f(3, 4), np.array([[0, 3], [1, -1], [2, 2]])]),
        "Slice": (
            {},
            [f(4, 5), np.array([3, 0]), np.array([0, 5]), np.array([0, 1]), np.array([-1, 2])],
        ),
        "Shape": ({"start": 1}, [f(2, 3, 4)]),
        "ConstantOfShape": ({"value": np.array([0.5], np.float32)}, [np.array([2, 3])]),
        "Expand": ({}, [f(3, 1), np.array([2, 3, 4])]),
        "Where": ({}, [np.array([True, False, True]), f(2, 3), f(3)]),
        "Equal": ({}, [f(3, 4), f(4)]),
        "Less": ({}, [f(3, 4), f(4)]),
        "Greater": ({}, [f(3, 4), f(4)]),
        "Cast": ({"to": 11}, [f(3, 4)]),
        "Pow": ({}, [pos(3, 4), f(4)]),
        "Sqrt": ({}, [pos(3, 4)]),
        "Erf": ({}, [f(3, 4)]),
        "Exp": ({}, [f(3, 4)]),
        "Log": ({}, [pos(3, 4)]),
        "Gelu": ({"approximate": "tanh"}, [f(3, 4)]),
        "ReduceMean": ({}, [f(2, 3, 4), np.array([1])]),
        "ReduceSum": ({"keepdims": 0}, [f(2, 3, 4), np.array([0, -1])]),
        "ReduceMax": ({"axes": [1]}, [f(2, 3, 4)]),
        "LayerNormalization": ({}, [f(2, 3, 4), pos(4), f(4)]),
        # recurrent layers: the recurrence written out (lengths, peepholes), torch's fused GRU
        "LSTM": (
            {"direction": "bidirectional"},
            [
                f(3, 2, 2),
                f(2, 8, 2),
                f(2, 8, 2),
                f(2, 16),
                np.array([3, 1]),
                f(2, 2, 2),
                f(2, 2, 2),
                f(2, 6),
            ],
        ),
        "GRU": ({"linear_before_reset": 1}, [f(3, 2, 2), f(1, 6, 2), f(1, 6, 2), f(1, 12)]),
        "Split": ({"axis": 1}, [f(2, 5), np.array([2, 3])]),
        "Trilu": ({"upper": 0}, [f(2, 3, 4), np.array(1)]),
    }


def broadcastable(data: st.DataObject, full: Sequence[int]) -> tuple[int, ...]:
    """A shape that broadcasts to ``full``: a suffix of it with some sizes set to 1."""
    rank = data.draw(st.integers(0, len(full)))
    suffix = full[len(full) - rank :]
    return tuple(1 if data.draw(st.booleans()) else d for d in suffix)


def conv_geometry(data: st.DataObject, rank: int) -> tuple[list[int], list[int], list[int]]:
    """Kernel, strides and dilations for ``rank`` spatial axes (a smaller kernel in 3-D)."""
    top = 2 if rank == 3 else 3
    kernel = [data.draw(small(top)) for _ in range(rank)]
    strides = [data.draw(small(2)) for _ in range(rank)]
    dilations = [data.draw(small(2)) for _ in range(rank)]
    return kernel, strides, dilations


# -- checks -------------------------------------------------------------------------


@functools.cache
def reference_backend() -> OperatorBackend:
    """d5's numpy operator backend, loaded as any plugin would load it."""
    from d5core.plugins import get_plugin_manager

    cls: type[OperatorBackend] = get_plugin_manager().load("d5.operators", "numpy")
    return cls()


def _as_dtype(inputs: Sequence[Any], dtype: str) -> list[np.ndarray]:
    """``inputs`` as arrays, the floating ones cast to ``dtype`` (indices, shapes and
    flags keep theirs)."""
    return [
        np.asarray(x, dtype=dtype) if np.asarray(x).dtype.kind == "f" else np.asarray(x)
        for x in inputs
    ]


def assert_agrees_with_reference(
    backend: OperatorBackend,
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[Any],
    dtype: str,
    *,
    tolerances: Tolerances | None = None,
    **kwargs: Any,
) -> None:
    """Validate ``backend``'s ``op_type`` against the reference's on ``inputs`` (floating
    ones cast to ``dtype``): the outputs and the backward must agree, and at least one
    gradient must have been both compared with the reference and checked numerically
    (unless the reference declares that no floating input has a gradient).
    ``kwargs`` go to :func:`~d5core.validate.validate_operator`."""
    arrays = _as_dtype(inputs, dtype)
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    candidate = backend.create(op_type, attributes, descriptors)
    expected = reference_backend().create(op_type, attributes, descriptors)
    report = validate_operator(candidate, expected, arrays, tolerances=tolerances, **kwargs)
    problem = f"{op_type} {dict(attributes)} on {[a.shape for a in arrays]} ({dtype})"
    assert report.passed, f"{backend.name} {problem}: " + "; ".join(report.failures())
    assert report.outputs, f"{backend.name} {problem}: no output was compared"
    floating = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    if not expected.differentiable or all(expected.declares_no_gradient(i) for i in floating):
        return  # nothing has a gradient (ConstantOfShape, a comparison, a cast to ints)
    compared = [g for g in report.gradients if g.method == "reference" and not g.skipped]
    checked = [g for g in report.gradients if g.method != "reference" and not g.skipped]
    assert compared and checked, f"{backend.name} {problem}: no gradient was compared or checked"


def assert_refused(
    backend: OperatorBackend,
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[Any],
    dtype: str,
    pattern: str,
) -> None:
    """``backend`` refuses the problem when the operator is created, with a one-line
    :class:`~d5core.errors.UsageError` that starts with the operator type and matches the
    regular expression ``pattern``."""
    descriptors = [TensorDescriptor.of(a) for a in _as_dtype(inputs, dtype)]
    with pytest.raises(UsageError) as excinfo:
        backend.create(op_type, attributes, descriptors)
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith(f"{op_type}: "), message
    assert re.search(pattern, message), f"{message!r} does not match {pattern!r}"


# -- NaN and infinity ---------------------------------------------------------------

#: The non-finite values the fixed problems put in an input, by name.
NONFINITE_VALUES: Mapping[str, float] = MappingProxyType(
    {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf}
)
_PLACES = ("first", "middle", "last")


def _place(place: str, size: int) -> int:
    return {"first": 0, "middle": size // 2, "last": size - 1}[place]


def _with(x: np.ndarray, index: tuple[int, ...], value: float) -> np.ndarray:
    y = np.array(x, dtype=np.float64)
    y[index] = value
    return y


def nonfinite_problems(op_type: str, spatial_rank: int = 2) -> dict[str, Problem]:
    """Fixed problems with one NaN or infinity in an input, by case id (``"nan at the
    middle of the window"``), for the operators that have them (an empty dict for the
    others). The value is put first, in the middle and last of what one output element
    reads: a pooling window (of ``spatial_rank`` spatial axes), a row of A or a column of
    B (Gemm, with ``alpha`` and ``beta`` 0 too, and C; MatMul), a softmax row, an
    activation's input."""
    rng = np.random.default_rng(11)
    cases: dict[str, Problem] = {}
    for name, value in NONFINITE_VALUES.items():
        for place in _PLACES:
            at = f"{name} at the {place}"
            if op_type in ("Relu", "LeakyRelu", "Sigmoid", "Tanh"):
                x = away_from_zero(rng, (2, 7))
                cases[f"{at} of a row"] = ({}, [_with(x, (1, _place(place, 7)), value)])
            elif op_type in ("MaxPool", "AveragePool"):
                k = 3
                shape = (1, 2, *([5] * spatial_rank))
                x = distinct(rng, shape)
                tap = _place(place, k)
                index = (0, 1, *([1 + tap] * spatial_rank))  # in the window of output 1
                attributes = {"kernel_shape": [k] * spatial_rank, "strides": [1] * spatial_rank}
                cases[f"{at} of the window"] = (attributes, [_with(x, index, value)])
            elif op_type == "Gemm":
                a, b, c = normal(rng, (3, 5)), normal(rng, (5, 4)), normal(rng, (3, 4))
                cases[f"{at} of a row of A"] = ({}, [_with(a, (1, _place(place, 5)), value), b, c])
                cases[f"{at} of a column of B"] = (
                    {},
                    [a, _with(b, (_place(place, 5), 2), value), c],
                )
                cases[f"{at} of C"] = ({}, [a, b, _with(c, (1, _place(place, 4)), value)])
                cases[f"{at} of a row of A, alpha 0"] = (
                    {"alpha": 0.0},
                    [_with(a, (1, _place(place, 5)), value), b, c],
                )
                cases[f"{at} of C, beta 0"] = (
                    {"beta": 0.0},
                    [a, b, _with(c, (_place(place, 3), 1), value)],
                )
            elif op_type == "MatMul":
                a, b = normal(rng, (2, 3, 5)), normal(rng, (5, 4))
                cases[f"{at} of a row of A"] = ({}, [_with(a, (1, 1, _place(place, 5)), value), b])
                cases[f"{at} of a column of B"] = ({}, [a, _with(b, (_place(place, 5), 3), value)])
            elif op_type in ("Softmax", "LogSoftmax"):
                x = normal(rng, (3, 6))
                cases[f"{at} of a row"] = ({"axis": -1}, [_with(x, (1, _place(place, 6)), value)])
    return cases


def _nonfinite_disagreement(
    backend: OperatorBackend,
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[Any],
    dtype: str,
    tolerances: Tolerances | None,
) -> str:
    """Why ``backend``'s forward differs from the reference's on a problem whose inputs
    hold NaN or infinity (non-finite values must coincide), or ``""`` when it agrees."""
    from d5core.validate import compare_outputs

    arrays = _as_dtype(inputs, dtype)
    descriptors = [TensorDescriptor.of(a) for a in arrays]
    with np.errstate(all="ignore"):
        expected = reference_backend().create(op_type, attributes, descriptors).forward(arrays)
        try:
            actual = backend.create(op_type, attributes, descriptors).forward(arrays)
        except Exception as exc:  # a backend that raises on NaN disagrees, it does not crash
            return f"raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    checks = compare_outputs(
        [np.asarray(a) for a in actual], expected, tolerances=tolerances, allow_nonfinite=True
    )
    return "; ".join(f"{c.label}: {c.detail}" for c in checks if not c.passed)


# -- the test base class ------------------------------------------------------------


@dataclass(frozen=True)
class Extents:
    """The largest sizes the properties draw where backends want different ones (a
    native kernel may need sizes past its blocking to reach every code path)."""

    #: ``M``, ``K`` and ``N`` of Gemm.
    gemm: int = 4
    #: The contracted axis of MatMul.
    matmul_inner: int = 4
    #: The rows of MatMul's first operand and the columns of its second.
    matmul_outer: int = 3
    #: Each axis of the input of an activation, Softmax or LogSoftmax.
    activation: int = 4
    #: The batch of a convolution's input.
    conv_batch: int = 2
    #: The channels of a pool's input.
    pool_channels: int = 2


#: The method of :class:`OperatorAgreementTests` that draws a problem, by operator:
#: every operator of the reference has one.
PROPERTIES: Mapping[str, str] = MappingProxyType(
    {
        "Gemm": "draw_gemm",
        "MatMul": "draw_matmul",
        "Conv": "draw_conv",
        "ConvTranspose": "draw_conv_transpose",
        "MaxPool": "draw_max_pool",
        "AveragePool": "draw_average_pool",
        "GlobalAveragePool": "draw_global_average_pool",
        **dict.fromkeys(("Relu", "LeakyRelu", "Sigmoid", "Tanh"), "draw_activation"),
        **dict.fromkeys(("Softmax", "LogSoftmax"), "draw_softmax"),
        "BatchNormalization": "draw_batch_normalization",
        "Dropout": "draw_dropout",
        **dict.fromkeys(("Add", "Sub", "Mul", "Div"), "draw_binary"),
        "Sum": "draw_sum",
        "Reshape": "draw_reshape",
        "Flatten": "draw_flatten",
        "Transpose": "draw_transpose",
        "Concat": "draw_concat",
        "Squeeze": "draw_squeeze",
        "Unsqueeze": "draw_unsqueeze",
        "Identity": "draw_identity",
        "SoftmaxCrossEntropyLoss": "draw_softmax_cross_entropy_loss",
        "MeanSquaredError": "draw_mean_squared_error",
        "LSTM": "draw_lstm",
        "GRU": "draw_gru",
        # -- transformer operators --
        "Gather": "draw_gather",
        "GatherElements": "draw_gather_elements",
        "Slice": "draw_slice",
        "Shape": "draw_shape",
        "ConstantOfShape": "draw_constant_of_shape",
        "Expand": "draw_expand",
        "Where": "draw_where",
        **dict.fromkeys(("Equal", "Less", "Greater"), "draw_comparison"),
        "Cast": "draw_cast",
        "Pow": "draw_pow",
        **dict.fromkeys(("Sqrt", "Erf", "Exp", "Log", "Gelu"), "draw_elementary"),
        **dict.fromkeys(("ReduceMean", "ReduceSum", "ReduceMax"), "draw_reduce"),
        "LayerNormalization": "draw_layer_normalization",
        "Split": "draw_split",
        "Trilu": "draw_trilu",
    }
)

#: The operators every backend that does not list its own (``operators = None``) must
#: offer: those of the first reference. The operators added since (recurrent layers,
#: the transformer operators) are tested where a backend offers them.
CORE_OPERATORS: frozenset[str] = frozenset(
    {
        "Gemm", "MatMul", "Conv", "ConvTranspose", "MaxPool", "AveragePool",
        "GlobalAveragePool", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax",
        "BatchNormalization", "Dropout", "Add", "Sub", "Mul", "Div", "Sum", "Reshape",
        "Flatten", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Identity",
        "SoftmaxCrossEntropyLoss", "MeanSquaredError",
    }
)  # fmt: skip


class OperatorAgreementTests:
    """Every operator of a backend agrees with the numpy reference, forward and backward;
    subclass it with ``backend`` set (see the module docstring)."""

    #: The backend under test (an instance).
    backend: ClassVar[OperatorBackend]
    #: The operators under test; ``None``: every operator the backend offers, which must
    #: include :data:`CORE_OPERATORS`.
    operators: ClassVar[Collection[str] | None] = None
    #: The dtypes every property and fixed case runs in.
    dtypes: ClassVar[Sequence[str]] = ("float32", "float64")
    #: The dtypes ``d5 validate op`` is run in on each operator's default problem.
    default_problem_dtypes: ClassVar[Sequence[str]] = ("float32", "float64")
    #: Examples per property (see :func:`property_examples`).
    examples: ClassVar[int] = 10
    #: The largest sizes drawn.
    extents: ClassVar[Extents] = Extents()
    #: The spatial ranks of the convolutions and pools drawn.
    spatial_ranks: ClassVar[Sequence[int]] = (1, 2, 3)
    #: Whether Dropout in training with a nonzero ratio draws the reference's mask for
    #: the same seed; if not, training is drawn only with ratio 0, where the mask is all
    #: true.
    seeded_dropout: ClassVar[bool] = True
    #: Whether tensors with an axis of size 0 are accepted.
    zero_size_tensors: ClassVar[bool] = True
    #: Tolerances for the comparisons with the reference (d5's defaults when ``None``).
    tolerances: ClassVar[Tolerances | None] = None
    #: The NaN and infinity cases (:func:`nonfinite_problems`) on which the backend's
    #: framework genuinely differs from the reference, each with the reason, by
    #: ``(op_type, pattern)`` for every dtype or ``(op_type, pattern, dtype)`` for one;
    #: the pattern is a regular expression that must match the whole case id (``"nan at
    #: .* of the window"``). Each declaration must still match a differing case (one that
    #: no longer does fails the test); every case it does not match must agree.
    nonfinite_differences: ClassVar[Mapping[tuple[str, ...], str]] = MappingProxyType({})

    def refusal(self, op_type: str, attributes: Mapping[str, Any]) -> str | None:
        """A regular expression the one-line error must match when the backend refuses
        this problem by design, or ``None`` when it must compute it. Override it for
        attribute combinations a backend cannot express."""
        return None

    def excluded(self, op_type: str, attributes: Mapping[str, Any], inputs: Sequence[Any]) -> bool:
        """Whether a drawn problem is left out of the properties. Override it only for a
        known bug, narrowly, and pin the bug with a strict ``xfail`` test of its own, so
        that the exclusion goes once the bug is fixed."""
        return False

    # -- plumbing -------------------------------------------------------------------

    @classmethod
    def operator_types(cls) -> list[str]:
        """The operators under test, in the order of :data:`PROPERTIES`."""
        if cls.operators is not None:
            offered = set(cls.operators)
        elif getattr(cls, "backend", None) is not None:
            offered = set(cls.backend.supported())
        else:  # a base class that names no backend yet
            offered = set(PROPERTIES)
        return [op for op in PROPERTIES if op in offered] + sorted(offered - set(PROPERTIES))

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize the tests by the subclass's operators and dtypes."""
        if "op_type" in metafunc.fixturenames:
            ops = self.operator_types()
            if (
                metafunc.definition.originalname
                == "test_nonfinite_values_land_where_the_reference_puts_them"
            ):
                ops = [op for op in ops if nonfinite_problems(op)]
            metafunc.parametrize("op_type", ops)
        if "dtype" in metafunc.fixturenames:
            name = metafunc.definition.originalname
            default_problem = name == "test_d5_validates_every_default_problem"
            dtypes = self.default_problem_dtypes if default_problem else self.dtypes
            metafunc.parametrize("dtype", list(dtypes))

    def check(
        self, op_type: str, attributes: Mapping[str, Any], inputs: Sequence[Any], dtype: str
    ) -> None:
        """Assert the backend agrees with the reference on the problem, or refuses it as
        :meth:`refusal` says it must."""
        pattern = self.refusal(op_type, attributes)
        if pattern is not None:
            assert_refused(self.backend, op_type, attributes, inputs, dtype, pattern)
        else:
            assert_agrees_with_reference(
                self.backend, op_type, attributes, inputs, dtype, tolerances=self.tolerances
            )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Leave out, rather than skip, the fixed-case tests that cannot apply to the
        subclass's backend: a test a lane can never run is no test there."""
        super().__init_subclass__(**kwargs)
        offered = set(cls.operator_types())
        if "MaxPool" not in offered:
            cls.test_max_pool_indices_when_a_begin_pad_and_an_end_crop_cancel = None  # type: ignore[assignment]
        if "Reshape" not in offered or not cls.zero_size_tensors:
            cls.test_reshape_with_allowzero_keeps_a_literal_zero = None  # type: ignore[assignment]
        if not any(nonfinite_problems(op) for op in offered):
            cls.test_nonfinite_values_land_where_the_reference_puts_them = None  # type: ignore[assignment]

    # -- problems -------------------------------------------------------------------

    def draw_gemm(self, data: st.DataObject, op_type: str) -> Problem:
        top = self.extents.gemm
        m, k, n = data.draw(small(top)), data.draw(small(top)), data.draw(small(top))
        trans_a, trans_b = data.draw(st.booleans()), data.draw(st.booleans())
        attributes = {
            "alpha": data.draw(st.sampled_from([1.0, 0.5, -2.0])),
            "beta": data.draw(st.sampled_from([1.0, 0.25, 0.0])),
            "transA": int(trans_a),
            "transB": int(trans_b),
        }
        c_shape = data.draw(st.sampled_from([None, (m, n), (n,), (1, n), (m, 1), ()]))
        rng = rng_of(data)
        inputs = [
            normal(rng, (k, m) if trans_a else (m, k)),
            normal(rng, (n, k) if trans_b else (k, n)),
        ]
        if c_shape is not None:
            inputs.append(normal(rng, c_shape))
        return attributes, inputs

    def draw_matmul(self, data: st.DataObject, op_type: str) -> Problem:
        """Vectors and batched matrices whose batch axes broadcast."""
        k = data.draw(small(self.extents.matmul_inner))
        outer = small(self.extents.matmul_outer)
        batch = data.draw(st.lists(small(3), max_size=2))
        a_vector, b_vector = data.draw(st.booleans()), data.draw(st.booleans())
        a = (k,) if a_vector else (*broadcastable(data, batch), data.draw(outer), k)
        b = (k,) if b_vector else (*broadcastable(data, batch), k, data.draw(outer))
        rng = rng_of(data)
        return {}, [normal(rng, a), normal(rng, b)]

    def draw_conv(self, data: st.DataObject, op_type: str) -> Problem:
        """Groups, strides, dilations, explicit pads or each auto_pad, with or without a
        bias."""
        rank = data.draw(st.sampled_from(list(self.spatial_ranks)))
        group = data.draw(small(2))
        c, m = group * data.draw(small(2)), group * data.draw(small(2))
        kernel, strides, dilations = conv_geometry(data, rank)
        attributes: dict[str, Any] = {
            "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
            "group": group,
            "strides": strides,
            "dilations": dilations,
            "kernel_shape": kernel,
        }
        if attributes["auto_pad"] == "NOTSET":
            attributes["pads"] = [data.draw(st.integers(0, 2)) for _ in range(2 * rank)]
        extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
        sizes = [e + data.draw(st.integers(0, 2 if rank == 3 else 3)) for e in extents]
        rng = rng_of(data)
        batch = data.draw(small(self.extents.conv_batch))
        inputs = [normal(rng, (batch, c, *sizes)), normal(rng, (m, c // group, *kernel))]
        if data.draw(st.booleans()):
            inputs.append(normal(rng, (m,)))
        return attributes, inputs

    def draw_conv_transpose(self, data: st.DataObject, op_type: str) -> Problem:
        """As :meth:`draw_conv`, plus output padding and an output shape, smaller or
        larger than the natural one; explicit pads never crop the whole output."""
        rank = data.draw(st.sampled_from(list(self.spatial_ranks)))
        group = data.draw(small(2))
        c, m = group * data.draw(small(2)), group * data.draw(small(2))
        kernel, strides, dilations = conv_geometry(data, rank)
        sizes = [data.draw(small(2 if rank == 3 else 3)) for _ in range(rank)]
        output_padding = [
            data.draw(st.integers(0, max(s, d) - 1))
            for s, d in zip(strides, dilations, strict=True)
        ]
        full = [
            s * (i - 1) + p + (k - 1) * d + 1
            for s, i, p, k, d in zip(strides, sizes, output_padding, kernel, dilations, strict=True)
        ]
        attributes: dict[str, Any] = {
            "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
            "group": group,
            "strides": strides,
            "dilations": dilations,
            "output_padding": output_padding,
        }
        if attributes["auto_pad"] == "NOTSET":
            if data.draw(st.booleans()):
                shape = [max(1, f + data.draw(st.integers(-2, 1))) for f in full]
                attributes["output_shape"] = shape
            else:
                pads = [data.draw(st.integers(0, 2)) for _ in range(2 * rank)]
                limits = [(f - 1) // 2 for f in full * 2]
                attributes["pads"] = [min(p, t) for p, t in zip(pads, limits, strict=True)]
        rng = rng_of(data)
        batch = data.draw(small(self.extents.conv_batch))
        inputs = [normal(rng, (batch, c, *sizes)), normal(rng, (c, m // group, *kernel))]
        if data.draw(st.booleans()):
            inputs.append(normal(rng, (m,)))
        return attributes, inputs

    def pool_problem(self, data: st.DataObject) -> tuple[dict[str, Any], list[int]]:
        """Attributes and an input shape for a pool. Pads stay within the dilated
        kernel's reach (``(k - 1) * d``) so that no window lies wholly in padding."""
        rank = data.draw(st.sampled_from(list(self.spatial_ranks)))
        top = 2 if rank == 3 else 3
        kernel = [data.draw(small(top)) for _ in range(rank)]
        strides = [data.draw(small(3)) for _ in range(rank)]
        dilations = [data.draw(small(2)) for _ in range(rank)]
        attributes: dict[str, Any] = {
            "kernel_shape": kernel,
            "strides": strides,
            "dilations": dilations,
            "auto_pad": data.draw(st.sampled_from(AUTO_PADS)),
            "ceil_mode": int(data.draw(st.booleans())),
        }
        if attributes["auto_pad"] == "NOTSET":
            reach = [(k - 1) * d for k, d in zip(kernel, dilations, strict=True)] * 2
            attributes["pads"] = [data.draw(st.integers(0, min(r, 2))) for r in reach]
        sizes = [
            (k - 1) * d + 1 + data.draw(st.integers(0, 3))
            for k, d in zip(kernel, dilations, strict=True)
        ]
        channels = data.draw(small(self.extents.pool_channels))
        return attributes, [data.draw(small(2)), channels, *sizes]

    def draw_max_pool(self, data: st.DataObject, op_type: str) -> Problem:
        attributes, shape = self.pool_problem(data)
        attributes["storage_order"] = int(data.draw(st.booleans()))
        return attributes, [distinct(rng_of(data), shape)]

    def draw_average_pool(self, data: st.DataObject, op_type: str) -> Problem:
        attributes, shape = self.pool_problem(data)
        attributes["count_include_pad"] = int(data.draw(st.booleans()))
        return attributes, [normal(rng_of(data), shape)]

    def draw_global_average_pool(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(3), min_size=3, max_size=5))
        return {}, [normal(rng_of(data), shape)]

    def draw_activation(self, data: st.DataObject, op_type: str) -> Problem:
        """Relu, LeakyRelu (with a negative slope and one above 1 too), Sigmoid, Tanh."""
        shape = data.draw(st.lists(small(self.extents.activation), max_size=3))
        attributes: dict[str, Any] = {}
        if op_type == "LeakyRelu" and data.draw(st.booleans()):
            attributes["alpha"] = data.draw(st.sampled_from([0.2, -0.5, 1.5]))
        return attributes, [away_from_zero(rng_of(data), shape) * 2]

    def draw_softmax(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(self.extents.activation), min_size=1, max_size=3))
        attributes: dict[str, Any] = {}
        if data.draw(st.booleans()):
            attributes["axis"] = data.draw(st.integers(-len(shape), len(shape) - 1))
        return attributes, [normal(rng_of(data), shape) * 3]

    def draw_batch_normalization(self, data: st.DataObject, op_type: str) -> Problem:
        """Inference and training, 2-D to 4-D, positive scales and variances."""
        c = data.draw(small(3))
        shape = [data.draw(small(3)), c, *data.draw(st.lists(small(3), max_size=2))]
        attributes = {
            "training_mode": int(data.draw(st.booleans())),
            "momentum": data.draw(st.sampled_from([0.9, 0.5, 0.0])),
            "epsilon": data.draw(st.sampled_from([1e-5, 1e-2])),
        }
        rng = rng_of(data)
        positive = rng.uniform(0.5, 1.5, (2, c))
        return attributes, [
            normal(rng, shape),
            positive[0],
            normal(rng, (c,)),
            normal(rng, (c,)),
            positive[1],
        ]

    def draw_dropout(self, data: st.DataObject, op_type: str) -> Problem:
        """Inference, training with ratio 0, and (where :attr:`seeded_dropout`) training
        with a real ratio; ratio and mode as attributes or as inputs."""
        shape = data.draw(st.lists(small(4), max_size=3))
        rng = rng_of(data)
        inputs = [normal(rng, shape)]
        ratio = data.draw(st.sampled_from([0.0, 0.3, 0.5]))
        training = data.draw(st.booleans()) and (self.seeded_dropout or ratio == 0.0)
        attributes: dict[str, Any] = {"seed": data.draw(st.integers(0, 99))}
        if data.draw(st.booleans()):
            inputs += [np.array(ratio), np.array(training)]
        else:
            attributes.update(ratio=ratio, training_mode=int(training))
        return attributes, inputs

    def draw_binary(self, data: st.DataObject, op_type: str) -> Problem:
        """Add, Sub, Mul and Div with either operand broadcast; divisors away from 0."""
        full = data.draw(st.lists(small(3), max_size=3))
        a, b = broadcastable(data, full), broadcastable(data, full)
        if data.draw(st.booleans()):
            a = tuple(full)
        rng = rng_of(data)
        divisor = away_from_zero(rng, b) * 2 if op_type == "Div" else normal(rng, b)
        return {}, [normal(rng, a), divisor]

    def draw_sum(self, data: st.DataObject, op_type: str) -> Problem:
        """One to four operands; the first has the full shape, the others may broadcast."""
        full = data.draw(st.lists(small(3), max_size=3))
        count = data.draw(st.integers(1, 4))
        shapes = [tuple(full)] + [
            tuple(full) if data.draw(st.booleans()) else broadcastable(data, full)
            for _ in range(count - 1)
        ]
        rng = rng_of(data)
        return {}, [normal(rng, s) for s in shapes]

    def draw_reshape(self, data: st.DataObject, op_type: str) -> Problem:
        """A 2-D target, with -1 for one axis or 0 for a kept one (without allowzero)."""
        shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
        total = math.prod(shape)
        factors = [f for f in range(1, total + 1) if total % f == 0]
        first = data.draw(st.sampled_from(factors))
        target = [first, total // first]
        if data.draw(st.booleans()):
            target[data.draw(st.integers(0, 1))] = -1
        allowzero = int(data.draw(st.booleans()))
        if not allowzero:
            target = [0 if i < len(shape) and t == shape[i] else t for i, t in enumerate(target)]
        inputs = [normal(rng_of(data), shape), np.array(target, dtype=np.int64)]
        return {"allowzero": allowzero}, inputs

    def draw_flatten(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(3), min_size=1, max_size=4))
        axis = data.draw(st.integers(-len(shape), len(shape)))
        return {"axis": axis}, [normal(rng_of(data), shape)]

    def draw_transpose(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(4), min_size=1, max_size=4))
        perm = data.draw(st.none() | st.permutations(list(range(len(shape)))))
        attributes = {} if perm is None else {"perm": perm}
        return attributes, [normal(rng_of(data), shape)]

    def draw_concat(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(3), min_size=1, max_size=3))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        rng = rng_of(data)
        inputs = []
        for _ in range(data.draw(st.integers(1, 3))):
            part = list(shape)
            part[axis] = data.draw(small(3))
            inputs.append(normal(rng, part))
        return {"axis": axis}, inputs

    def draw_squeeze(self, data: st.DataObject, op_type: str) -> Problem:
        """Every axis of size 1, or some of them given as axes, positive or negative."""
        shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
        ones = [i for i, d in enumerate(shape) if d == 1]
        inputs = [normal(rng_of(data), shape)]
        given_axes: bool = data.draw(st.booleans())
        if ones and given_axes:
            chosen = data.draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
            negative = [data.draw(st.booleans()) for _ in chosen]
            axes = [a - len(shape) if n else a for a, n in zip(chosen, negative, strict=True)]
            inputs.append(np.array(axes, dtype=np.int64))
        return {}, inputs

    def draw_unsqueeze(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(3), max_size=3))
        count = data.draw(st.integers(1, 2))
        rank = len(shape) + count
        axes = data.draw(
            st.lists(st.integers(0, rank - 1), min_size=count, max_size=count, unique=True)
        )
        axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
        return {}, [normal(rng_of(data), shape), np.array(axes, dtype=np.int64)]

    def draw_identity(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(4), max_size=3))
        return {}, [normal(rng_of(data), shape)]

    def draw_softmax_cross_entropy_loss(self, data: st.DataObject, op_type: str) -> Problem:
        """Each reduction, extra spatial axes, an ignored index (never every label) and
        class weights."""
        n, c = data.draw(small(3)), data.draw(st.integers(2, 4))
        extra = data.draw(st.lists(small(2), max_size=2))
        rng = rng_of(data)
        labels = rng.integers(0, c, (n, *extra))
        attributes: dict[str, Any] = {"reduction": data.draw(st.sampled_from(REDUCTIONS))}
        ignore = data.draw(st.none() | st.integers(-1, c - 1))
        if ignore is not None:
            attributes["ignore_index"] = ignore
            labels[rng.random(labels.shape) < 0.3] = ignore
            labels.reshape(-1)[0] = (ignore + 1) % c  # at least one label counts
        inputs = [normal(rng, (n, c, *extra)), labels]
        if data.draw(st.booleans()):
            inputs.append(rng.uniform(0.5, 1.5, c))
        return attributes, inputs

    def draw_mean_squared_error(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(4), max_size=3))
        reduction = data.draw(st.sampled_from(REDUCTIONS))
        rng = rng_of(data)
        return {"reduction": reduction}, [normal(rng, shape), normal(rng, shape)]

    def draw_recurrent(self, data: st.DataObject, op_type: str) -> Problem:
        """LSTM or GRU: each direction and layout, 3 to all inputs (lengths from 0 to
        the sequence's, initial states, peepholes), clip, input_forget or
        linear_before_reset, and smooth activations other than the defaults."""
        gates = 4 if op_type == "LSTM" else 3
        direction = data.draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
        d = 2 if direction == "bidirectional" else 1
        layout = int(data.draw(st.booleans()))
        steps, batch = data.draw(small(3)), data.draw(small(2))
        size, hidden = data.draw(small(2)), data.draw(small(2))
        attributes: dict[str, Any] = {"direction": direction, "layout": layout}
        if data.draw(st.booleans()):
            attributes["hidden_size"] = hidden
        if data.draw(st.booleans()):
            attributes["clip"] = data.draw(st.sampled_from([0.5, 2.0]))
        flag = "input_forget" if op_type == "LSTM" else "linear_before_reset"
        attributes[flag] = int(data.draw(st.booleans()))
        if data.draw(st.booleans()):
            smooth = ["Sigmoid", "Tanh", "Softsign", "ScaledTanh", "Softplus", "Affine"]
            count = d * (3 if op_type == "LSTM" else 2)
            attributes["activations"] = [data.draw(st.sampled_from(smooth)) for _ in range(count)]
            if data.draw(st.booleans()):
                attributes["activation_alpha"] = [0.8, 1.2]
                attributes["activation_beta"] = [0.5]
        rng = rng_of(data)
        state = (d, batch, hidden) if layout == 0 else (batch, d, hidden)
        inputs = [
            normal(rng, (steps, batch, size) if layout == 0 else (batch, steps, size)),
            normal(rng, (d, gates * hidden, size)) * 0.7,
            normal(rng, (d, gates * hidden, hidden)) * 0.7,
            normal(rng, (d, 2 * gates * hidden)) * 0.5,
            rng.integers(0, steps + 1, batch).astype(np.int32),
            normal(rng, state),
        ]
        if op_type == "LSTM":
            inputs += [normal(rng, state), normal(rng, (d, 3 * hidden)) * 0.5]
        count = data.draw(st.integers(3, len(inputs)))
        return attributes, inputs[:count]

    def draw_lstm(self, data: st.DataObject, op_type: str) -> Problem:
        return self.draw_recurrent(data, op_type)

    def draw_gru(self, data: st.DataObject, op_type: str) -> Problem:
        return self.draw_recurrent(data, op_type)

    # -- transformer operators --------------------------------------------------------

    def draw_gather(self, data: st.DataObject, op_type: str) -> Problem:
        """Any axis, positive or negative; indices of rank 0 to 2, negative ones too,
        repeated ones (their gradients add up)."""
        shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        size = shape[axis]
        rng = rng_of(data)
        indices = rng.integers(-size, size, data.draw(st.lists(small(3), max_size=2)))
        return {"axis": axis}, [normal(rng, shape), indices.astype(np.int64)]

    def draw_gather_elements(self, data: st.DataObject, op_type: str) -> Problem:
        """Indices of the data's rank, no larger on the other axes."""
        shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        own = axis % len(shape)
        index_shape = [
            data.draw(small(3)) if i == own else data.draw(small(n)) for i, n in enumerate(shape)
        ]
        size = shape[axis]
        rng = rng_of(data)
        indices = rng.integers(-size, size, index_shape).astype(np.int64)
        return {"axis": axis}, [normal(rng, shape), indices]

    def draw_slice(self, data: st.DataObject, op_type: str) -> Problem:
        """Some axes (any order, negative too), starts and ends in and out of range
        (clamped), steps of either sign; axes and steps left out at times."""
        shape = data.draw(st.lists(small(5), min_size=1, max_size=3))
        rank = len(shape)
        axes = data.draw(st.permutations(list(range(rank))))[: data.draw(st.integers(1, rank))]
        bounds = st.integers(-7, 7) | st.sampled_from([-(2**31), 2**31 - 1])
        starts = [data.draw(bounds) for _ in axes]
        ends = [data.draw(bounds) for _ in axes]
        steps = [data.draw(st.sampled_from([1, 2, -1, -2])) for _ in axes]
        signed = [a - rank if data.draw(st.booleans()) else a for a in axes]
        inputs: list[Any] = [normal(rng_of(data), shape), np.array(starts), np.array(ends)]
        form = data.draw(st.sampled_from(["all", "axes", "none"]))
        if form == "none":
            signed, steps = list(range(len(axes))), [1] * len(axes)
        elif form == "axes":
            steps = [1] * len(axes)
        if form != "none":
            inputs.append(np.array(signed))
        if form == "all":
            inputs.append(np.array(steps))
        if not self.zero_size_tensors:
            out = reference_backend().create(
                "Slice", {}, [TensorDescriptor.of(np.asarray(x)) for x in inputs]
            )
            assume(out.forward([np.asarray(x) for x in inputs])[0].size > 0)
        return {}, [np.asarray(x, dtype=np.int64) if i else x for i, x in enumerate(inputs)]

    def draw_shape(self, data: st.DataObject, op_type: str) -> Problem:
        shape = data.draw(st.lists(small(3), max_size=4))
        attributes: dict[str, Any] = {}
        if data.draw(st.booleans()):
            attributes["start"] = data.draw(st.integers(-5, 5))
        if data.draw(st.booleans()):
            attributes["end"] = data.draw(st.integers(-5, 5))
        return attributes, [normal(rng_of(data), shape)]

    def draw_constant_of_shape(self, data: st.DataObject, op_type: str) -> Problem:
        """A shape of rank 0 to 3; the value absent (float32 0), a float or an integer."""
        low = 0 if self.zero_size_tensors else 1
        shape = data.draw(st.lists(st.integers(low, 3), max_size=3))
        value = data.draw(
            st.sampled_from(
                [None, np.array([1.5]), np.array([-2.0], np.float32), np.array([3], np.int64)]
            )
        )
        attributes = {} if value is None else {"value": value}
        return attributes, [np.array(shape, dtype=np.int64)]

    def draw_expand(self, data: st.DataObject, op_type: str) -> Problem:
        """Input and target shape both broadcast to a common one, in both directions."""
        full = data.draw(st.lists(small(3), max_size=3))
        x, target = broadcastable(data, full), broadcastable(data, full)
        return {}, [normal(rng_of(data), x), np.array(target, dtype=np.int64)]

    def draw_where(self, data: st.DataObject, op_type: str) -> Problem:
        full = data.draw(st.lists(small(3), max_size=3))
        shapes = [broadcastable(data, full) for _ in range(3)]
        rng = rng_of(data)
        condition = rng.random(shapes[0]) < 0.5
        return {}, [condition, normal(rng, shapes[1]), normal(rng, shapes[2])]

    def draw_comparison(self, data: st.DataObject, op_type: str) -> Problem:
        """Equal, Less and Greater on small whole numbers, so that ties occur."""
        full = data.draw(st.lists(small(3), max_size=3))
        a, b = broadcastable(data, full), broadcastable(data, full)
        rng = rng_of(data)
        return {}, [rng.integers(-2, 3, a).astype(np.float64), rng.integers(-2, 3, b) * 1.0]

    def draw_cast(self, data: st.DataObject, op_type: str) -> Problem:
        """To DOUBLE (a gradient), or to INT64, INT32 or BOOL (none); zeros included."""
        shape = data.draw(st.lists(small(4), max_size=3))
        to = data.draw(st.sampled_from([11, 7, 6, 9]))
        rng = rng_of(data)
        x = np.array(normal(rng, shape) * 3)
        x[rng.random(x.shape) < 0.2] = 0.0
        return {"to": to}, [x]

    def draw_pow(self, data: st.DataObject, op_type: str) -> Problem:
        """Positive bases (where the exponent's gradient is defined), exponents of either
        sign, broadcast either way."""
        full = data.draw(st.lists(small(3), max_size=3))
        a, b = broadcastable(data, full), broadcastable(data, full)
        rng = rng_of(data)
        return {}, [rng.uniform(0.5, 2.0, a), normal(rng, b)]

    def draw_elementary(self, data: st.DataObject, op_type: str) -> Problem:
        """Sqrt and Log on positive values, Erf, Exp and Gelu (both forms) on any."""
        shape = data.draw(st.lists(small(4), max_size=3))
        rng = rng_of(data)
        attributes: dict[str, Any] = {}
        if op_type == "Gelu" and data.draw(st.booleans()):
            attributes["approximate"] = data.draw(st.sampled_from(["none", "tanh"]))
        if op_type in ("Sqrt", "Log"):
            return attributes, [rng.uniform(0.2, 3.0, shape)]
        return attributes, [normal(rng, shape) * 1.5]

    def draw_reduce(self, data: st.DataObject, op_type: str) -> Problem:
        """Some axes (negative too) as an input or an attribute, none at all, or an empty
        list with and without ``noop_with_empty_axes``; ``keepdims`` either way. Values
        are distinct, so that ReduceMax has no ties."""
        shape = data.draw(st.lists(small(3), min_size=1, max_size=3))
        rank = len(shape)
        attributes: dict[str, Any] = {
            "keepdims": int(data.draw(st.booleans())),
            "noop_with_empty_axes": int(data.draw(st.booleans())),
        }
        inputs: list[np.ndarray] = [distinct(rng_of(data), shape)]
        form = data.draw(st.sampled_from(["input", "attribute", "absent", "empty"]))
        axes = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, unique=True))
        axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
        if form == "input":
            inputs.append(np.array(axes, dtype=np.int64))
        elif form == "attribute":
            attributes["axes"] = axes
        elif form == "empty":
            inputs.append(np.zeros(0, dtype=np.int64))
        return attributes, inputs

    def draw_layer_normalization(self, data: st.DataObject, op_type: str) -> Problem:
        """Any axis; Scale and B of the normalized shape or broadcast to it, B optional;
        at least two normalized elements."""
        shape = data.draw(st.lists(small(4), min_size=1, max_size=3))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        normalized = shape[axis % len(shape) :]
        assume(math.prod(normalized) >= 2)
        rng = rng_of(data)
        attributes = {"axis": axis, "epsilon": data.draw(st.sampled_from([1e-5, 1e-2]))}
        inputs = [normal(rng, shape), normal(rng, broadcastable(data, normalized))]
        if data.draw(st.booleans()):
            inputs.append(normal(rng, broadcastable(data, normalized)))
        return attributes, inputs

    def draw_split(self, data: st.DataObject, op_type: str) -> Problem:
        """Any axis, positive or negative; sizes given as ``split`` (zeros too), or
        ``num_outputs`` pieces with a smaller (possibly empty) last one."""
        shape = data.draw(st.lists(small(5), min_size=1, max_size=3))
        axis = data.draw(st.integers(-len(shape), len(shape) - 1))
        length = shape[axis]
        inputs = [normal(rng_of(data), shape)]
        if data.draw(st.booleans()):
            count = data.draw(st.integers(1, length))
            chunk = -(-length // count)
            assume(length - chunk * (count - 1) >= 0)
            return {"axis": axis, "num_outputs": count}, inputs
        cuts = sorted(data.draw(st.lists(st.integers(0, length), max_size=3)))
        sizes = np.diff([0, *cuts, length])
        return {"axis": axis}, [*inputs, np.asarray(sizes, dtype=np.int64)]

    def draw_trilu(self, data: st.DataObject, op_type: str) -> Problem:
        """Upper or lower triangles of matrices and batches of them, with ``k`` left out
        or of either sign, past the matrix too."""
        shape = data.draw(st.lists(small(4), min_size=2, max_size=4))
        inputs = [normal(rng_of(data), shape)]
        if data.draw(st.booleans()):
            inputs.append(np.array(data.draw(st.integers(-5, 5)), dtype=np.int64))
        return {"upper": data.draw(st.sampled_from([0, 1]))}, inputs

    # -- tests ----------------------------------------------------------------------

    def test_operator_matches_the_reference(self, op_type: str, dtype: str) -> None:
        draw: Callable[[st.DataObject, str], Problem] = getattr(self, PROPERTIES[op_type])

        def case(data: st.DataObject) -> None:
            attributes, inputs = draw(data, op_type)
            assume(not self.excluded(op_type, attributes, inputs))
            self.check(op_type, attributes, inputs, dtype)

        run_property(case, self.examples)

    def test_nonfinite_values_land_where_the_reference_puts_them(
        self, op_type: str, dtype: str
    ) -> None:
        """NaN, +inf and -inf first, in the middle and last of a window or a row give the
        reference's outputs, forward (ONNX defines no gradient at a non-finite point):
        every case agrees, except those declared in :attr:`nonfinite_differences`, which
        must still differ."""
        rank = 2 if 2 in self.spatial_ranks else self.spatial_ranks[0]
        differing: dict[str, str] = {}
        for case, (attributes, inputs) in nonfinite_problems(op_type, rank).items():
            if self.refusal(op_type, attributes) is not None:
                continue  # refused by design: test_operator_matches_the_reference checks it
            why = _nonfinite_disagreement(
                self.backend, op_type, attributes, inputs, dtype, self.tolerances
            )
            if why:
                differing[case] = why
        declared = [
            key[1]
            for key in self.nonfinite_differences
            if key[0] == op_type and (len(key) < 3 or key[2] == dtype)
        ]
        unexpected = {
            case: why
            for case, why in differing.items()
            if not any(re.fullmatch(pattern, case) for pattern in declared)
        }
        stale = [p for p in declared if not any(re.fullmatch(p, case) for case in differing)]
        assert not unexpected, f"{self.backend.name} {op_type} ({dtype}) differs from the " + (
            "reference on: " + "; ".join(f"{case}: {why}" for case, why in unexpected.items())
        )
        assert not stale, (
            f"{self.backend.name} {op_type} ({dtype}) now agrees with the reference on "
            f"{stale}: remove them from nonfinite_differences"
        )

    def test_backend_offers_the_declared_operators_and_each_has_a_property(self) -> None:
        assert set(self.backend.supported()) == set(self.operator_types())
        assert set(self.operator_types()) <= set(PROPERTIES)
        assert set(reference_backend().supported()) == set(PROPERTIES)
        if self.operators is None:
            assert set(self.backend.supported()) >= CORE_OPERATORS

    def test_max_pool_indices_when_a_begin_pad_and_an_end_crop_cancel(self, dtype: str) -> None:
        """The padded and unpadded widths are equal here; an index taken from a padded
        copy of the input (as torch's own are) comes out shifted by the begin pad."""
        attributes = {"kernel_shape": [1, 2], "strides": [1, 2], "pads": [0, 1, 0, 0]}
        for x in ([[[[0.5, -0.5]]]], [[[[-0.5, 0.5]]]]):
            self.check("MaxPool", attributes, [np.array(x)], dtype)

    def test_reshape_with_allowzero_keeps_a_literal_zero(self, dtype: str) -> None:
        inputs = [np.zeros((0, 3), dtype=dtype), np.array([3, 0])]
        descriptors = [TensorDescriptor.of(a) for a in inputs]
        candidate = self.backend.create("Reshape", {"allowzero": 1}, descriptors)
        expected = reference_backend().create("Reshape", {"allowzero": 1}, descriptors)
        report = validate_operator(candidate, expected, inputs, gradcheck=False)
        assert report.passed, report.failures()
        assert candidate.forward(inputs)[0].shape == (3, 0)

    def test_d5_validates_every_default_problem(self, dtype: str) -> None:
        """The path of ``d5 validate op --backend NAME``: the backend loaded by name from
        the ``d5.operators`` group, each operator's default problem, the numpy reference
        (for float32, with the float64 operator for the gradient check)."""
        from d5core.lv0 import runner as runner
        from d5core.lv0.workloads import problems

        offered = self.operator_types()
        assert set(offered) <= set(problems.DEFAULT_PROBLEMS)
        assert set(problems.DEFAULT_PROBLEMS) == set(reference_backend().supported())
        failed = {}
        for op_type in offered:
            result = runner.validate_op(
                problems.DEFAULT_PROBLEMS[op_type], self.backend.name, dtype=dtype
            )
            assert result.against == "numpy"
            if not result.passed:
                failed[op_type] = result.report.failures()
        assert not failed
