"""Operator conformance: run the onnx package's backend node tests against a d5 executor.

The onnx package defines one test case per operator behaviour (``test_relu``,
``test_conv_with_strides_padding``, …: about 1,900 in onnx 1.23), each a small model with
inputs and expected outputs. The wheel does not ship them as files, so by default they
are generated in memory with ``onnx.backend.test.case.node.collect_testcases`` (a few
seconds); a directory laid out like ``onnx/backend/test/data/node`` (``CASE/model.onnx``,
``CASE/test_data_set_N/input_K.pb``, ``output_K.pb``, as ``backend-test-tools
generate-data`` writes it) can be read instead.

Each case is built with the executor, fed its inputs and its outputs compared as onnx's
own backend test runner compares them: same number of outputs, same shape, same dtype,
then ``numpy.testing.assert_allclose`` with the case's tolerances (``rtol=1e-3``,
``atol=1e-7`` for every node case today). A case ends as one of:

- ``passed``: every output matched;
- ``failed``: the executor ran and an output is wrong (value, shape, dtype or missing);
- ``unsupported``: constructing the executor raised a :class:`~d5core.errors.UsageError`
  naming one of the case's operator types (or saying it is unsupported);
- ``error``: any other exception, or the per-case time limit; the first line is kept.

An executor that hands some nodes to another engine (the numpy executor runs operators
it has no implementation of with ``onnx.reference``) says so in its ``details()``
(``"fallback"``: node name -> operator type); each case records the operator types that
went there, and the report counts the passed cases that needed such a fallback.
"""

from __future__ import annotations

import functools
import json
import math
import re
import signal
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from d5core.errors import UsageError

if TYPE_CHECKING:
    import onnx

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "MAX_TIMEOUT_S",
    "STATUSES",
    "BaselineCheck",
    "CaseResult",
    "CaseStatus",
    "ConformanceReport",
    "NodeCase",
    "check_baseline",
    "check_baseline_writable",
    "check_settings",
    "load_baseline",
    "node_cases",
    "run_case",
    "run_conformance",
    "update_baseline",
]

#: The tolerances of onnx's backend test runner (``TestCase.rtol`` / ``atol`` defaults).
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-7

#: The longest per-case time limit accepted (a day); 0 or ``None`` means none.
MAX_TIMEOUT_S = 86400.0

CaseStatus = Literal["passed", "failed", "unsupported", "error"]
#: Every status, in the order reports list them.
STATUSES: tuple[CaseStatus, ...] = ("passed", "failed", "unsupported", "error")


# -------------------------------------------------------------------------
# Cases
# -------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeCase:
    """One onnx backend node test: a model and its data sets (inputs, expected outputs)."""

    name: str
    model: onnx.ModelProto
    data_sets: Sequence[tuple[Sequence[Any], Sequence[Any]]]
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL


def node_cases(pattern: str | None = None, *, data_dir: str | Path | None = None) -> list[NodeCase]:
    """The node test cases whose name matches ``pattern`` (``re.search``), sorted by name.

    :param data_dir: read the cases from this directory (one folder per case) instead of
        generating them with ``onnx.backend.test.case.node``.
    :raises UsageError: when ``pattern`` is not a valid regular expression or
        ``data_dir`` is not a directory.
    """
    regex = _compile(pattern)
    if data_dir is not None:
        cases = _cases_from_dir(Path(data_dir), regex)
    else:
        from onnx.backend.test.case import node

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the generators overflow casts on purpose
            collected = node.collect_testcases(None)
        cases = [
            NodeCase(c.name, c.model, c.data_sets or [], c.rtol, c.atol)
            for c in collected
            if c.model is not None and (regex is None or regex.search(c.name))
        ]
    return sorted(cases, key=lambda c: c.name)


