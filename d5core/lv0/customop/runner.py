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

from d5core.errors import UsageError
from d5core.lv0.customop.builder import BuildResult, build, cache_dir
from d5core.lv0.customop.spec import OpSpec, shapes_text
from d5core.lv0.runner import OperatorValidation
from d5core.lv0.workloads.problems import InputSpec, Problem
from d5core.measure.invocations import Job, PreparedJob
from d5core.plugins import PluginManager

__all__ = [
    "REFERENCE",
    "BenchPlan",
    "CustomValidation",
    "bench_plan",
    "custom_op_job",
    "custom_problem",
    "validate_custom",
]

#: The build every other framework's forward is compared with.
REFERENCE = "numpy"

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
        """One line per framework that failed: its first failure."""
        return [f"{r.backend}: {r.report.failures()[0]}" for r in self.results if not r.passed]


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
) -> CustomValidation:
    """Build the custom operator in ``path`` and validate it in each framework.

    The numpy build is built too when installed (the forward reference), whether or
    not it is asked for; it is validated only when asked for (or when ``frameworks`` is
    ``None``), by central differences alone.

    :raises UsageError: for a compile error, bad shapes or attributes, or when no asked
        framework could be built.
    """
    from d5core.validate.announce import operator_validated
    from d5core.validate.operators import validate_operator

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
    inputs = problem.make_inputs(dtype, seed)
    reference = built.builds.get(REFERENCE)
    reference_op = reference.create(problem.attributes) if reference is not None else None
    results = []
    for name in wanted:
        candidate = built.builds[name].create(problem.attributes)
        compared = reference_op if name != REFERENCE else None
        report = validate_operator(candidate, compared, inputs, tolerances=tolerances,
                                   gradcheck=True, seed=seed,
                                   input_names=list(built.spec.inputs),
                                   output_names=list(built.spec.outputs))  # fmt: skip
        if compared is not None:
            against, note = f"{REFERENCE} build", ""
        elif name == REFERENCE:
            against = "central differences only"
            note = (f"the {REFERENCE} build is the reference of the other frameworks: its "
                    "backward was checked by central differences")  # fmt: skip
        else:
            against = "central differences only"
            note = (
                f"no {REFERENCE} build to compare the outputs with: only the backward was checked"
            )
        validation = OperatorValidation(
            built.spec.name,
            name,
            dtype,
            problem.label,
            against,
            report,
            built.spec.name if compared else None,
            note,
        )
        operator_validated(built.spec.name, name, validation.to_json(), manager)
        results.append(validation)
    return CustomValidation(built, results)


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
    from d5core.lv0.jobs import operator_details, problem_from_json
    from d5core.lv0.runner import prepare
    from d5core.measure.engine import synchronizer_of

    made = problem_from_json(problem)
    built = build(source, [backend], cache=cache)
    if backend not in built.builds:
        raise UsageError("; ".join(built.notes) or f"{backend} could not be built")
    inputs = made.make_inputs(dtype, seed)
    operator = built.builds[backend].create(made.attributes)
    fn = prepare(operator, direction, inputs, seed)
    return PreparedJob(
        fn=fn, synchronize=synchronizer_of(operator), details=operator_details(operator)
    )
