"""Accuracy mode: check the outputs an executor gave under LoadGen against the reference.

In LoadGen's AccuracyOnly mode every sample of the query sample library is issued once
and the system under test attaches each sample's output bytes to its response. LoadGen
writes them to ``mlperf_log_accuracy.json``: a JSON list of entries
``{"seq_id": n, "qsl_idx": i, "data": "<upper-case hex>"}``, one per response.

This module reads that file (:func:`read_accuracy_log`), rebuilds the inputs of the
logged samples from the seeded sample library (the same seed gives the same inputs,
:func:`d5core.loadgen.sut.sample_library`), runs the reference executor on them
(``D5_REFERENCE``, else numpy), cuts each logged byte string into the graph's outputs by
the reference outputs' dtypes and shapes (:func:`decode_sample`), and compares them with
d5's tolerances (:func:`d5core.validate.compare_outputs`). The verdict names the worst
sample, output and difference in one line, so a fast but wrong executor is caught. A NaN
or infinity in a logged output fails its sample, even where the reference gives the same,
unless the model declares non-finite outputs expected (``allow_nonfinite``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.levels.networks import GraphExecutor
    from d5core.loadgen.loadgen import ScenarioResult
    from d5core.onnx.network import Network
    from d5core.validate.operators import Tolerances

__all__ = [
    "ACCURACY_LOG",
    "LoggedSample",
    "check_accuracy",
    "compare_logged",
    "decode_sample",
    "read_accuracy_log",
    "reference_outputs",
]

#: The name of LoadGen's accuracy log in its output directory.
ACCURACY_LOG = "mlperf_log_accuracy.json"

#: Samples the reference executor runs at once when the model's batch is symbolic.
_REFERENCE_BATCH = 32


@dataclass(frozen=True)
class LoggedSample:
    """One response LoadGen logged in accuracy mode: its order, sample index and bytes."""

    seq_id: int
    qsl_idx: int
    data: bytes


def read_accuracy_log(path: str | Path) -> list[LoggedSample]:
    """The entries of a LoadGen accuracy log, in the order they were logged.

    :raises UsageError: one line, for a file that is missing, is not the JSON list LoadGen
        writes (a run that died half-way leaves it unterminated), or holds an entry
        without an integer ``qsl_idx`` or with ``data`` that is not hexadecimal.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"cannot read the accuracy log {file}: {exc.strerror or exc}; run the "
            f"scenario with --accuracy first"
        ) from None
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"the accuracy log {file} is not valid JSON ({exc.msg} at line {exc.lineno}); "
            f"the run that wrote it probably did not finish: run it again"
        ) from None
    if not isinstance(entries, list):
        raise UsageError(f"the accuracy log {file} holds a {type(entries).__name__}, not a list")
    samples: list[LoggedSample] = []
    for position, entry in enumerate(entries):
        samples.append(_entry(file, position, entry))
    return samples


def _entry(file: Path, position: int, entry: Any) -> LoggedSample:
    where = f"entry {position} of the accuracy log {file}"
    if not isinstance(entry, Mapping):
        raise UsageError(f"{where} is a {type(entry).__name__}, not an object")
    index = entry.get("qsl_idx")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise UsageError(f"{where} has qsl_idx {index!r}; a sample index is an integer >= 0")
    seq = entry.get("seq_id", position)
    seq_id = seq if isinstance(seq, int) and not isinstance(seq, bool) else position
    hex_data = entry.get("data", "")
    if not isinstance(hex_data, str):
        raise UsageError(f"{where} has data of type {type(hex_data).__name__}, not a hex string")
    try:
        data = bytes.fromhex(hex_data)
    except ValueError:
        shown = hex_data if len(hex_data) <= 16 else hex_data[:16] + "..."
        raise UsageError(f"{where} has data {shown!r} that is not hexadecimal") from None
    return LoggedSample(seq_id=seq_id, qsl_idx=index, data=data)