def _compile(pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--pattern {pattern!r} is not a regular expression: {exc}") from None


def _cases_from_dir(root: Path, regex: re.Pattern[str] | None) -> list[NodeCase]:
    import onnx
    from google.protobuf.message import DecodeError

    if not root.is_dir():
        raise UsageError(f"{root} is not a directory of onnx node test cases")
    try:
        folders = sorted(p for p in root.iterdir() if (p / "model.onnx").is_file())
    except OSError as exc:
        raise UsageError(f"cannot read the case directory {root}: {_first_line(exc)}") from None
    if not folders:
        raise UsageError(
            f"{root} holds no onnx node test case (a folder CASE with CASE/model.onnx); "
            "give the onnx/backend/test/data/node layout, or drop --data-dir"
        )
    cases = []
    for folder in folders:
        if regex is not None and not regex.search(folder.name):
            continue
        try:
            model = onnx.load(str(folder / "model.onnx"))
            data_sets = []
            for data in sorted(folder.glob("test_data_set_*")):
                inputs = _read_protos(data, "input", model.graph.input)
                outputs = _read_protos(data, "output", model.graph.output)
                data_sets.append((inputs, outputs))
        except (OSError, ValueError, IndexError, DecodeError) as exc:
            raise UsageError(
                f"case {folder} cannot be read ({_first_line(exc)}); regenerate it or remove it"
            ) from None
        cases.append(NodeCase(folder.name, model, data_sets))
    return cases


def _read_protos(folder: Path, kind: str, infos: Sequence[onnx.ValueInfoProto]) -> list[Any]:
    import onnx
    from onnx import numpy_helper

    values: list[Any] = []
    for i in range(len(list(folder.glob(f"{kind}_*.pb")))):
        raw = (folder / f"{kind}_{i}.pb").read_bytes()
        type_proto = infos[i].type
        proto: Any
        if type_proto.HasField("sequence_type"):
            proto = onnx.SequenceProto()
            proto.ParseFromString(raw)
            values.append(numpy_helper.to_list(proto))
        elif type_proto.HasField("optional_type"):
            proto = onnx.OptionalProto()
            proto.ParseFromString(raw)
            values.append(numpy_helper.to_optional(proto))
        else:
            proto = onnx.TensorProto()
            proto.ParseFromString(raw)
            values.append(numpy_helper.to_array(proto))
    return values


def _op_types(graph: onnx.GraphProto) -> list[str]:
    """Operator types of ``graph`` and of its subgraphs (If, Loop, Scan bodies)."""
    found: list[str] = []
    for node in graph.node:
        found.append(node.op_type)
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                found.extend(_op_types(sub))
    return found


def _case_op_type(case: NodeCase, single: Mapping[str, str], known: Mapping[str, str]) -> str:
    """The operator a case tests: its single node's type; else (an ``_expanded`` case, a
    function body) the type of the case it expands, or the known operator (lower-case
    name -> name) that its name starts with the longest."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return str(nodes[0].op_type)
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    if base in single:
        return single[base]
    squashed = case.name.removeprefix("test_").replace("_", "").lower()
    best = max((k for k in known if squashed.startswith(k)), key=len, default="")
    return known[best] if best else "(graph)"


# -------------------------------------------------------------------------
# Running one case
# -------------------------------------------------------------------------


@dataclass(frozen=True)
class CaseResult:
    """What became of one case."""

    name: str
    op_type: str
    status: CaseStatus
    #: Why it did not pass (one line); empty when it passed.
    message: str = ""
    seconds: float = 0.0
    #: Operator types the executor ran on a fallback engine (its ``details()``), sorted.
    fallback: tuple[str, ...] = ()


class _CaseTimeout(Exception):
    pass


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise :class:`_CaseTimeout` after ``seconds`` (SIGALRM, main thread only). Native
    code that does not return to Python is interrupted only when it does."""
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise _CaseTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds or 0))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0].strip() if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _names_an_op(message: str, op_types: Sequence[str]) -> bool:
    """Whether an executor's refusal names an operator: one of the case's, or any onnx
    operator (an executor may refuse an operator of a function's body)."""
    lowered = message.lower()
    if "unsupported" in lowered or "not supported" in lowered or "not implemented" in lowered:
        return True
    words = set(re.findall(r"[A-Za-z][A-Za-z0-9]*", message))
    return bool(words & (set(op_types) | set(_all_op_types().values())))


def _as_array(value: Any) -> Any:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_as_array(v) for v in value]
    if value is None or isinstance(value, np.ndarray):
        return value
    return np.asarray(value)


