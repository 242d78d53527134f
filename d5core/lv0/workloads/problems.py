"""Operator problems: an operator type, its inputs and attributes, and its work in FLOPs.

A problem says what to run, not how: backends turn it into their own operator. Inputs are
generated from a seed, outside any timed region, so every backend sees the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.lv0.workloads.deepbench import (
    CONV_TRAINING,
    GEMM_TRAINING,
    RNN_INFERENCE_SERVER,
    RNN_TRAINING,
)

__all__ = [
    "DEFAULT_PROBLEMS",
    "SUITES",
    "InputSpec",
    "Problem",
    "all_suites",
    "conv_problem",
    "count_flops",
    "dtype_of",
    "gemm_problem",
    "parse_shapes",
    "rnn_problem",
    "suite",
]


@dataclass(frozen=True)
class InputSpec:
    """One input of a problem.

    ``kind`` is ``"float"`` (standard normal values in the problem's dtype), ``"positive"``
    (uniform in [0.5, 1.5]), ``"labels"`` (int64 class indices below ``high``),
    ``"indices"`` (int64 indices in ``[-high, high)``, negative ones counting from the
    end, for ``Gather``), ``"mask"`` (booleans, true with probability 1/2, for ``Where``)
    or ``"const"`` (the int64 array ``value``, for shape and axes inputs). An ``optional``
    input (Gemm's C, Conv's B) may be left out when the problem is given by shapes.
    """

    shape: tuple[int, ...]
    kind: str = "float"
    high: int = 0
    value: tuple[int, ...] = ()
    name: str = ""
    optional: bool = False

    @property
    def differentiable(self) -> bool:
        return self.kind in ("float", "positive")


@dataclass(frozen=True)
class Problem:
    """An operator type with its inputs and attributes."""

    op: str
    inputs: tuple[InputSpec, ...]
    attributes: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""
    #: Floating-point operations of one forward pass; counted from the shapes for
    #: Gemm, MatMul, Conv, ConvTranspose, LSTM and GRU when not given, else 0 (not counted).
    flops: int = 0

    def __post_init__(self) -> None:
        if not self.flops:
            shapes = [spec.shape for spec in self.inputs]
            object.__setattr__(self, "flops", count_flops(self.op, shapes, self.attributes))

    @property
    def label(self) -> str:
        """A short, unique description for tables and the results store."""
        if self.name:
            return self.name
        return f"{self.op}[{','.join('x'.join(map(str, i.shape)) for i in self.inputs)}]"

    def nbytes(self, dtype: str = "float32") -> int:
        """A lower bound on the memory the problem's tensors take, in bytes.

        The inputs in ``dtype`` (int64 for labels and constants), the output (as large as
        the largest input, or Gemm's, MatMul's or a convolution's own output) and the
        float64 draw each float input is generated from.
        """
        itemsize = dtype_of(dtype).itemsize
        sizes = [int(np.prod(spec.shape, dtype=object)) for spec in self.inputs]
        floats = [n for n, spec in zip(sizes, self.inputs, strict=True) if spec.differentiable]
        inputs = sum(
            n * (itemsize if spec.differentiable else 8)
            for n, spec in zip(sizes, self.inputs, strict=True)
        )
        output = max([*sizes, _output_elements(self)]) * itemsize
        return int(inputs + output + 8 * max(floats, default=0))

    def check_memory(self, dtype: str = "float32") -> None:
        """Refuse, before anything is allocated, a problem larger than the free memory.

        :raises UsageError: naming the estimate and the available memory in GiB.
        """
        from d5core.lv0.workloads.memory import check_fits

        check_fits(
            self.nbytes(dtype),
            f"problem {self.label} needs at least {{need}} for its tensors ({dtype})",
            "give smaller --shape",
        )

    def make_inputs(self, dtype: str = "float32", seed: int = 0) -> list[np.ndarray]:
        """Generate the inputs from ``seed``: the same numbers for every backend.

        :raises UsageError: for an unknown dtype, or tensors larger than the free memory.
        """
        self.check_memory(dtype)
        rng = np.random.default_rng(seed)
        arrays: list[np.ndarray] = []
        for spec in self.inputs:
            if spec.kind == "float":
                arrays.append(rng.standard_normal(spec.shape).astype(dtype))
            elif spec.kind == "positive":
                arrays.append(rng.uniform(0.5, 1.5, spec.shape).astype(dtype))
            elif spec.kind == "labels":
                arrays.append(rng.integers(0, spec.high, spec.shape, dtype=np.int64))
            elif spec.kind == "indices":
                arrays.append(rng.integers(-spec.high, spec.high, spec.shape, dtype=np.int64))
            elif spec.kind == "mask":
                arrays.append(rng.random(spec.shape) < 0.5)
            elif spec.kind == "const":
                arrays.append(np.asarray(spec.value, dtype=np.int64))
            else:
                raise UsageError(f"unknown input kind {spec.kind!r} in problem {self.label}")
        return arrays

    def with_shapes(self, shapes: Sequence[tuple[int, ...]]) -> Problem:
        """The same problem with the float inputs reshaped (``--shape`` on the CLI).

        Trailing optional inputs (Gemm's C, Conv's B) whose shape is not given are left
        out. The FLOPs are counted again from the new shapes.
        """
        floats = [i for i, s in enumerate(self.inputs) if s.differentiable]
        required = [i for i in floats if not self.inputs[i].optional]
        if not len(required) <= len(shapes) <= len(floats):
            raise UsageError(self._shape_count_message(floats, required, len(shapes)))
        dropped = set(floats[len(shapes) :])
        new = list(self.inputs)
        for index, shape in zip(floats, shapes, strict=False):
            old = new[index]
            new[index] = InputSpec(shape, old.kind, old.high, old.value, old.name, old.optional)
        kept = tuple(spec for i, spec in enumerate(new) if i not in dropped)
        return Problem(self.op, kept, self.attributes, "", 0)

    def _shape_count_message(self, floats: list[int], required: list[int], given: int) -> str:
        def shown(indices: list[int]) -> str:
            return ",".join("x".join(map(str, self.inputs[i].shape)) for i in indices)

        if len(required) == len(floats):
            return (
                f"{self.op} takes {len(floats)} tensor shape(s) but {given} were given; "
                f"pass them as --shape {shown(floats)}"
            )
        optional = ", ".join(self.inputs[i].name or f"input {i}" for i in floats[len(required) :])
        return (
            f"{self.op} takes {len(required)} to {len(floats)} tensor shapes ({optional} "
            f"optional), not {given}; pass them as --shape {shown(required)} or "
            f"--shape {shown(floats)}"
        )


def dtype_of(name: str) -> np.dtype[Any]:
    """The numpy dtype named ``name``.

    :raises UsageError: for a name numpy does not know, listing the float dtypes.
    """
    try:
        return np.dtype(name)
    except (TypeError, ValueError):
        raise UsageError(
            f"unknown dtype {name!r}; choose one of float16, float32, float64"
        ) from None


def count_flops(op: str, shapes: Sequence[tuple[int, ...]], attributes: Mapping[str, Any]) -> int:
    """Floating-point operations of one forward pass of ``op`` on inputs of ``shapes``.

    Multiply-adds count two: Gemm ``2mnk`` (C's addition not counted, as DeepBench),
    MatMul ``2mnk`` per broadcast batch, Conv ``2 N K (C/group) prod(kernel)
    prod(output)`` (a direct convolution), ConvTranspose ``2 N C (K/group) prod(kernel)
    prod(input)``, LSTM and GRU ``2 T N D (G H) (I + H)`` (the products with ``W`` and
    ``R`` at every step, in each of the ``D`` directions; the gate arithmetic is not
    counted). Other operators, and shapes that do not fit the operator, give 0.
    """
    try:
        if op in ("LSTM", "GRU") and len(shapes) >= 3:
            return _recurrent_flops(shapes[0], shapes[1], shapes[2], attributes)
        if op == "Gemm" and len(shapes) >= 2:
            m, n, k = _gemm_dims(shapes[0], shapes[1], attributes)
            return 2 * m * n * k
        if op == "MatMul" and len(shapes) >= 2:
            return _matmul_flops(shapes[0], shapes[1])
        if op in ("Conv", "ConvTranspose") and len(shapes) >= 2:
            x, w = shapes[0], shapes[1]
            if len(x) < 3 or len(w) != len(x):
                return 0
            kernel = int(np.prod(w[2:]))
            if op == "ConvTranspose":
                return 2 * x[0] * x[1] * w[1] * kernel * int(np.prod(x[2:]))
            return 2 * x[0] * w[0] * w[1] * kernel * int(np.prod(_conv_output(x, w, attributes)))
    except (TypeError, ValueError, IndexError):
        return 0
    return 0


def _gemm_dims(
    a: tuple[int, ...], b: tuple[int, ...], attributes: Mapping[str, Any]
) -> tuple[int, int, int]:
    if len(a) != 2 or len(b) != 2:
        raise ValueError("Gemm takes matrices")
    m, k = (a[1], a[0]) if attributes.get("transA") else a
    n = b[0] if attributes.get("transB") else b[1]
    return m, n, k


def _matmul_flops(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    if not a or not b:
        return 0
    m, k = (1, a[0]) if len(a) == 1 else a[-2:]
    n = 1 if len(b) == 1 else b[-1]
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return 2 * int(np.prod(batch, dtype=object)) * m * n * k


def _conv_output(
    x: tuple[int, ...], w: tuple[int, ...], attributes: Mapping[str, Any]
) -> list[int]:
    dims = len(x) - 2
    strides = list(attributes.get("strides") or [1] * dims)
    dilations = list(attributes.get("dilations") or [1] * dims)
    pads = list(attributes.get("pads") or [0] * (2 * dims))
    if str(attributes.get("auto_pad", "NOTSET")).startswith("SAME"):
        return [-(-x[2 + i] // strides[i]) for i in range(dims)]
    return [
        (x[2 + i] + pads[i] + pads[i + dims] - dilations[i] * (w[2 + i] - 1) - 1) // strides[i] + 1
        for i in range(dims)
    ]


def _recurrent_flops(
    x: tuple[int, ...], w: tuple[int, ...], r: tuple[int, ...], attributes: Mapping[str, Any]
) -> int:
    """FLOPs of LSTM and GRU: ``X`` ``(T, N, I)`` (``(N, T, I)`` with ``layout=1``) times
    ``W`` ``(D, G*H, I)``, and the state times ``R`` ``(D, G*H, H)``, at every step."""
    if len(x) != 3 or len(w) != 3 or len(r) != 3:
        raise ValueError("LSTM and GRU take X, W and R of rank 3")
    return 2 * x[0] * x[1] * w[0] * w[1] * (w[2] + r[2])


def _output_elements(problem: Problem) -> int:
    """Elements of the output of Gemm, MatMul, Conv, LSTM and GRU (``Y``); 0 for other
    operators."""
    shapes = [spec.shape for spec in problem.inputs]
    try:
        if problem.op in ("LSTM", "GRU") and len(shapes) >= 3:
            x, r = shapes[0], shapes[2]
            return x[0] * x[1] * r[0] * r[2]
        if problem.op == "Gemm" and len(shapes) >= 2:
            m, n, _ = _gemm_dims(shapes[0], shapes[1], problem.attributes)
            return m * n
        if problem.op == "MatMul" and len(shapes) >= 2:
            return _matmul_flops(shapes[0], shapes[1]) // (2 * max(1, shapes[0][-1]))
        if problem.op == "Conv" and len(shapes) >= 2:
            out = _conv_output(shapes[0], shapes[1], problem.attributes)
            return shapes[0][0] * shapes[1][0] * int(np.prod(out, dtype=object))
    except (TypeError, ValueError, IndexError):
        return 0
    return 0


def parse_shapes(text: str) -> list[tuple[int, ...]]:
    """Parse ``"4x3,3x5"`` into ``[(4, 3), (3, 5)]``; an empty text is a usage error."""
    if not text.strip():
        raise UsageError(
            "--shape is empty; give the input shapes (for example --shape 4x3,3x5) or "
            "leave out --shape"
        )
    shapes: list[tuple[int, ...]] = []
    for part in text.split(","):
        try:
            dims = tuple(int(d) for d in part.strip().lower().split("x"))
        except ValueError:
            raise UsageError(
                f"cannot read shape {part.strip()!r}: write dimensions joined by 'x', "
                f"shapes joined by ',' (for example 4x3,3x5)"
            ) from None
        if not dims or any(d <= 0 for d in dims):
            raise UsageError(f"shape {part.strip()!r} has a dimension that is not positive")
        shapes.append(dims)
    return shapes


def gemm_problem(m: int, n: int, k: int, trans_a: int = 0, trans_b: int = 0) -> Problem:
    """A GEMM computing C[m, n] = op(A) @ op(B), as ONNX ``Gemm`` without C."""
    a = (k, m) if trans_a else (m, k)
    b = (n, k) if trans_b else (k, n)
    name = f"gemm m={m} n={n} k={k}{' At' if trans_a else ''}{' Bt' if trans_b else ''}"
    return Problem(
        "Gemm",
        (InputSpec(a, name="A"), InputSpec(b, name="B")),
        {"transA": int(trans_a), "transB": int(trans_b)},
        name,
        2 * m * n * k,
    )


def conv_problem(
    w: int,
    h: int,
    c: int,
    n: int,
    k: int,
    s: int,
    r: int,
    pad_w: int,
    pad_h: int,
    stride_w: int,
    stride_h: int,
) -> Problem:
    """A 2-D convolution, NCHW, as ONNX ``Conv``; arguments in DeepBench's order."""
    out_h = (h + 2 * pad_h - r) // stride_h + 1
    out_w = (w + 2 * pad_w - s) // stride_w + 1
    name = f"conv n={n} c={c} {h}x{w} k={k} {r}x{s} pad={pad_h},{pad_w}"
    name += f" stride={stride_h},{stride_w}"
    return Problem(
        "Conv",
        (InputSpec((n, c, h, w), name="X"), InputSpec((k, c, r, s), name="W")),
        {"pads": [pad_h, pad_w, pad_h, pad_w], "strides": [stride_h, stride_w]},
        name,
        2 * n * k * c * r * s * out_h * out_w,
    )


def rnn_problem(hidden: int, batch: int, steps: int, cell: str) -> Problem:
    """One DeepBench recurrent layer as ONNX ``LSTM`` or ``GRU`` (``cell`` ``"lstm"`` or
    ``"gru"``): input size equal to the hidden size, one forward direction, biases, zero
    initial states; arguments in DeepBench's order."""
    op = {"lstm": "LSTM", "gru": "GRU"}.get(cell)
    if op is None:
        raise UsageError(f"no ONNX operator for DeepBench cell {cell!r}; use lstm or gru")
    gates = 4 if op == "LSTM" else 3
    return Problem(
        op,
        (
            InputSpec((steps, batch, hidden), name="X"),
            InputSpec((1, gates * hidden, hidden), name="W"),
            InputSpec((1, gates * hidden, hidden), name="R"),
            InputSpec((1, 2 * gates * hidden), name="B", optional=True),
        ),
        {"hidden_size": hidden},
        f"{cell} h={hidden} n={batch} t={steps}",
    )


#: DeepBench training shapes that finish in seconds on two cores, reference included.
_CPU_SMALL_GEMM = [
    (512, 16, 512, 0, 0),
    (1024, 16, 512, 0, 0),
    (512, 32, 512, 0, 1),
    (1760, 16, 1760, 0, 0),
    (1760, 32, 1760, 1, 0),
    (2048, 16, 2048, 0, 0),
]
_CPU_SMALL_CONV = [
    (480, 48, 1, 2, 16, 3, 3, 1, 1, 1, 1),
    (240, 24, 16, 2, 32, 3, 3, 1, 1, 1, 1),
    (28, 28, 192, 2, 64, 1, 1, 0, 0, 1, 1),
    (56, 56, 64, 2, 256, 1, 1, 0, 0, 2, 2),
    (7, 7, 832, 2, 256, 1, 1, 0, 0, 1, 1),
    (14, 14, 128, 2, 256, 3, 3, 1, 1, 1, 1),
]


def _resnet_conv3x3(layers: Sequence[tuple[int, int, int, int]]) -> list[Problem]:
    """3x3 convolutions, pad 1, at batch 1 and 32, from ``(channels in, channels out,
    input side, stride)``: one per distinct layer shape of a ResNet."""
    return [
        conv_problem(side, side, c, batch, k, 3, 3, 1, 1, stride, stride)
        for batch in (1, 32)
        for c, k, side, stride in layers
    ]


#: CIFAR ResNet-20's distinct 3x3 layers: three stages of 16, 32 and 64 channels at
#: 32x32, 16x16 and 8x8, and the stride-2 convolutions that open the second and third.
_RESNET20_CONV3X3 = [
    (16, 16, 32, 1),
    (32, 32, 16, 1),
    (64, 64, 8, 1),
    (16, 32, 32, 2),
    (32, 64, 16, 2),
]
#: ResNet-50 v1.5's distinct 3x3 layers (the middle convolution of each bottleneck):
#: 64, 128, 256 and 512 channels at 56x56, 28x28, 14x14 and 7x7, and the stride-2 ones
#: that open stages 2-4 (v1.5 strides the 3x3 convolution, not the first 1x1).
_RESNET50_CONV3X3 = [
    (64, 64, 56, 1),
    (128, 128, 28, 1),
    (256, 256, 14, 1),
    (512, 512, 7, 1),
    (128, 128, 56, 2),
    (256, 256, 28, 2),
    (512, 512, 14, 2),
]

#: Built-in suites; plugins add more through the ``d5_operator_shape_suites`` hook.
SUITES: dict[str, list[Problem]] = {
    "deepbench-gemm": [gemm_problem(*p) for p in GEMM_TRAINING],
    "deepbench-conv": [conv_problem(*p) for p in CONV_TRAINING],
    "cpu-small-gemm": [gemm_problem(*p) for p in _CPU_SMALL_GEMM],
    "cpu-small-conv": [conv_problem(*p) for p in _CPU_SMALL_CONV],
    "resnet20-conv3x3": _resnet_conv3x3(_RESNET20_CONV3X3),
    "resnet50-conv3x3": _resnet_conv3x3(_RESNET50_CONV3X3),
}
#: DeepBench recurrent layers (hidden, batch, steps, cell), the smallest of the training
#: and inference sets and shorter sequences of their sizes: seconds on two cores,
#: forward and backward, numpy reference included.
_CPU_SMALL_RNN = [
    (256, 16, 25, "lstm"),
    (256, 4, 50, "lstm"),
    (512, 16, 5, "lstm"),
    (512, 32, 1, "gru"),
    (256, 16, 25, "gru"),
    (512, 4, 5, "gru"),
]
# ONNX RNN (DeepBench's "vanilla" cell) has no implementation in d5 yet: left out.
SUITES["deepbench-rnn-train"] = [rnn_problem(*p) for p in RNN_TRAINING if p[3] != "vanilla"]
SUITES["deepbench-rnn-inference"] = [
    rnn_problem(*p) for p in RNN_INFERENCE_SERVER if p[3] != "vanilla"
]
SUITES["deepbench-rnn"] = SUITES["deepbench-rnn-train"] + SUITES["deepbench-rnn-inference"]
SUITES["cpu-small-rnn"] = [rnn_problem(*p) for p in _CPU_SMALL_RNN]
SUITES["cpu-small"] = SUITES["cpu-small-gemm"] + SUITES["cpu-small-conv"]
SUITES["deepbench"] = SUITES["deepbench-gemm"] + SUITES["deepbench-conv"]


def _from_hook(suite_name: str, spec: Problem | Mapping[str, Any]) -> Problem:
    """A problem contributed through the hook: a :class:`Problem`, or a mapping
    ``{"op", "shapes", "attributes"?, "name"?, "flops"?}``."""
    if isinstance(spec, Problem):
        return spec
    try:
        shapes = [tuple(int(d) for d in shape) for shape in spec["shapes"]]
        return Problem(
            str(spec["op"]),
            tuple(InputSpec(shape) for shape in shapes),
            dict(spec.get("attributes") or {}),
            str(spec.get("name") or ""),
            int(spec.get("flops") or 0),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"suite {suite_name!r} from a plugin has a malformed problem {spec!r}: "
            f"each needs 'op' and 'shapes' ({type(exc).__name__}: {exc})"
        ) from None


def all_suites() -> dict[str, list[Problem]]:
    """Every suite, from the ``d5_operator_shape_suites`` hook: :data:`SUITES` comes
    from d5's internal ``builtins`` plugin and is kept on a name a plugin offers too (the clash is
    reported)."""
    from d5core.plugins import get_plugin_manager

    contributed = get_plugin_manager().merged("d5_operator_shape_suites")
    return {name: [_from_hook(name, spec) for spec in specs] for name, specs in contributed.items()}


def suite(name: str, op: str | None = None) -> list[Problem]:
    """The problems of suite ``name``, only those of operator ``op`` if given."""
    suites = all_suites()
    if name not in suites:
        known = ", ".join(sorted(suites))
        raise UsageError(f"no operator suite named {name!r}; known suites: {known}")
    problems = [p for p in suites[name] if op is None or p.op == op]
    if not problems:
        raise UsageError(_no_problems_message(name, str(op), suites))
    return problems


def _no_problems_message(name: str, op: str, suites: Mapping[str, list[Problem]]) -> str:
    """Why suite ``name`` cannot run ``op``, and the suites or options that can."""
    others = sorted(n for n, problems in suites.items() if any(p.op == op for p in problems))
    if others:
        return f"suite {name!r} has no {op} problems; suites that have: {', '.join(others)}"
    return (
        f"suite {name!r} has no {op} problems, and no other suite has; leave out --suite to "
        f"run d5's default {op} problem, or give its input shapes with --shape"
    )


def _f(*shape: int, name: str = "") -> InputSpec:
    return InputSpec(tuple(shape), name=name)


def _const(value: tuple[int, ...], name: str) -> InputSpec:
    """A 1-D int64 constant input (starts, axes, a shape)."""
    return InputSpec((len(value),), "const", value=value, name=name)


#: A small default problem for every operator of the reference backend, used by
#: ``d5 validate op OP`` when no ``--shape`` is given.
DEFAULT_PROBLEMS: dict[str, Problem] = {
    p.op: p
    for p in [
        Problem(
            "Gemm",
            (_f(4, 5, name="A"), _f(5, 3, name="B"), InputSpec((3,), name="C", optional=True)),
            {"alpha": 0.5, "beta": 2.0},
        ),
        Problem("MatMul", (_f(2, 4, 5, name="A"), _f(5, 3, name="B"))),
        Problem(
            "Conv",
            (
                _f(2, 3, 7, 7, name="X"),
                _f(4, 3, 3, 3, name="W"),
                InputSpec((4,), name="B", optional=True),
            ),
            {"pads": [1, 1, 1, 1], "strides": [2, 1]},
        ),
        Problem(
            "ConvTranspose",
            (_f(2, 3, 4, 4, name="X"), _f(3, 2, 3, 3, name="W")),
            {"strides": [2, 2]},
        ),
        Problem("Relu", (_f(3, 4, name="X"),)),
        Problem("LeakyRelu", (_f(3, 4, name="X"),), {"alpha": 0.1}),
        Problem("Sigmoid", (_f(3, 4, name="X"),)),
        Problem("Tanh", (_f(3, 4, name="X"),)),
        Problem("Softmax", (_f(3, 5, name="X"),), {"axis": -1}),
        Problem("LogSoftmax", (_f(3, 5, name="X"),), {"axis": -1}),
        Problem(
            "MaxPool", (_f(2, 2, 6, 6, name="X"),), {"kernel_shape": [2, 2], "strides": [2, 2]}
        ),
        Problem(
            "AveragePool",
            (_f(2, 2, 6, 6, name="X"),),
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
        ),
        Problem("GlobalAveragePool", (_f(2, 3, 4, 4, name="X"),)),
        Problem(
            "BatchNormalization",
            (
                _f(4, 3, 2, 2, name="X"),
                InputSpec((3,), "positive", name="scale"),
                _f(3, name="B"),
                _f(3, name="mean"),
                InputSpec((3,), "positive", name="var"),
            ),
        ),
        # training mode with a real mask: backends must drop what the reference drops
        Problem("Dropout", (_f(3, 4, name="X"),), {"ratio": 0.5, "training_mode": 1}),
        Problem("Add", (_f(3, 4, name="A"), _f(4, name="B"))),
        Problem("Sub", (_f(3, 4, name="A"), _f(3, 1, name="B"))),
        Problem("Mul", (_f(3, 4, name="A"), _f(3, 4, name="B"))),
        Problem("Div", (_f(3, 4, name="A"), InputSpec((3, 4), "positive", name="B"))),
        Problem("Sum", (_f(3, 4, name="A"), _f(3, 4, name="B"), _f(4, name="C"))),
        Problem(
            "Reshape",
            (_f(2, 3, 4, name="data"), InputSpec((2,), "const", value=(6, -1), name="shape")),
        ),
        Problem("Flatten", (_f(2, 3, 4, name="X"),), {"axis": 1}),
        Problem("Transpose", (_f(2, 3, 4, name="X"),), {"perm": [2, 0, 1]}),
        Problem("Concat", (_f(2, 3, name="A"), _f(2, 5, name="B")), {"axis": 1}),
        Problem(
            "Squeeze", (_f(2, 1, 4, name="X"), InputSpec((1,), "const", value=(1,), name="axes"))
        ),
        Problem(
            "Unsqueeze", (_f(2, 4, name="X"), InputSpec((1,), "const", value=(1,), name="axes"))
        ),
        Problem("Identity", (_f(3, 4, name="X"),)),
        Problem(
            "SoftmaxCrossEntropyLoss",
            (_f(4, 5, name="scores"), InputSpec((4,), "labels", high=5, name="labels")),
        ),
        Problem("MeanSquaredError", (_f(4, 3, name="prediction"), _f(4, 3, name="target"))),
        # recurrent layers: a bidirectional LSTM (torch's fused kernel), and a GRU with
        # lengths and an initial state (the step-by-step recurrence)
        Problem(
            "LSTM",
            (
                _f(4, 2, 3, name="X"),
                _f(2, 16, 3, name="W"),
                _f(2, 16, 4, name="R"),
                InputSpec((2, 32), name="B", optional=True),
            ),
            {"direction": "bidirectional", "hidden_size": 4},
        ),
        Problem(
            "GRU",
            (
                _f(4, 2, 3, name="X"),
                _f(1, 12, 3, name="W"),
                _f(1, 12, 4, name="R"),
                _f(1, 24, name="B"),
                _const((4, 2), "sequence_lens"),
                _f(1, 2, 4, name="initial_h"),
            ),
            {"hidden_size": 4},
        ),
        # -- transformer operators --
        Problem(
            "Gather",
            (_f(5, 4, name="data"), InputSpec((2, 3), "indices", high=5, name="indices")),
            {"axis": 0},
        ),
        Problem(
            "GatherElements",
            (_f(3, 4, name="data"), InputSpec((3, 2), "indices", high=4, name="indices")),
            {"axis": 1},
        ),
        Problem(
            "Slice",
            (
                _f(4, 6, name="data"),
                _const((1, -1), "starts"),
                _const((4, -7), "ends"),
                _const((0, 1), "axes"),
                _const((1, -2), "steps"),
            ),
        ),
        Problem("Shape", (_f(2, 3, 4, name="data"),), {"start": 1}),
        Problem("ConstantOfShape", (_const((3, 4), "input"),)),
        Problem("Expand", (_f(3, 1, name="input"), _const((2, 1, 4), "shape"))),
        Problem(
            "Where",
            (InputSpec((3, 4), "mask", name="condition"), _f(3, 4, name="X"), _f(4, name="Y")),
        ),
        Problem("Equal", (_f(3, 4, name="A"), _f(4, name="B"))),
        Problem("Less", (_f(3, 4, name="A"), _f(4, name="B"))),
        Problem("Greater", (_f(3, 4, name="A"), _f(4, name="B"))),
        Problem("Cast", (_f(3, 4, name="input"),), {"to": 11}),  # DOUBLE
        Problem("Pow", (InputSpec((3, 4), "positive", name="X"), _f(4, name="Y"))),
        Problem("Sqrt", (InputSpec((3, 4), "positive", name="X"),)),
        Problem("Erf", (_f(3, 4, name="input"),)),
        Problem("Exp", (_f(3, 4, name="input"),)),
        Problem("Log", (InputSpec((3, 4), "positive", name="input"),)),
        Problem("Gelu", (_f(3, 4, name="X"),), {"approximate": "none"}),
        Problem("ReduceMean", (_f(2, 3, 4, name="data"), _const((-1,), "axes"))),
        Problem("ReduceSum", (_f(2, 3, 4, name="data"), _const((0, 2), "axes")), {"keepdims": 0}),
        Problem("ReduceMax", (_f(3, 5, name="data"), _const((1,), "axes"))),
        Problem(
            "LayerNormalization",
            (_f(2, 3, 4, name="X"), _f(4, name="Scale"), _f(4, name="B")),
            {"axis": -1, "epsilon": 1e-5},
        ),
        Problem("Split", (_f(3, 6, name="input"), _const((1, 3, 2), "split")), {"axis": 1}),
        Problem("Trilu", (_f(2, 4, 5, name="input"), _const((1,), "k")), {"upper": 0}),
    ]
}
