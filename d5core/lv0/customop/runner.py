"""Validate and benchmark a built custom operator in every framework.

Validation compares each framework's forward with the numpy build's (the reference of
custom operators: the same C++ called with no framework around it) and checks each
backward against central differences of that framework's own forward in float64, so a
wrong backward fails in every framework, naming the input whose gradient is wrong.
Benchmarks run as ``d5 bench op`` jobs in fresh worker processes, each loading the
cached build (:func:`custom_op_job`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.lv0.customop.builder import BuildResult, build, cache_dir
from d5core.lv0.customop.operator import CustomOperator
from d5core.lv0.customop.spec import OpSpec, shapes_text
from d5core.lv0.runner import OperatorValidation
from d5core.lv0.workloads.problems import InputSpec, Problem
from d5core.measure.invocations import Job, PreparedJob
from d5core.plugins import PluginManager

__all__ = [
    "DRAWN_ATTRIBUTE_SETS",
    "NO_PYTHON_REFERENCE",
    "REFERENCE",
    "BenchPlan",
    "CustomValidation",
    "bench_plan",
    "check_in_worker",
    "custom_op_job",
    "custom_problem",
    "drawn_problems",
    "python_reference_of",
    "validate_custom",
]

#: The build every other framework's forward is compared with.
REFERENCE = "numpy"

#: The check one framework's validation worker runs (:func:`check_in_worker`).
CHECK_TARGET = "d5core.lv0.customop.runner:check_in_worker"

#: The job kind of one custom operator measurement, run in a worker process.
JOB_KIND = "d5core.lv0.customop.runner:custom_op_job"


def custom_problem(
    spec: OpSpec,
    shapes: Sequence[tuple[int, ...]] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Problem:
    """The problem that runs ``spec``: ``shapes`` (else its declared ``D5_OP_SHAPES``),
    one per input, and its attributes (checked, the rest defaulted).

    :raises UsageError: for a missing or wrong number of shapes, or a bad attribute.
    """
    chosen = list(shapes or spec.shapes)
    if not chosen:
        raise UsageError(
            f"{spec.name} declares no default shapes; give one per input "
            f"({', '.join(spec.inputs)}) with --shape, or declare D5_OP_SHAPES in its source"
        )
    if len(chosen) != len(spec.inputs):
        raise UsageError(
            f"{spec.name} takes {len(spec.inputs)} inputs ({', '.join(spec.inputs)}) but "
            f"{len(chosen)} shapes were given; pass one per input, e.g. --shape "
            f"{shapes_text(spec.shapes) if spec.shapes else ','.join(['4x4'] * len(spec.inputs))}"
        )
    inputs = tuple(InputSpec(tuple(s), name=n) for s, n in zip(chosen, spec.inputs, strict=True))
    return Problem(spec.name, inputs, spec.resolve_attributes(attributes))


def _with_reference(frameworks: Sequence[str] | None) -> list[str] | None:
    if frameworks is None or REFERENCE in frameworks:
        return None if frameworks is None else list(frameworks)
    return [*frameworks, REFERENCE]


@dataclass
class CustomValidation:
    """The build and one validation per framework."""

    build: BuildResult
    results: list[OperatorValidation]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def failures(self) -> list[str]:
        """One line per validation that failed: its first failure, with the attribute
        values drawn when they are not the ones asked for."""
        first = self.results[0].problem if self.results else ""
        return [
            f"{r.backend}{'' if r.problem == first else ' at ' + r.problem}: "
            f"{r.report.failures()[0]}"
            for r in self.results
            if not r.passed
        ]


def validate_custom(
    path: Path | str,
    frameworks: Sequence[str] | None = None,
    *,
    shapes: Sequence[tuple[int, ...]] | None = None,
    attributes: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    seed: int = 0,
    tolerances: Any = None,
    cache: Path | str | None = None,
    manager: PluginManager | None = None,
    on_note: Callable[[str], None] | None = None,
    timeout_s: float | None = None,
    python_reference: Path | str | None = None,
) -> CustomValidation:
    """Build the custom operator in ``path`` and validate it in each framework.

    The numpy build is built too when installed (the forward reference), whether or
    not it is asked for; it is validated only when asked for (or when ``frameworks`` is
    ``None``), by central differences alone.

    :param timeout_s: run each framework's checks in a worker process of its own, killed
        after this many seconds (:func:`d5core.validate.isolated.run_isolated`): a crash,
        an abort or a time-out of the operator's code is then that framework's failed
        check, naming the signal and the phase, and the other frameworks are still
        checked. ``None`` checks in this process (no protection from the operator).
    :param python_reference: a Python file whose ``forward(inputs, attributes)`` every
        framework's forward is compared with (see :func:`python_reference_of`).
    :raises UsageError: for a compile error, bad shapes or attributes, or when no asked
        framework could be built.
    """
    from d5core.lv0.runner import validation_from_json
    from d5core.validate.announce import operator_validated
    from d5core.validate.isolated import run_isolated

    built = build(path, _with_reference(frameworks), cache=cache, manager=manager,
                  on_note=on_note)  # fmt: skip
    asked = list(frameworks) if frameworks is not None else list(built.builds)
    asked.sort(key=lambda n: n != REFERENCE)  # the reference first, the rest as asked
    wanted = [n for n in asked if n in built.builds]
    if not wanted:
        raise UsageError(
            f"{built.spec.name} was built for none of the frameworks asked for: "
            + "; ".join(built.notes)
        )
    problem = custom_problem(built.spec, shapes, attributes)
    problems = [problem, *drawn_problems(built.spec, problem, attributes, seed)]
    ref = None if python_reference is None else str(python_reference)
    results = []
    for name in wanted:
        if timeout_s is None:
            validations = [_validate_built(built, name, p, dtype, seed, tolerances, None, ref)
                           for p in problems]  # fmt: skip
        else:
            from d5core.lv0.jobs import problem_to_json

            args = {"source": str(built.source), "cache": str(cache_dir(cache)),
                    "framework": name, "problems": [problem_to_json(p) for p in problems],
                    "dtype": dtype, "seed": seed, "tolerances": _tolerances_json(tolerances),
                    "python_reference": ref}  # fmt: skip
            outcome = run_isolated(CHECK_TARGET, args, timeout_s=timeout_s)
            if outcome.usage:
                raise UsageError(outcome.failure)
            if outcome.failure:
                validations = [_failed(built.spec.name, name, dtype, problem, outcome.failure)]
            else:
                validations = [validation_from_json(v) for v in outcome.data]
        for validation in validations:
            operator_validated(built.spec.name, name, validation.to_json(), manager)
            results.append(validation)
    return CustomValidation(built, results)


#: How many sets of attribute values, drawn from the declared ranges, a custom operator
#: is checked at besides the one asked for (its defaults, or the --attr values).
DRAWN_ATTRIBUTE_SETS = 2


def drawn_problems(
    spec: OpSpec, problem: Problem, given: Mapping[str, Any] | None, seed: int
) -> list[Problem]:
    """``problem`` at :data:`DRAWN_ATTRIBUTE_SETS` more sets of attribute values, each
    attribute that declares a range (and was not given) drawn from it with ``seed``;
    none when no attribute declares one. Each is labelled with the values drawn."""
    ranged = [a for a in spec.attributes if a.ranged and a.name not in (given or {})]
    if not ranged:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(DRAWN_ATTRIBUTE_SETS):
        values = {a.name: a.draw(rng) for a in ranged}
        label = problem.label + " " + ",".join(f"{k}={v:.4g}" for k, v in values.items())
        attributes = {**problem.attributes, **values}
        drawn.append(Problem(problem.op, problem.inputs, attributes, name=label))
    return drawn


def _failed(op: str, framework: str, dtype: str, problem: Problem, cause: str) -> Any:
    """The validation of a framework whose check worker died or timed out."""
    from d5core.lv0.runner import OperatorValidation
    from d5core.validate.operators import ValidationReport

    report = ValidationReport(op_type=op, errors=[cause])
    return OperatorValidation(op, framework, dtype, problem.label, "(not reached)", report,
                              None, "", f"{framework}: {cause}")  # fmt: skip


def _tolerances_json(tolerances: Any) -> Any:
    """``tolerances`` as JSON: one tolerance as ``{"all": [rtol, atol]}``, a mapping by
    dtype as plain mappings."""
    if tolerances is None:
        return None
    if hasattr(tolerances, "rtol"):
        return {"all": [tolerances.rtol, tolerances.atol]}
    return {k: dict(v) if isinstance(v, Mapping) else {"rtol": v.rtol, "atol": v.atol}
            for k, v in tolerances.items()}  # fmt: skip


def _tolerances_from_json(data: Any) -> Any:
    from d5core.validate.operators import Tolerance

    if data is not None and "all" in data:
        return Tolerance(rtol=data["all"][0], atol=data["all"][1])
    return data


def _validate_built(
    built: BuildResult,
    name: str,
    problem: Problem,
    dtype: str,
    seed: int,
    tolerances: Any,
    on_phase: Callable[[str], None] | None = None,
    python_reference: str | None = None,
) -> OperatorValidation:
    """Validate ``name``'s build on ``problem`` in this process: its forward against the
    numpy build's (and against ``python_reference``'s ``forward``, when given), its
    backward by central differences; ``on_phase`` hears each phase (``numpy forward``,
    ``torch backward``, ``torch gradient check``...)."""
    from d5core.validate.operators import compare_outputs, validate_operator

    inputs = problem.make_inputs(dtype, seed)
    reference = built.builds.get(REFERENCE) if name != REFERENCE else None
    compared = reference.create(problem.attributes) if reference is not None else None
    candidate = built.builds[name].create(problem.attributes)
    if on_phase is not None:
        seen: list[str] = []

        def candidate_phase(kind: str) -> None:
            step = "gradient check" if "backward" in seen else kind
            seen.append(kind)
            on_phase(f"{name} {step}")

        if isinstance(candidate, CustomOperator):
            candidate.on_phase = candidate_phase
        if isinstance(compared, CustomOperator):
            compared.on_phase = lambda kind: on_phase(f"the {REFERENCE} reference's {kind}")
    report = validate_operator(candidate, compared, inputs, tolerances=tolerances,
                               gradcheck=True, seed=seed,
                               input_names=list(built.spec.inputs),
                               output_names=list(built.spec.outputs))  # fmt: skip
    if python_reference is not None and not report.errors:
        if on_phase is not None:
            on_phase(f"the Python reference's forward ({Path(python_reference).name})")
        forward = _reference_forward(python_reference)
        given = forward(list(inputs), dict(problem.attributes))
        expected = [np.asarray(a, dtype=dtype) for a in given]
        names = [f"{o} against {Path(python_reference).name}" for o in built.spec.outputs]
        report.outputs += compare_outputs(candidate.forward(inputs), expected,
                                          tolerances=tolerances, names=names)  # fmt: skip
    if compared is not None:
        against, note = f"{REFERENCE} build", ""
    elif name == REFERENCE:
        against = "central differences only"
        note = (f"the {REFERENCE} build is the reference of the other frameworks: its "
                "backward was checked by central differences")  # fmt: skip
    else:
        against = "central differences only"
        note = f"no {REFERENCE} build to compare the outputs with: only the backward was checked"
    if python_reference is not None:
        against += f", and {Path(python_reference).name}'s forward"
    return OperatorValidation(built.spec.name, name, dtype, problem.label, against, report,
                              built.spec.name if compared else None, note)  # fmt: skip


def _reference_forward(path: str) -> Callable[..., Sequence[Any]]:
    """The ``forward(inputs, attributes)`` the Python file ``path`` defines.

    :raises UsageError: for a file that cannot be run or defines no ``forward``.
    """
    import importlib.util

    spec = importlib.util.spec_from_file_location("d5_custom_op_reference", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load the Python reference {path}; give a .py file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except (OSError, SyntaxError, ImportError) as exc:
        raise UsageError(f"cannot load the Python reference {path}: {exc}") from None
    forward = getattr(module, "forward", None)
    if not callable(forward):
        raise UsageError(
            f"the Python reference {path} defines no forward(inputs, attributes); define "
            "one that returns the outputs as numpy arrays"
        )
    return forward  # type: ignore[no-any-return]


def python_reference_of(source: Path | str, given: Path | str | None = None) -> Path | None:
    """The Python (numpy) reference of a custom operator's forward: ``given``, else the
    ``.py`` file beside ``source`` with its name (``op.cpp`` -> ``op.py``), else ``None``.

    :raises UsageError: for a ``given`` file that does not exist.
    """
    if given is not None:
        if not Path(given).is_file():
            raise UsageError(f"--reference {given} is not a file; give a Python file")
        return Path(given).resolve()
    beside = Path(source).with_suffix(".py")
    return beside.resolve() if beside.is_file() else None


#: What the output and the stored run say when no Python reference was given.
NO_PYTHON_REFERENCE = "forward checked only for consistency between frameworks"


def check_in_worker(
    *,
    phase: Callable[[str], None],
    source: str,
    cache: str,
    framework: str,
    problems: Sequence[Mapping[str, Any]],
    dtype: str,
    seed: int,
    tolerances: Any,
    python_reference: str | None = None,
) -> list[dict[str, Any]]:
    """In a check worker (:mod:`d5core.validate.isolated`): load the cached builds of
    ``source`` for ``framework`` and the reference, validate ``framework``'s on each of
    ``problems`` (one per set of attribute values) and return the validations as JSON,
    reporting each phase to ``phase``."""
    from d5core.lv0.jobs import problem_from_json

    phase(f"loading the {framework} build")
    built = build(source, _with_reference([framework]), cache=cache)
    if framework not in built.builds:
        raise UsageError("; ".join(built.notes) or f"{framework} could not be built")
    tol = _tolerances_from_json(tolerances)
    validations = []
    for index, problem in enumerate(problems):
        made = problem_from_json(problem)
        say = phase if index == 0 else lambda step, at=made.label: phase(f"{step} at {at}")
        validations.append(_validate_built(built, framework, made, dtype, seed, tol, say,
                                           python_reference).to_json())  # fmt: skip
    return validations


@dataclass
class BenchPlan:
    """What ``d5 bench op --custom`` measures: one job per (problem, direction,
    framework), as ``d5 bench op`` lays them out."""

    build: BuildResult
    problems: list[Problem]
    names: list[str]
    devices: dict[str, str]
    jobs: list[Job]
    keys: list[tuple[Problem, str, str]]


def bench_plan(
    path: Path | str,
    frameworks: Sequence[str],
    *,
    shapes: Sequence[tuple[int, ...]] | None = None,
    attributes: Mapping[str, Any] | None = None,
    directions: Sequence[str] = ("forward",),
    dtype: str = "float32",
    seed: int = 0,
    cache: Path | str | None = None,
    on_note: Callable[[str], None] | None = None,
) -> BenchPlan:
    """Build the operator for ``frameworks`` (those not installed are skipped with a
    note) and lay out the jobs that time it in each.

    :raises UsageError: for a compile error, bad shapes or attributes, or when none of
        ``frameworks`` could be built.
    """
    from d5core.lv0.jobs import problem_to_json

    built = build(path, frameworks, cache=cache, on_note=on_note)
    names = [n for n in frameworks if n in built.builds]
    if not names:
        raise UsageError(
            f"{built.spec.name} was built for none of --backends: " + "; ".join(built.notes)
        )
    problem = custom_problem(built.spec, shapes, attributes)
    data = problem_to_json(problem)
    root = str(cache_dir(cache))
    jobs, keys = [], []
    for direction in directions:
        for name in names:
            args = {
                "source": str(built.source),
                "cache": root,
                "backend": name,
                "problem": data,
                "dtype": dtype,
                "direction": direction,
                "seed": seed,
            }
            jobs.append(Job(JOB_KIND, args, name=f"{name} {problem.label} {direction}"))
            keys.append((problem, direction, name))
    devices = {name: "cpu" for name in names}
    return BenchPlan(built, [problem], names, devices, jobs, keys)


def custom_op_job(
    source: str,
    cache: str,
    backend: str,
    problem: Mapping[str, Any],
    dtype: str,
    direction: str,
    seed: int,
) -> PreparedJob:
    """In a worker: the cached build of ``source`` for ``backend``, prepared for
    ``direction`` on the seeded inputs, as ``d5 bench op`` times any operator."""
    from d5core.lv0.jobs import operator_details, problem_from_json, timed_check
    from d5core.lv0.runner import preparation
    from d5core.lv0.timed_accuracy import job_check
    from d5core.measure.engine import synchronizer_of, timed_call

    made = problem_from_json(problem)
    built = build(source, [backend], cache=cache)
    if backend not in built.builds:
        raise UsageError("; ".join(built.notes) or f"{backend} could not be built")
    inputs = made.make_inputs(dtype, seed)
    operator = built.builds[backend].create(made.attributes)
    synchronize = synchronizer_of(operator)
    fn, prepare_s = timed_call(preparation(operator, direction, inputs, seed), synchronize)
    check = timed_check(operator, made.op, direction, inputs, seed, fn)
    details = {**operator_details(operator), "prepare_s": prepare_s}
    return PreparedJob(
        fn=fn, synchronize=synchronize, details=details, check=job_check(check),
    )  # fmt: skip