def _mismatch(expected: Any, actual: Any, rtol: float, atol: float) -> str | None:
    """Why ``actual`` does not match ``expected``, as onnx's runner judges it; None if it
    does."""
    import numpy as np

    if isinstance(expected, list):
        if not isinstance(actual, (list, tuple)):
            return f"expected a sequence, got {type(actual).__name__}"
        if len(actual) != len(expected):
            return f"sequence of {len(actual)} items, expected {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            why = _mismatch(e, _as_array(a), rtol, atol)
            if why:
                return f"item {i}: {why}"
        return None
    if expected is None:
        return None if actual is None else "expected an empty optional"
    if actual is None:
        return "no value"
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if expected.dtype == object:
        return None if np.array_equal(actual, expected) else "strings differ"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.kind not in "biufc":  # bfloat16, float8, int4 from ml_dtypes
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, 2**-6)  # two bfloat16 ulps, as onnx's runner allows
        actual, expected = actual.astype(np.float32), expected.astype(np.float32)
    close = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    bad = int((~close).sum())
    with np.errstate(all="ignore"):
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    worst = float(np.nanmax(diff[~close])) if bad else 0.0
    return (
        f"{bad} of {expected.size} elements differ beyond rtol={rtol:g}, atol={atol:g} "
        f"(max abs diff {worst:.3g})"
    )


def run_case(
    factory: Callable[[Any], Any],
    case: NodeCase,
    *,
    op_type: str = "",
    timeout_s: float | None = 60.0,
) -> CaseResult:
    """Build an executor for ``case`` with ``factory(model)``, run every data set and
    classify the outcome (see the module docstring)."""
    op_type = op_type or _case_op_type(case, {}, {})
    start = time.perf_counter()

    executor: Any = None

    def result(status: CaseStatus, message: str = "") -> CaseResult:
        return CaseResult(
            case.name, op_type, status, message, time.perf_counter() - start,
            _fallback_ops(executor),
        )  # fmt: skip

    graph = case.model.graph
    try:
        with _deadline(timeout_s), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                executor = factory(case.model)
                problems = _check_supported(executor)
            except UsageError as exc:
                status: CaseStatus = (
                    "unsupported" if _names_an_op(str(exc), _op_types(graph)) else "error"
                )
                return result(status, _first_line(exc))
            if problems:
                return result("unsupported", problems)
            for inputs, expected in case.data_sets:
                feeds = {
                    info.name: _as_array(value)
                    for info, value in zip(graph.input, inputs, strict=False)
                }
                outputs = executor.inference(feeds)
                for info, want in zip(graph.output, expected, strict=False):
                    if info.name not in outputs:
                        return result("failed", f"output {info.name!r} missing")
                    why = _mismatch(
                        _as_array(want), _as_array(outputs[info.name]), case.rtol, case.atol
                    )
                    if why:
                        return result("failed", f"output {info.name!r}: {why}")
    except _CaseTimeout:
        return result("error", f"timed out after {timeout_s:g} s")
    except Exception as exc:
        return result("error", _first_line(exc))
    return result("passed")


def _fallback_ops(executor: Any) -> tuple[str, ...]:
    """The operator types ``executor`` says it ran on a fallback engine, sorted."""
    details = getattr(executor, "details", None)
    if not callable(details):
        return ()
    try:
        found = details().get("fallback") or {}
    except Exception:  # an executor's report must not break the run
        return ()
    values = found.values() if isinstance(found, Mapping) else found
    return tuple(sorted({str(v) for v in values}))


def _check_supported(executor: Any) -> str:
    """Problems the executor's own ``check_supported()`` reports, as one line."""
    check = getattr(executor, "check_supported", None)
    if not callable(check):
        return ""
    found = check()
    if isinstance(found, str):
        return found
    if isinstance(found, (list, tuple, set, frozenset)):
        return "; ".join(str(p) for p in found)
    return ""


# -------------------------------------------------------------------------
# Reports
# -------------------------------------------------------------------------


