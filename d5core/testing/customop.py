"""C++ custom operators for plugins' tests: build one for some frameworks, validate it,
and reach into the build the way the build tests need (its cache key, d5's header).

A framework plugin that offers the ``d5_custom_op_glue`` hook tests it by building d5's
example operator for its framework and validating it against finite differences::

    from d5core.testing.customop import validate_custom

    outcome = validate_custom(EXAMPLE, ["torch"], cache=tmp_path)
    assert outcome.passed

and holds its glue to the crash suite: an operator whose code segfaults, aborts, throws
a non-exception, frees twice, loops forever, exits the process, gives NaN or writes a
wrong shape must end ``d5 validate op --custom`` as a failed check (exit 1, one line
naming the fault), stored as a failed validation, never as a dead or hung d5::

    from d5core.testing.customop import CRASH_CASES, check_crash_case

    @pytest.mark.parametrize("case", CRASH_CASES, ids=lambda c: c.name)
    def test_a_faulty_custom_op_is_a_failed_check(case, crash_source, tmp_path):
        check_crash_case(case, "torch", crash_source, tmp_path)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.lv0.customop import builder as _builder
from d5core.lv0.customop import compiler as _compiler
from d5core.lv0.customop.builder import BuildResult, build, cache_key, header_path
from d5core.lv0.customop.compiler import ERROR_LINES
from d5core.lv0.customop.runner import validate_custom

__all__ = [
    "CRASH_CASES",
    "CRASH_SOURCE",
    "ERROR_LINES",
    "BuildResult",
    "CrashCase",
    "CustomOpCrashTests",
    "build",
    "cache_key",
    "check_crash_case",
    "crash_source",
    "forbid_compiling",
    "header_path",
    "run_crash_case",
    "skip_syntax_check",
    "stop_before_compiling",
    "use_header",
    "validate_custom",
]


def use_header(monkeypatch: pytest.MonkeyPatch, header: Path) -> None:
    """Build against ``header`` instead of d5's ``d5_op.h`` for the rest of the test."""
    monkeypatch.setattr(_builder, "header_path", lambda: header)


def skip_syntax_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leave out the quick check of the source against d5's header alone, so that an
    error reaches the framework's own compile (for the rest of the test)."""
    monkeypatch.setattr(_builder, "syntax_check", lambda source, include: None)