def decode_sample(data: bytes, expected: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Cut one sample's logged bytes into arrays laid out like ``expected``.

    The system under test logs a sample's outputs one after another, each in its own
    dtype, C order, without the batch dimension; ``expected`` (the reference's outputs for
    the same sample) gives the dtypes, shapes and order.

    :raises ValueError: when the byte count differs from what ``expected`` needs.
    """
    need = sum(int(np.asarray(e).nbytes) for e in expected)
    if len(data) != need:
        layout = ", ".join(f"{np.asarray(e).dtype}{list(np.shape(e))}" for e in expected)
        raise ValueError(f"{len(data)} bytes logged where {need} were expected ({layout})")
    arrays: list[np.ndarray] = []
    offset = 0
    for e in expected:
        ref = np.asarray(e)
        arrays.append(
            np.frombuffer(data, dtype=ref.dtype, count=ref.size, offset=offset).reshape(ref.shape)
        )
        offset += ref.nbytes
    return arrays


def _one_row(network: Network, sample: Mapping[str, np.ndarray], index: int) -> dict[str, Any]:
    """The sample's inputs with a leading batch dimension of 1."""
    rows: dict[str, np.ndarray] = {}
    for info in network.inputs:
        if info.name not in sample:
            raise UsageError(f"sample {index} of the sample library has no input {info.name!r}")
        value = np.asarray(sample[info.name])
        rank = len(info.shape)
        if rank and value.ndim == rank - 1:
            value = value[np.newaxis]
        elif rank and (value.ndim != rank or value.shape[0] != 1):
            raise UsageError(
                f"sample {index} has input {info.name!r} of shape {value.shape}; a sample "
                f"is one row of shape {tuple(info.shape)[1:]}"
            )
        rows[info.name] = value
    return rows


def reference_outputs(
    executor: GraphExecutor, network: Network, samples: Sequence[Mapping[str, np.ndarray]]
) -> list[list[np.ndarray]]:
    """Each sample's outputs (in ``network.outputs`` order, without the batch dimension)
    as ``executor`` computes them.

    Samples run in batches: of :data:`_REFERENCE_BATCH` when the model's batch is
    symbolic, else of the model's fixed batch, the last one padded with copies of its
    last sample (the padding's outputs are dropped).

    :raises UsageError: for a sample that is not one row of the model's inputs, or an
        output without a batch dimension (it cannot be split per sample).
    """
    batched = [info for info in network.inputs if info.shape]
    fixed = bool(batched) and all(info.shape[0] is not None for info in batched)
    size = int(batched[0].shape[0] or 1) if fixed else _REFERENCE_BATCH
    names = [o.name for o in network.outputs]
    rows = [_one_row(network, s, i) for i, s in enumerate(samples)]
    results: list[list[np.ndarray]] = []
    for start in range(0, len(rows), size):
        chunk = rows[start : start + size]
        padded = chunk + [chunk[-1]] * (size - len(chunk)) if fixed else chunk
        feeds = {
            info.name: np.concatenate([r[info.name] for r in padded], axis=0)
            if info.shape
            else padded[0][info.name]
            for info in network.inputs
        }
        outputs = executor.inference(feeds)
        for name in names:
            out = np.asarray(outputs[name])
            if out.ndim == 0 or out.shape[0] != len(padded):
                raise UsageError(
                    f"output {name!r} has shape {out.shape}, without a batch dimension of "
                    f"{len(padded)}; accuracy mode cannot split it per sample"
                )
        for j in range(len(chunk)):
            results.append([np.asarray(outputs[name])[j] for name in names])
    return results


def _ratio(check: Any) -> float:
    """How far a check is from passing: its tol_ratio, infinite for a failure that has
    none (shape, dtype, non-finite values, a missing output)."""
    ratio = check.metrics.get("tol_ratio")
    if check.failed_metric not in (None, "tol_ratio") or ratio is None:
        return math.inf if not check.passed else 0.0
    return float(ratio)


def compare_logged(
    logged: Sequence[LoggedSample],
    expected: Mapping[int, Sequence[np.ndarray]],
    names: Sequence[str],
    *,
    tolerances: Tolerances | None = None,
    layout: Sequence[np.ndarray] | None = None,
    allow_nonfinite: bool = False,
) -> dict[str, Any]:
    """Compare each logged sample with the expected outputs of its ``qsl_idx``.

    :param expected: per sample index, the reference outputs in ``names`` order.
    :param layout: how the system under test laid out a sample's outputs (arrays of the
        dtype and shape of each, in ``names`` order), when it said; the bytes are then
        cut by it, so that an output of another dtype or shape than the reference's
        fails on ``dtype`` or ``shape``. ``None`` cuts them by the reference outputs.
    :param allow_nonfinite: the model declares non-finite outputs expected: they pass
        where they equal the reference's exactly (by default any fails its sample).
    :returns: ``passed``, ``checked`` (entries compared), ``failed`` (entries that
        differ), ``worst`` (the entry furthest from passing: ``seq_id``, ``sample``,
        ``output``, ``metric``, ``tol_ratio``, ``max_abs``, ``detail``; ``None`` when
        nothing was logged) and ``failures`` (one line per failing entry, the first 20).
    """
    from d5core.validate.operators import compare_outputs

    failed = 0
    failures: list[str] = []
    worst: dict[str, Any] | None = None
    worst_key = -1.0
    for entry in logged:
        reference = expected.get(entry.qsl_idx)
        if reference is None:
            record: dict[str, Any] = {
                "output": "",
                "metric": "sample",
                "tol_ratio": math.inf,
                "max_abs": None,
                "detail": f"sample index {entry.qsl_idx} is not in the sample library",
            }
        else:
            try:
                actual = decode_sample(entry.data, reference if layout is None else layout)
            except ValueError as exc:
                record = {
                    "output": "",
                    "metric": "bytes",
                    "tol_ratio": math.inf,
                    "max_abs": None,
                    "detail": str(exc),
                }
            else:
                checks = compare_outputs(
                    actual,
                    reference,
                    tolerances=tolerances,
                    names=names,
                    allow_nonfinite=allow_nonfinite,
                )
                check = max(checks, key=_ratio)
                max_abs = check.metrics.get("max_abs")
                record = {
                    "output": check.name or str(check.index),
                    "metric": check.failed_metric or "tol_ratio",
                    "tol_ratio": _ratio(check),
                    # a NaN error is unknown, not 0: JSON gets null
                    "max_abs": max_abs if max_abs is not None and math.isfinite(max_abs) else None,
                    "detail": check.detail,
                }
                if all(c.passed for c in checks):
                    record["detail"] = ""
        bad = record["detail"] != ""
        if bad:
            failed += 1
            if len(failures) < 20:
                failures.append(_line(entry, record))
        if worst is None or record["tol_ratio"] > worst_key:
            worst_key = record["tol_ratio"]
            worst = {"seq_id": entry.seq_id, "sample": entry.qsl_idx, **record}
    if worst is not None and not math.isfinite(worst["tol_ratio"]):
        worst["tol_ratio"] = None  # JSON has no infinity
    return {
        "passed": bool(logged) and failed == 0,
        "checked": len(logged),
        "failed": failed,
        "worst": worst,
        "failures": failures,
    }


def _line(entry: LoggedSample, record: Mapping[str, Any]) -> str:
    output = f", output {record['output']!r}" if record["output"] else ""
    return f"sample {entry.qsl_idx}{output}: {record['metric']}: {record['detail']}"


def _tolerances(rtol: float | None, atol: float | None) -> Tolerances | None:
    """Overrides of d5's default tolerances: ``rtol`` and ``atol`` replace the defaults
    of every floating dtype; one left out keeps each dtype's default."""
    from d5core.validate.operators import DEFAULT_TOLERANCES, check_tolerance

    if rtol is None and atol is None:
        return None
    r = None if rtol is None else check_tolerance("rtol", rtol)
    a = None if atol is None else check_tolerance("atol", atol)
    return {
        name: {
            "rtol": default.rtol if r is None else r,
            "atol": default.atol if a is None else a,
        }
        for name, default in DEFAULT_TOLERANCES.items()
    }


def _log_path(result: ScenarioResult) -> Path:
    """Where the result's accuracy log is: ``result.accuracy["log"]`` when the run
    names it, else LoadGen's default name in the run's log directory."""
    value = (result.accuracy or {}).get("log")
    if isinstance(value, str | Path) and str(value):
        return Path(value)
    return Path(result.log_dir) / ACCURACY_LOG


def _layout(outputs: Any, names: Sequence[str]) -> list[np.ndarray] | None:
    """The output layout the worker reported (``[{"name", "dtype", "shape"}, ...]``) as
    empty arrays in ``names`` order; ``None`` when it reported none or another set of
    outputs (the reference's layout is used then)."""
    if not isinstance(outputs, Sequence) or not outputs:
        return None
    try:
        by_name = {
            str(o["name"]): np.empty([int(d) for d in o["shape"]], dtype=np.dtype(o["dtype"]))
            for o in outputs
        }
    except (KeyError, TypeError, ValueError):
        return None
    if sorted(by_name) != sorted(names):
        return None
    return [by_name[name] for name in names]


def check_accuracy(
    model: str | Path,
    result: ScenarioResult,
    *,
    reference: str | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    allow_nonfinite: bool = False,
) -> dict[str, Any]:
    """Check the outputs ``result`` (an accuracy-mode run) logged against the reference.

    :param model: the model the run ran (a zoo name, a light model or an ``.onnx`` path).
    :param reference: the reference executor; ``None`` takes the setting
        (:func:`~d5core.plugins.reference.reference_name`).
    :param rtol: relative tolerance for every floating dtype (default: d5's per dtype).
    :param atol: (scaled) absolute tolerance, likewise.
    :param allow_nonfinite: the model declares non-finite outputs expected (see
        :func:`compare_logged`); the message then says so.
    :returns: :func:`compare_logged`'s dict plus ``executor``, ``reference``, ``log``
        and ``message``, one line naming the verdict, the worst sample and difference,
        and ``nonfinite_allowed`` when non-finite outputs were declared expected.
    :raises UsageError: for a result that is not from accuracy mode, an unreadable log, a
        reference that is not installed, or a bad tolerance.
    """
    from d5core.loadgen.sut import sample_library
    from d5core.lv1.runner import declares_nonfinite, executor_by_name, load_model
    from d5core.plugins.reference import reference_name

    if result.mode != "accuracy":
        raise UsageError(
            f"the {result.executor} run was in {result.mode} mode; accuracy is checked "
            f"only for a run with --accuracy"
        )
    tolerances = _tolerances(rtol, atol)
    against = reference_name("d5.frameworks", reference)
    path = _log_path(result)
    logged = read_accuracy_log(path)
    network = load_model(str(model))
    allow_nonfinite = allow_nonfinite or declares_nonfinite(network)
    library = sample_library(network, result.settings)
    wanted = sorted({e.qsl_idx for e in logged if e.qsl_idx < len(library)})
    ref_executor = executor_by_name(against, network)
    outputs = reference_outputs(ref_executor, network, [library[i] for i in wanted])
    expected = dict(zip(wanted, outputs, strict=True))
    names = [o.name for o in network.outputs]
    layout = _layout((result.accuracy or {}).get("outputs"), names)
    verdict = compare_logged(
        logged, expected, names, tolerances=tolerances, layout=layout,
        allow_nonfinite=allow_nonfinite,
    )  # fmt: skip
    verdict.update(executor=result.executor, reference=against, log=str(path))
    if allow_nonfinite:
        verdict["nonfinite_allowed"] = True
    verdict["message"] = _message(result.executor, against, verdict)
    return verdict


def _message(executor: str, against: str, verdict: Mapping[str, Any]) -> str:
    checked, failed, worst = verdict["checked"], verdict["failed"], verdict["worst"]
    if not checked:
        return f"accuracy of {executor}: FAILED, no sample was logged (expected one per sample)"
    assert worst is not None
    output = f", output {worst['output']!r}" if worst["output"] else ""
    where = f"sample {worst['sample']}{output}"
    if verdict["passed"]:
        ratio = worst["tol_ratio"] or 0.0
        max_abs = "n/a" if worst["max_abs"] is None else f"{worst['max_abs']:.3g}"
        allowed = (
            "; non-finite outputs were declared expected (allowed where they equal the reference's)"
            if verdict.get("nonfinite_allowed")
            else ""
        )
        return (
            f"accuracy of {executor}: passed, {checked} samples match {against} (worst: "
            f"{where}, tol_ratio {ratio:.3g}, max_abs {max_abs}){allowed}"
        )
    return (
        f"accuracy of {executor}: FAILED, {failed} of {checked} samples differ from "
        f"{against}; worst: {where}: {worst['metric']}: {worst['detail']}"
    )