@dataclass
class ConformanceReport:
    """The outcome of a conformance run of one executor."""

    executor: str
    results: list[CaseResult] = field(default_factory=list)
    #: The selection the run used; ``None`` when every case ran.
    pattern: str | None = None
    limit: int | None = None
    onnx_version: str = ""
    seconds: float = 0.0
    #: Installed versions of what the result depends on: the onnx package (the source
    #: of the cases), the executor's distribution and its requirements.
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every node case ran (no pattern, no limit)."""
        return self.pattern is None and self.limit is None

    @property
    def counts(self) -> dict[str, int]:
        """Cases per status, every status present."""
        found = Counter(r.status for r in self.results)
        return {s: found.get(s, 0) for s in STATUSES}

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> int:
        return self.counts["passed"]

    @property
    def pass_rate(self) -> float:
        """Passed cases over all cases that ran (unsupported ones included); 0 if none."""
        return self.passed / self.total if self.total else 0.0

    @property
    def passed_with_fallback(self) -> int:
        """Passed cases in which the executor ran some operator on a fallback engine."""
        return sum(1 for r in self.results if r.status == "passed" and r.fallback)

    @property
    def passed_own(self) -> int:
        """Passed cases that ran every node on the executor's own code (no fallback)."""
        return self.passed - self.passed_with_fallback

    @property
    def own_pass_rate(self) -> float:
        """Cases passed on the executor's own code alone over all cases; 0 if none."""
        return self.passed_own / self.total if self.total else 0.0

    @property
    def passing(self) -> list[str]:
        """Names of the cases that passed, sorted."""
        return sorted(r.name for r in self.results if r.status == "passed")

    @property
    def failures(self) -> list[CaseResult]:
        """Cases that ran and went wrong: ``failed`` and ``error``."""
        return [r for r in self.results if r.status in ("failed", "error")]

    def by_op_type(self) -> dict[str, dict[str, int]]:
        """Cases per status for each operator type, sorted by operator type."""
        table: dict[str, dict[str, int]] = {}
        for r in self.results:
            row = table.setdefault(r.op_type, {s: 0 for s in STATUSES})
            row[r.status] += 1
        return dict(sorted(table.items()))

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable summary with every case's result."""
        return {
            "executor": self.executor,
            "onnx": self.onnx_version,
            "versions": self.versions,
            "pattern": self.pattern,
            "limit": self.limit,
            "total": self.total,
            "counts": self.counts,
            "pass_rate": round(self.pass_rate, 4),
            "passed_with_fallback": self.passed_with_fallback,
            "passed_own": self.passed_own,
            "own_pass_rate": round(self.own_pass_rate, 4),
            "seconds": round(self.seconds, 2),
            "by_op_type": self.by_op_type(),
            "cases": [asdict(r) for r in self.results],
        }


def run_conformance(
    executor: str,
    *,
    pattern: str | None = None,
    limit: int | None = None,
    timeout_s: float | None = 60.0,
    data_dir: str | Path | None = None,
    progress: Callable[[CaseResult], None] | None = None,
) -> ConformanceReport:
    """Run the onnx backend node tests against the executor registered as ``executor``
    in ``d5.frameworks``.

    :param pattern: run only cases whose name matches this regular expression.
    :param limit: run at most this many cases (after ``pattern``, in name order).
    :param timeout_s: time limit per case, ``None`` for none; a case over it is an
        ``error``. Enforced with SIGALRM in the main thread only.
    :param data_dir: read cases from files instead of generating them (see
        :func:`node_cases`).
    :param progress: called with each case's result as it finishes.
    :raises UsageError: for an unknown or broken executor, a bad pattern or limit.
    """
    import onnx

    from d5core.plugins import get_plugin_manager
    from d5core.plugins.catalog import installed_versions

    check_settings(limit=limit, timeout_s=timeout_s)
    manager = get_plugin_manager()
    factory = manager.load("d5.frameworks", executor)
    versions = installed_versions(manager.record("d5.frameworks", executor).distribution)
    started = time.perf_counter()
    cases = node_cases(pattern, data_dir=data_dir)
    if not cases:
        where = f"in {data_dir}" if data_dir is not None else f"of onnx {onnx.__version__}"
        what = f"--pattern {pattern!r} matches" if pattern is not None else "there is"
        raise UsageError(f"{what} no node case {where}")
    single = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}
    known = _all_op_types()
    if limit is not None:
        cases = cases[:limit]
    report = ConformanceReport(
        executor,
        pattern=pattern,
        limit=limit,
        onnx_version=onnx.__version__,
        versions={**versions, "onnx": onnx.__version__},
    )
    for case in cases:
        res = run_case(
            factory, case, op_type=_case_op_type(case, single, known), timeout_s=timeout_s
        )
        report.results.append(res)
        if progress is not None:
            progress(res)
    report.seconds = time.perf_counter() - started
    return report


def check_settings(*, limit: int | None, timeout_s: float | None) -> None:
    """Refuse a case ``limit`` below 1 and a per-case ``timeout_s`` that is negative, not
    finite or over :data:`MAX_TIMEOUT_S` (0 and ``None`` mean no time limit).

    :raises UsageError: naming the bad value and what is accepted.
    """
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be 1 or more (drop it to run every case), not {limit}")
    if timeout_s is not None and not (math.isfinite(timeout_s) and 0 <= timeout_s <= MAX_TIMEOUT_S):
        raise UsageError(
            f"--timeout must be 0 (no limit) or a number of seconds up to {MAX_TIMEOUT_S:g}, "
            f"not {timeout_s:g}"
        )