def stop_before_compiling(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every framework's build stop, with ``UsageError("stop here")``, just before it
    compiles; the list returned collects the cache key each build would have used."""
    keys: list[str] = []

    def record(glue: Any, spec: Any, text: Any, key: str, final: Any) -> None:
        keys.append(key)
        raise UsageError("stop here")

    monkeypatch.setattr(_builder, "_build_one", record)
    return keys


def forbid_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any compile for the rest of the test (the syntax check, a framework's build,
    the shared-library compile) fail the test: for checking that a build comes from the
    cache. The compiler's identity (``--version``) is still read."""

    def no_compiler(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the compiler ran for a cached build")

    monkeypatch.setattr(_builder, "syntax_check", no_compiler)
    monkeypatch.setattr(_compiler, "compile_shared", no_compiler)
    monkeypatch.setattr(_builder, "_build_one", no_compiler)


#: One C++ custom operator with every fault of the crash suite, chosen by its ``fault``
#: attribute (0: a correct ``Y = 2 X``), so that each framework compiles it once.
CRASH_SOURCE = r"""
#include <d5_op.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

D5_OP_NAME("faulty");
D5_OP_INPUTS("X");
D5_OP_OUTPUTS("Y");
D5_OP_INT_ATTR("fault", 0);
D5_OP_SHAPES("4x3");

void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs) {
  const long fault = attrs.i("fault");
  if (fault == 1) { volatile float* p = nullptr; *p = 1.0f; }      // segmentation fault
  if (fault == 2) std::abort();                                     // abort()
  if (fault == 3) throw 42;                                         // not a std::exception
  if (fault == 4) {                                                 // heap corruption
    int* volatile p = static_cast<int*>(std::malloc(16));
    std::free(p);
    std::free(p);                                                   // a double free
  }
  if (fault == 5) { volatile bool spin = true; while (spin) {} }    // endless loop
  if (fault == 6) std::exit(0);                                     // ends the process, 0
  if (fault == 9) {  // a segmentation fault in the first process only (marker: D5_CRASH_ONCE)
    const char* marker = std::getenv("D5_CRASH_ONCE");
    const int fd = marker ? open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600) : -1;
    if (fd >= 0) { close(fd); volatile float* p = nullptr; *p = 1.0f; }
  }
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = in[0].ptr<T>();
    T* y = out[0].ptr<T>();
    const std::int64_t n = in[0].size();
    // fault 8 writes the output as if it had one row only: a wrong shape
    const std::int64_t written = fault == 8 ? in[0].shape.back() : n;
    for (std::int64_t i = 0; i < written; ++i)
      y[i] = fault == 7 ? std::numeric_limits<T>::quiet_NaN() : 2 * x[i];
  });
}

void backward(const d5::Inputs& grad_out, const d5::Inputs& in, d5::Outputs& grad_in,
              const d5::Attributes& attrs) {
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* gy = grad_out[0].ptr<T>();
    T* gx = grad_in[0].ptr<T>();
    for (std::int64_t i = 0; i < in[0].size(); ++i) gx[i] = 2 * gy[i];
  });
}
"""


@dataclass(frozen=True)
class CrashCase:
    """One fault of the crash suite: the ``fault`` attribute that makes
    :data:`CRASH_SOURCE` commit it, and what ``d5 validate op --custom`` must say."""

    name: str
    fault: int
    #: A regular expression the one-line failure must match (``{fw}``: the framework).
    message: str
    #: ``--timeout`` for the case (``None``: the default).
    timeout_s: float | None = None
    #: The exit code d5 must end with: 1, a failed check.
    exit_code: int = 1
    #: ``message`` for a framework whose own handlers change how the process dies.
    by_framework: tuple[tuple[str, str], ...] = ()

    def expected(self, framework: str) -> str:
        """The regular expression the failure must match in ``framework``."""
        return dict(self.by_framework).get(framework, self.message).format(fw=framework)


#: MXNet's own SIGSEGV handler prints a stack trace and ends in ``std::terminate``, and its
#: engine's threads make ``exit()`` end there too: the worker dies of SIGABRT.
_MXNET_ABORTS = (("mxnet", r"killed by SIGABRT during {fw} forward"),)

#: Every fault, as d5 must report it. A signal may differ by framework (a C++ throw that
#: a framework catches is its error, not ``SIGABRT``), so some messages allow either.
CRASH_CASES: tuple[CrashCase, ...] = (
    CrashCase("segfault", 1, r"killed by SIGSEGV during {fw} forward", by_framework=_MXNET_ABORTS),
    CrashCase("abort", 2, r"killed by SIGABRT during {fw} forward"),
    CrashCase("throw-int", 3, r"(killed by SIGABRT during {fw} forward|forward raised)"),
    CrashCase("double-free", 4, r"killed by SIGABRT during {fw} forward"),
    CrashCase("endless-loop", 5, r"did not finish within its time limit of 8 s", timeout_s=8),
    CrashCase(
        "exit-0",
        6,
        r"exited with code 0 without reporting a result during {fw} forward",
        by_framework=_MXNET_ABORTS,
    ),
    CrashCase("nan-output", 7, r"(non-finite|nonfinite|NaN)"),
    CrashCase("wrong-shape", 8, r"(output 0|gradient of input 0)"),
)


def crash_source(directory: Path, cache: Path | None = None, framework: str = "") -> Path:
    """:data:`CRASH_SOURCE` written as ``faulty.cpp`` in ``directory``; its path. With
    ``cache`` and ``framework``, it is also built there for ``framework`` and numpy (the
    reference), so that each case then runs from the cache."""
    path = Path(directory) / "faulty.cpp"
    path.write_text(CRASH_SOURCE)
    if cache is not None and framework:
        built = build(path, sorted({framework, "numpy"}), cache=cache)
        assert framework in built.builds, built.notes
    return path


def run_crash_case(
    case: CrashCase, framework: str, source: Path, cache: Path, db: Path
) -> subprocess.CompletedProcess[str]:
    """Run ``d5 validate op --custom source --attr fault=N`` in ``framework`` as a user
    would (a fresh d5 process, builds cached in ``cache``, runs stored in ``db``)."""
    command = [sys.executable, "-m", "d5core", "validate", "op", "--custom", str(source),
               "--backends", framework, "--attr", f"fault={case.fault}",
               "--db", str(db)]  # fmt: skip
    if case.timeout_s is not None:
        command += ["--timeout", f"{case.timeout_s:g}"]
    env = {**os.environ, "D5_OP_CACHE": str(cache)}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)


def check_crash_case(case: CrashCase, framework: str, source: Path, cache: Path, db: Path) -> str:
    """Assert that ``case`` in ``framework`` ends d5 with the case's exit code and one
    ``d5: error:`` line naming the fault, and that the validation is stored with
    ``passed`` 0; the error line."""
    from d5core.results.store import ResultsStore

    done = run_crash_case(case, framework, source, cache, db)
    lines = [x for x in done.stderr.splitlines() if x.startswith("d5: error:")]
    assert done.returncode == case.exit_code, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert re.search(case.expected(framework), lines[0]), lines[0]
    with ResultsStore.open(db) as store:
        [run] = [r for r in store.list_runs(kind="validate") if r.name == f"faulty {framework}"]
        passed = [m.value for m in store.metrics(run.id) if m.name == "passed"]
    assert passed == [0.0], (run, passed)
    print(f"| {case.name} | {framework} | {done.returncode} | {lines[0]} | {run.status}, "
          f"passed=0{', error: ' + run.error if run.error else ''} |")  # fmt: skip
    return lines[0]


class CustomOpCrashTests:
    """The crash suite for one framework's custom-operator glue: subclass it with
    ``framework`` set (``"torch"``) in a module named ``test_*``. Every case of
    :data:`CRASH_CASES` (a segfault, ``abort()``, a non-exception throw, a double free,
    an endless loop, ``exit(0)``, NaN, a wrong shape) must end ``d5 validate op --custom``
    as a failed check in one line, stored as a failed validation, with d5 alive.
    The source is built once per class."""

    #: The framework whose glue is under test.
    framework: str = ""

    @pytest.fixture(scope="class")
    @classmethod
    def cache(cls, tmp_path_factory: pytest.TempPathFactory) -> Path:
        return tmp_path_factory.mktemp("ops")

    @pytest.fixture(scope="class")
    @classmethod
    def source(cls, tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
        return crash_source(tmp_path_factory.mktemp("src"), cache, cls.framework)

    @pytest.mark.parametrize("case", CRASH_CASES, ids=lambda c: c.name)
    def test_a_faulty_custom_op_is_a_failed_check_not_a_dead_d5(
        self, case: CrashCase, source: Path, cache: Path, tmp_path: Path
    ) -> None:
        check_crash_case(case, self.framework, source, cache, tmp_path / "runs.db")
