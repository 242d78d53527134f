"""Accuracy while timed: the outputs of the very callable that is timed, checked.

A benchmark times a prepared callable (an operator's ``prepare_forward``, an executor's
``prepare_inference``), while validation checks another path (``forward``,
``inference``). Nothing proves the two compute the same thing: a backend whose timed
callable returns without computing, or returns outputs made for other inputs, would
win every table. MLPerf's TEST01 closes that gap for inference; this module does it for
every ``d5 bench``.

:class:`d5core.measure.audit.OutputSample` chooses a few of the timed samples at random
before timing starts; for each of them the measurement engine keeps a reference to what
the *last call of that sample* returned (nothing is copied or converted inside the timed region).
:func:`check_sampled` then, after timing, turns those values into numpy arrays and
compares each with the expected outputs (the untimed path's, on the same inputs) at the
validation tolerance of their dtype.

What a timed callable returns is the framework's own: tensors, a tuple of them, a dict
by output name, an ONNX Runtime IO binding. :func:`as_arrays` reads the common forms;
a callable that returns something else may carry a ``to_numpy(result)`` attribute that
gives its outputs as numpy arrays in the operator's own layout (TensorFlow's operators
do, since their timed layout may be NHWC).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["TimedAccuracy", "as_arrays", "check_sampled", "job_check"]


def _one(value: Any) -> np.ndarray | None:
    """One tensor of any framework as a numpy array; ``None`` when it is not one."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (np.generic, int, float, complex, bool)):
        return np.asarray(value)
    asnumpy = getattr(value, "asnumpy", None)  # mxnet NDArray (which has detach too)
    if callable(asnumpy):
        return np.asarray(asnumpy())
    detach = getattr(value, "detach", None)  # torch
    if callable(detach):
        value = detach()
        cpu = getattr(value, "cpu", None)
        if callable(cpu):
            value = cpu()
        return np.asarray(value.numpy())
    convert = getattr(value, "numpy", None)  # tensorflow tensor, OrtValue
    if callable(convert):
        return np.asarray(convert())
    if hasattr(value, "__array__"):
        return np.asarray(value)
    return None


def as_arrays(
    result: object,
    *,
    names: Sequence[str] | None = None,
    to_numpy: Callable[[Any], Sequence[Any]] | None = None,
) -> list[np.ndarray] | None:
    """What a timed call returned, as a list of numpy arrays; ``None`` when it returned
    nothing that can be read as outputs.

    :param names: the graph's output names: from a dict (of every value the executor
        computed, or of the outputs), those names are taken, in that order.
    :param to_numpy: the timed callable's own converter, when it has one.
    """
    if result is None:
        return None
    if to_numpy is not None:
        return [np.asarray(v) for v in to_numpy(result)]
    copy_outputs = getattr(result, "copy_outputs_to_cpu", None)  # an ORT IO binding
    if callable(copy_outputs):
        result = list(copy_outputs())
    if isinstance(result, Mapping):
        keys = list(names) if names else list(result)
        if any(k not in result for k in keys):
            return None
        found = [_one(result[k]) for k in keys]
    elif isinstance(result, (list, tuple)):
        found = [_one(v) for v in result]
    else:
        found = [_one(result)]
    if not found or any(f is None for f in found):
        return None
    return [f for f in found if f is not None]


@dataclass
class TimedAccuracy:
    """The outcome of checking the sampled outputs of a timed callable.

    ``status`` is ``"pass"``, ``"fail"`` (a sampled output differs from the expected
    one), ``"empty"`` (the timed callable returned nothing readable as outputs) or
    ``"unchecked"`` (no sample was kept, or nothing was expected).
    """

    status: str
    checked: int = 0
    detail: str = ""
    max_abs: float = 0.0

    @property
    def failed(self) -> bool:
        """Whether the check found the timed callable's outputs wrong or missing."""
        return self.status in ("fail", "empty")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary, with ``failed`` (what the measurement worker reads)."""
        return {
            "failed": self.failed,
            "status": self.status,
            "checked": self.checked,
            "detail": self.detail,
            "max_abs": self.max_abs,
        }

    def line(self) -> str:
        """One line for a user: what was checked and how it ended."""
        if self.status == "pass":
            return f"{self.checked} sampled timed call(s) match the untimed outputs"
        return self.detail


def job_check(check: Callable[[Any], TimedAccuracy]) -> Callable[[Any], dict[str, Any]]:
    """``check`` as :attr:`d5core.measure.invocations.PreparedJob.check` wants it: its
    outcome as JSON (``failed`` says whether the measurement fails)."""
    return lambda sample: check(sample).to_json()


def _fit(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``actual`` in the expected shape when only the shape differs (a backend that
    returns a gradient flattened, or without a size-1 axis)."""
    if actual.shape != expected.shape and actual.size == expected.size:
        return actual.reshape(expected.shape)
    return actual


def check_sampled(
    sampled: Sequence[object],
    expected: Sequence[np.ndarray],
    *,
    names: Sequence[str] | None = None,
    to_numpy: Callable[[Any], Sequence[Any]] | None = None,
    tolerances: Any = None,
) -> TimedAccuracy:
    """Compare every sampled return value with ``expected`` (the untimed outputs on the
    same inputs), each output at the validation tolerance of its expected dtype.

    :param names: output names, to read a dict and to name a failing output.
    :param to_numpy: the timed callable's converter (see :func:`as_arrays`).
    :param tolerances: passed to :func:`d5core.validate.operators.tolerance_for`.
    """
    from d5core.validate.operators import check_arrays, tolerance_for

    if not sampled or not expected:
        return TimedAccuracy("unchecked", detail="no timed output was sampled")
    worst = 0.0
    for k, value in enumerate(sampled):
        try:
            arrays = as_arrays(value, names=names, to_numpy=to_numpy)
        except Exception as exc:  # a form d5 cannot read: say so, do not fail the backend
            why = " ".join(f"{type(exc).__name__}: {exc}".split())
            return TimedAccuracy("unchecked", k, f"could not read a timed call's outputs ({why})")
        if arrays is None:
            what = "None" if value is None else type(value).__name__
            return TimedAccuracy(
                "empty", k, f"the timed callable returned {what}, not its outputs: d5 cannot "
                "check that it computes anything",
            )  # fmt: skip
        if len(arrays) < len(expected):
            return TimedAccuracy(
                "fail", k, f"a timed call returned {len(arrays)} output(s) where "
                f"{len(expected)} were expected",
            )  # fmt: skip
        for i, want in enumerate(expected):
            want = np.asarray(want)
            got = _fit(arrays[i], want)
            if got.dtype != want.dtype and got.shape == want.shape:
                got = got.astype(want.dtype)
            metrics, failed, why = check_arrays(got, want, tolerance_for(want.dtype, tolerances))
            worst = max(worst, float(metrics.get("max_abs", 0.0) or 0.0))
            if failed is not None:
                label = names[i] if names and i < len(names) else f"output {i}"
                return TimedAccuracy(
                    "fail", k, f"a timed call's {label} differs from the untimed one: {why}",
                    worst,
                )  # fmt: skip
    return TimedAccuracy("pass", len(sampled), "", worst)