@functools.lru_cache(maxsize=1)
def _all_op_types() -> dict[str, str]:
    """Every operator onnx defines, by lower-case name without underscores."""
    from onnx import defs

    return {s.name.lower(): s.name for s in defs.get_all_schemas_with_history()}


# -------------------------------------------------------------------------
# Baselines
# -------------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineCheck:
    """A run compared with the baseline of its executor."""

    executor: str
    #: Passing cases the baseline expects of this run (restricted to the cases that ran
    #: when the run was a selection).
    expected: int
    passed: int
    #: Cases the baseline lists as passing that did not pass in this run, sorted.
    newly_failing: list[str]
    #: Cases that pass now and are not in the baseline, sorted.
    newly_passing: list[str]
    #: Packages whose installed version differs from the one the baseline was recorded
    #: with, as ``"name 1.0 -> 1.1"`` (``"name (not recorded)"`` for an old baseline).
    version_changes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the pass count did not fall below the baseline's."""
        return self.passed >= self.expected


def load_baseline(path: str | Path) -> dict[str, Any]:
    """Read a baseline file: ``{executor: {"passed": n, "total": m, "passing": [...],
    "versions": {package: version}}}``.

    :raises UsageError: when it cannot be read or is not of that form.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # a device would be read without end
        raise UsageError(f"baseline {path} is not a regular file; give a JSON file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"baseline {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read baseline {path}: {_first_line(exc)}") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("passed"), int) for v in data.values()
    ):
        raise UsageError(
            f"baseline {path} must map executor names to "
            '{"passed": N, "total": M, "passing": [case, ...]}'
        )
    return data


def check_baseline(report: ConformanceReport, baseline: Mapping[str, Any]) -> BaselineCheck:
    """Compare ``report`` with its executor's entry in ``baseline``.

    A complete run is held to the baseline's ``passed`` count; a selection (pattern or
    limit) to the number of the baseline's ``passing`` cases that it ran.

    :raises UsageError: when the baseline has no entry for the executor.
    """
    entry = baseline.get(report.executor)
    if entry is None:
        known = ", ".join(sorted(baseline)) or "none"
        raise UsageError(
            f"the baseline has no entry for {report.executor!r} (it has: {known}); "
            "record one with --update-baseline"
        )
    listed = set(entry.get("passing", ()))
    ran = {r.name for r in report.results}
    passing = set(report.passing)
    expected = int(entry["passed"]) if report.complete or not listed else len(listed & ran)
    return BaselineCheck(
        executor=report.executor,
        expected=expected,
        passed=report.passed,
        newly_failing=sorted((listed & ran) - passing),
        newly_passing=sorted(passing - listed) if listed else [],
        version_changes=_version_changes(entry.get("versions"), report.versions),
    )


def _version_changes(recorded: object, installed: Mapping[str, str]) -> list[str]:
    """What differs between a baseline's recorded versions and the installed ones."""
    if not isinstance(recorded, Mapping):
        return [f"{name} (not recorded)" for name in sorted(installed)]
    return [
        f"{name} {recorded.get(name, '(none)')} -> {version}"
        for name, version in sorted(installed.items())
        if recorded.get(name) != version
    ]


def check_baseline_writable(path: str | Path) -> None:
    """Refuse a baseline file that cannot be written: a directory, a path under a regular
    file, or one in a folder (or the nearest existing one) this user cannot write.

    :raises UsageError: naming the path and why.
    """
    import os

    path = Path(path)
    if path.exists() and not path.is_file():  # a device would be read without end
        raise UsageError(f"--baseline {path} is not a regular file; give a JSON file")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise UsageError(f"--baseline {path} cannot be written (permission denied)")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--baseline {path} lies under {parent}, which is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--baseline {path} cannot be created: {parent} is not writable")


def update_baseline(path: str | Path, report: ConformanceReport) -> dict[str, Any]:
    """Record ``report`` as its executor's baseline in ``path``, keeping other executors'.

    :raises UsageError: when the run was a selection (a pattern or a limit).
    """
    if not report.complete:
        raise UsageError("--update-baseline needs a complete run: drop --pattern and --limit")
    path = Path(path)
    data = load_baseline(path) if path.exists() else {}
    data[report.executor] = {
        "passed": report.passed,
        "total": report.total,
        "passing": report.passing,
        "versions": report.versions,
    }
    data = dict(sorted(data.items()))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the baseline {path}: {_first_line(exc)}") from None
    return data
