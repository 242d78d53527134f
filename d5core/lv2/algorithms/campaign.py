"""The runner of ``d5 bench algorithms``: every trial of a campaign in a fresh process.

A campaign is a suite, a list of algorithms (each on the recipe's executor or on one
given as ``ALGORITHM@EXECUTOR``), a ruleset, a number of studies and of trials per study,
and a seed; its id is a hash of all of them (:attr:`CampaignSpec.id`). For each workload
x algorithm x study x trial, the runner

1. skips the trial when the store already holds its record
   (:func:`~d5core.lv2.algorithms.trials.finished`): a campaign killed at any moment
   resumes where it stopped, and a finished one reruns nothing;
2. derives the trial's seed and its point of the algorithm's search space from
   (seed, study, trial) alone, so that every workload and every algorithm of a study
   draw the same way (external ruleset: :func:`~.search_space.sample`; self: the
   space's :func:`~.search_space.defaults`, one trial per study, 1.5 times the budget);
3. trains ``d5 run`` in a fresh process (``python -m d5core run``) on a copy of the
   workload's recipe whose FIXED target and ``time_budget`` are the suite's and whose
   ``budget_clock`` is ``"training"`` (evaluation is not timed), with the algorithm and
   its hyperparameters set as MUTABLE keys; the process is killed when it outlives its
   wall-clock limit;
4. stores the trial record (:func:`~d5core.lv2.algorithms.trials.record_trial`) with
   what became of it: ``reached``, ``missed`` (the budget or the epochs ran out),
   ``diverged``, ``failed`` (the process ended in an error; the message is its last line
   of stderr) or ``over_budget`` (killed at the wall-clock limit). A trial that goes
   wrong is a result, never the end of the campaign.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from d5core.errors import UsageError
from d5core.lv2.algorithms.suites import TARGET_KEYS, Suite, Workload, toml_document
from d5core.lv2.algorithms.trials import RULESETS, TrialRecord

__all__ = [
    "DEFAULT_TIMEOUT_FACTOR",
    "SELF_BUDGET_FACTOR",
    "STARTUP_ALLOWANCE_S",
    "AlgorithmChoice",
    "CampaignResult",
    "CampaignSpec",
    "PlannedTrial",
    "campaign_tag",
    "parse_algorithms",
    "plan",
    "run_campaign",
    "trial_seed",
    "workload_recipe",
]

#: The self-tuning ruleset's budget, as a multiple of the workload's (AlgoPerf: 1.5).
SELF_BUDGET_FACTOR = 1.5
#: ``--timeout-factor``'s default: a trial's process is killed after this many times its
#: training budget, plus :data:`STARTUP_ALLOWANCE_S` (evaluation, imports and data
#: loading are not in the budget, so the wall time of a trial is always above it).
DEFAULT_TIMEOUT_FACTOR = 3.0
#: Seconds every trial's wall-clock limit adds for starting the process and loading data.
STARTUP_ALLOWANCE_S = 60.0


@dataclass(frozen=True)
class AlgorithmChoice:
    """An algorithm of a campaign, and the executor it trains on (``None``: each
    workload recipe's own)."""

    name: str
    executor: str | None = None

    @property
    def spec(self) -> str:
        """``NAME@EXECUTOR`` or ``NAME``, as given on the command line."""
        return self.name if self.executor is None else f"{self.name}@{self.executor}"


def parse_algorithms(text: str, executor: str | None = None) -> tuple[AlgorithmChoice, ...]:
    """``"adam,momentum@torch"`` as algorithm choices; ``executor`` is that of those
    given without ``@``. Each choice once, in the order given.

    :raises UsageError: for an empty list, an empty name, or a choice given twice.
    """
    choices: list[AlgorithmChoice] = []
    for item in text.split(","):
        item = item.strip()
        name, at, where = item.partition("@")
        name, where = name.strip(), where.strip()
        if not name or (at and not where):
            raise UsageError(
                f"--algorithms wants NAME or NAME@EXECUTOR separated by commas, got {text!r}"
            )
        choice = AlgorithmChoice(name, where if at else executor)
        if choice in choices:
            raise UsageError(f"--algorithms names {choice.spec} twice; give each once")
        choices.append(choice)
    return tuple(choices)


def trial_seed(seed: int, study: int, trial: int) -> int:
    """The training seed of a trial: derived from (seed, study, trial) alone, so that
    every workload and algorithm of one trial of one study trains with the same seed."""
    import numpy as np

    state = np.random.SeedSequence([seed, study, trial]).generate_state(1, dtype=np.uint32)
    return int(state[0]) & 0x7FFFFFFF


def _hyperparameter_rng(seed: int, study: int, trial: int) -> Any:
    import numpy as np

    # a stream of its own, apart from the one the training seed is drawn from
    return np.random.default_rng(np.random.SeedSequence([seed, study, trial, 1]))


@dataclass(frozen=True)
class CampaignSpec:
    """Everything that decides a campaign's trials."""

    suite: Suite
    algorithms: tuple[AlgorithmChoice, ...]
    ruleset: str
    studies: int
    #: Trials per study (1 under the self ruleset).
    trials: int
    seed: int = 0
    #: The wall-clock limit of a trial: this times its budget plus :data:`STARTUP_ALLOWANCE_S`.
    timeout_factor: float = DEFAULT_TIMEOUT_FACTOR

    def __post_init__(self) -> None:
        if self.ruleset not in RULESETS:
            raise UsageError(f"unknown ruleset {self.ruleset!r}; use one of {', '.join(RULESETS)}")
        if self.studies < 1 or self.trials < 1:
            raise UsageError(
                f"studies and trials must be at least 1, got {self.studies} and {self.trials}"
            )
        if self.ruleset == "self" and self.trials != 1:
            raise UsageError(
                "the self ruleset runs one trial per study at the search space's defaults; "
                "drop --trials (or use --ruleset external)"
            )
        if not self.algorithms:
            raise UsageError("a campaign needs at least one algorithm")
        if not (math.isfinite(self.timeout_factor) and self.timeout_factor >= 1):
            raise UsageError(
                f"the timeout factor must be a number of at least 1, got {self.timeout_factor!r}"
            )

    @property
    def id(self) -> str:
        """The campaign's id: 12 hex digits of a hash of the suite's content, the
        algorithms (in any order), the ruleset, the studies, the trials and the seed."""
        content = {
            "suite_hash": self.suite.hash,
            "algorithms": sorted(a.spec for a in self.algorithms),
            "ruleset": self.ruleset,
            "studies": self.studies,
            "trials": self.trials,
            "seed": self.seed,
        }
        text = json.dumps(content, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def budget_s(self, workload: Workload) -> float:
        """The training budget of a trial of ``workload`` under the ruleset."""
        factor = SELF_BUDGET_FACTOR if self.ruleset == "self" else 1.0
        return workload.budget_s * factor

    def wall_limit_s(self, workload: Workload) -> float:
        """The wall-clock seconds after which a trial's process is killed."""
        return self.budget_s(workload) * self.timeout_factor + STARTUP_ALLOWANCE_S


@dataclass(frozen=True)
class PlannedTrial:
    """One trial to run: where, what, with which seed and hyperparameters."""

    workload: Workload
    algorithm: str
    #: The executor it trains on, and whether it was chosen (``--set executor=``) or is
    #: the recipe's own.
    executor: str
    chosen_executor: bool
    study: int
    trial: int
    seed: int
    hyperparameters: dict[str, Any]
    budget_s: float

    @property
    def key(self) -> tuple[str, str, str, int, int]:
        """What :func:`~d5core.lv2.algorithms.trials.finished` knows the trial by."""
        return (self.workload.name, self.algorithm, self.executor, self.study, self.trial)

    @property
    def label(self) -> str:
        """``ALGORITHM@EXECUTOR``."""
        return f"{self.algorithm}@{self.executor}"


def _plain(value: Any) -> Any:
    """``value`` with numpy scalars made Python numbers (what JSON and TOML hold)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _hyperparameters(space: Any, spec: CampaignSpec, study: int, trial: int) -> dict[str, Any]:
    from d5core.lv2.algorithms import search_space

    if spec.ruleset == "self":
        return dict(_plain(search_space.defaults(space)))
    rng = _hyperparameter_rng(spec.seed, study, trial)
    return dict(_plain(search_space.sample(space, rng)))


def plan(spec: CampaignSpec) -> list[PlannedTrial]:
    """Every trial of the campaign, in the order they run: workload, algorithm, study,
    trial.

    :raises UsageError: for an unknown algorithm (naming the known ones) or a search
        space that cannot be sampled.
    """
    from d5core.lv2.algorithms.registry import load_algorithm

    spaces = {a.name: load_algorithm(a.name).search_space for a in spec.algorithms}
    draws: dict[tuple[str, int, int], dict[str, Any]] = {}
    planned: list[PlannedTrial] = []
    for workload in spec.suite.workloads:
        for choice in spec.algorithms:
            for study in range(spec.studies):
                for trial in range(spec.trials):
                    key = (choice.name, study, trial)
                    if key not in draws:
                        draws[key] = _hyperparameters(spaces[choice.name], spec, study, trial)
                    planned.append(
                        PlannedTrial(
                            workload=workload,
                            algorithm=choice.name,
                            executor=choice.executor or workload.executor,
                            chosen_executor=choice.executor is not None,
                            study=study,
                            trial=trial,
                            seed=trial_seed(spec.seed, study, trial),
                            hyperparameters=draws[key],
                            budget_s=spec.budget_s(workload),
                        )
                    )
    return planned


def campaign_tag(campaign: str) -> str:
    """The tag every run of the campaign carries (trial records and trainings)."""
    return f"algorithm-campaign-{campaign}"


# -- one trial -------------------------------------------------------------------------

#: FIXED keys a workload's copy drops: the recipe's own targets and budget, which the
#: suite's replace.
_REPLACED = (*TARGET_KEYS.values(), "time_budget", "budget_clock")


def workload_recipe(workload: Workload, budget_s: float, directory: Path) -> Path:
    """Write the recipe a trial of ``workload`` trains: the workload's recipe with the
    suite's target and ``budget_s`` (training seconds) in FIXED, ``budget_clock =
    "training"``, and no METRICS thresholds (the trial's outcome is the target, not the
    recipe's checks). The file is named after the workload, which is the recipe's name
    the algorithm sees. A model given as a relative ``.onnx`` path is made absolute.

    :return: the file written, ``directory / f"{workload.name}.toml"``.
    """
    from d5core.lv2.recipes import load_recipe

    recipe = load_recipe(workload.recipe)
    fixed = {k: v for k, v in recipe.fixed.items() if k not in _REPLACED}
    model = fixed.get("model")
    if isinstance(model, str) and model.endswith(".onnx") and not Path(model).is_absolute():
        fixed["model"] = str((workload.recipe.parent / model).resolve())
    fixed[TARGET_KEYS[workload.target_kind]] = workload.target_value
    fixed["time_budget"] = float(budget_s)
    fixed["budget_clock"] = "training"
    document = {"fixed": fixed, "mutable": dict(recipe.mutable)}
    path = directory / f"{workload.name}.toml"
    path.write_text(
        f"# {workload.name} as trained by d5 bench algorithms: {workload.recipe}\n"
        "# with the suite's target and budget (training seconds, evaluation excluded).\n\n"
        + toml_document(document),
        encoding="utf-8",
    )
    return path


def _trial_argv(
    planned: PlannedTrial, recipe: Path, db: Path | str, tags: Sequence[str]
) -> list[str]:
    argv = [sys.executable, "-m", "d5core", "run", str(recipe),
            "--set", f"algorithm={planned.algorithm}",
            "--set", "hyperparameters=" + json.dumps(planned.hyperparameters),
            "--seed", str(planned.seed), "--json", "--db", str(db)]  # fmt: skip
    if planned.chosen_executor:
        argv += ["--set", f"executor={planned.executor}"]
    for tag in tags:
        argv += ["--tag", tag]
    return argv


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the trial's process is killed when the campaign's process dies, so that a
    campaign killed with SIGKILL leaves no trial training on."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def _kill(process: subprocess.Popen[str]) -> None:
    """Kill the trial's process and everything it started (its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        process.kill()


@dataclass
class _Finished:
    """What the trial's process left: exit code (``None``: killed at the limit), output."""

    code: int | None
    stdout: str
    stderr: str
    pid: int
    wall_s: float


def _launch(argv: Sequence[str], limit_s: float) -> _Finished:
    started = time.perf_counter()
    linux = sys.platform.startswith("linux")
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=_die_with_parent if linux else None,
    )
    try:
        out, err = process.communicate(timeout=limit_s)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        _kill(process)
        out, err = process.communicate()
        code = None
    except BaseException:  # interrupted: the trial goes with the campaign
        _kill(process)
        process.wait()
        raise
    return _Finished(code, out or "", err or "", process.pid, time.perf_counter() - started)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


#: A run's figure for the time to its target with evaluation excluded, and for the
#: evaluation seconds: the first of these names the run reports.
_TRAINING_TIME_KEYS = ("time_to_target_training", "time_to_target_training_s")
_EVAL_KEYS = ("eval_time", "eval_s", "evaluation_time")
#: The time to target, evaluation included, by the target's kind.
_WALL_TIME_KEYS = {
    "accuracy": "time_to_accuracy",
    "perplexity": "time_to_perplexity",
    "loss": "time_to_loss",
}


def _first(values: Mapping[str, Any], names: Sequence[str]) -> float | None:
    for name in names:
        number = _number(values.get(name))
        if number is not None:
            return number
    return None


def _target_times(row: Mapping[str, Any], kind: str) -> tuple[float | None, float]:
    """The training seconds to the target (evaluation excluded; ``None``: not reached)
    and the evaluation seconds, from a ``d5 run --json`` run."""
    values = dict(row.get("metrics") or {})
    parts = dict(row.get("time_to_accuracy_parts") or {})
    reached_wall = _number(values.get(_WALL_TIME_KEYS[kind]))
    training = _first(values, _TRAINING_TIME_KEYS)
    eval_s = _first(values, _EVAL_KEYS)
    if eval_s is None:
        eval_s = _number(parts.get("tests")) or 0.0
    if reached_wall is None:
        return None, eval_s
    if training is None:  # a run that does not report it: the wall time less its tests
        training = max(0.0, reached_wall - (_number(parts.get("tests")) or 0.0))
    return training, eval_s


def _outcome(planned: PlannedTrial, done: _Finished, limit_s: float) -> dict[str, Any]:
    """The trial record's outcome fields from what its process left."""
    if done.code is None:
        return {"outcome": "over_budget", "time_to_target_s": None, "eval_s": 0.0,
                "message": f"killed after {limit_s:.0f} s of wall-clock time "
                           f"(budget {planned.budget_s:g} s of training)"}  # fmt: skip
    row: Mapping[str, Any] | None = None
    try:
        from d5core.cli.output import read_json

        runs = read_json(done.stdout, "run")["runs"]
        row = runs[0] if runs else None
    except (ValueError, KeyError, TypeError, IndexError):
        row = None
    if row is None:
        why = _last_line(done.stderr) or f"exit code {done.code} and no result"
        return {"outcome": "failed", "time_to_target_s": None, "eval_s": 0.0, "message": why,
                "training_run": None}  # fmt: skip
    reached, eval_s = _target_times(row, planned.workload.target_kind)
    fields: dict[str, Any] = {"training_run": row.get("run_id"), "eval_s": eval_s,
                              "time_to_target_s": None}  # fmt: skip
    reason = str(row.get("stop_reason") or "")
    if row.get("status") == "diverged":
        fields.update(outcome="diverged", message=f"diverged ({reason or 'a non-finite loss'})")
    elif reached is not None and reached <= planned.budget_s:
        fields.update(outcome="reached", time_to_target_s=reached,
                      message=f"reached in {reached:.3f} s of training")  # fmt: skip
    elif reached is not None:
        fields.update(outcome="missed",
                      message=f"reached after the budget ({reached:.3f} s > "
                              f"{planned.budget_s:g} s)")  # fmt: skip
    else:
        fields.update(outcome="missed", message=f"target not reached ({reason or 'stopped'})")
    return fields


def _training_run_of(db: Path | str, tag: str, pid: int) -> str | None:
    """The training run the trial's process began (``None``: it began none)."""
    from d5core.results.store import ResultsStore

    with ResultsStore.open(db) as store:
        for run in store.list_runs(kind="train", tag=tag, limit=50):
            if run.pid == pid:
                return run.id
    return None


def run_trial(
    spec: CampaignSpec, planned: PlannedTrial, recipe: Path, db: Path | str
) -> TrialRecord:
    """Train ``planned`` in a fresh process on ``recipe`` (see :func:`workload_recipe`)
    and return its record (not stored)."""
    tag = campaign_tag(spec.id)
    limit = spec.wall_limit_s(planned.workload)
    done = _launch(_trial_argv(planned, recipe, db, [tag]), limit)
    fields = _outcome(planned, done, limit)
    if fields.get("training_run") is None:
        fields["training_run"] = _training_run_of(db, tag, done.pid)
    return TrialRecord(
        campaign=spec.id,
        suite=spec.suite.name,
        suite_hash=spec.suite.hash,
        workload=planned.workload.name,
        algorithm=planned.algorithm,
        executor=planned.executor,
        ruleset=spec.ruleset,
        study=planned.study,
        trial=planned.trial,
        seed=planned.seed,
        hyperparameters=dict(planned.hyperparameters),
        budget_s=planned.budget_s,
        target=planned.workload.target,
        **fields,
    )


# -- the campaign ----------------------------------------------------------------------


@dataclass
class CampaignResult:
    """What :func:`run_campaign` did: the campaign's trial records (those run now and
    those found), and how many it ran and skipped."""

    spec: CampaignSpec
    records: list[TrialRecord]
    ran: int
    skipped: int
    wall_s: float
    new: list[TrialRecord] = field(default_factory=list)

    def summary(self) -> list[dict[str, Any]]:
        """Per workload and ``ALGORITHM@EXECUTOR``: trials, how many reached the target,
        the best time, and the median over studies of each study's best (``None``:
        the median is a miss, as AlgoPerf counts it)."""
        rows: dict[tuple[str, str], list[TrialRecord]] = {}
        for record in self.records:
            rows.setdefault((record.workload, f"{record.algorithm}@{record.executor}"), [])
            rows[(record.workload, f"{record.algorithm}@{record.executor}")].append(record)
        out = []
        for (workload, label), records in rows.items():
            studies: dict[int, float] = {}
            for r in records:
                studies[r.study] = min(studies.get(r.study, math.inf), r.time)
            median = statistics.median(studies.values()) if studies else math.inf
            best = min(r.time for r in records)
            outcomes: dict[str, int] = {}
            for r in records:
                outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
            out.append({
                "workload": workload, "algorithm": label, "trials": len(records),
                "reached": sum(r.reached for r in records), "outcomes": outcomes,
                "best_s": best if math.isfinite(best) else None,
                "median_of_study_best_s": median if math.isfinite(median) else None,
            })  # fmt: skip
        return out

    def to_json(self) -> dict[str, Any]:
        """The ``data`` of ``d5 bench algorithms --json``."""
        spec = self.spec
        return {
            "campaign": spec.id,
            "suite": spec.suite.name,
            "suite_path": str(spec.suite.path),
            "suite_hash": spec.suite.hash,
            "ruleset": spec.ruleset,
            "studies": spec.studies,
            "trials": spec.trials,
            "seed": spec.seed,
            "timeout_factor": spec.timeout_factor,
            "algorithms": [a.spec for a in spec.algorithms],
            "workloads": [
                {
                    "name": w.name,
                    "recipe": str(w.recipe),
                    "target": w.target,
                    "budget_s": spec.budget_s(w),
                    "wall_limit_s": spec.wall_limit_s(w),
                }
                for w in spec.suite.workloads
            ],
            "ran": self.ran,
            "skipped": self.skipped,
            "wall_s": self.wall_s,
            "summary": self.summary(),
            "records": [{"run_id": r.run_id, **r.to_config()} for r in self.records],
        }


def _line(index: int, total: int, planned: PlannedTrial, record: TrialRecord) -> str:
    """The progress line of a trial that just ran."""
    what = (
        f"[{index}/{total}] {planned.workload.name} {planned.label} study {planned.study} "
        f"trial {planned.trial} (seed {planned.seed}): {record.outcome}"
    )
    if record.reached:
        what += f" in {record.time:.2f} s"
    elif record.message:
        what += f": {record.message}"
    return what + (f"; eval {record.eval_s:.2f} s" if record.eval_s else "")


@contextlib.contextmanager
def _recipes_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="d5-algorithms-") as tmp:
        yield Path(tmp)


def run_campaign(
    spec: CampaignSpec,
    db: str | Path | None = None,
    *,
    on_line: Callable[[str], None] | None = None,
) -> CampaignResult:
    """Run every trial of ``spec`` not yet recorded in ``db`` and record each as it ends.

    ``on_line`` gets one line per trial as it ends, and one before the first saying how
    many were found already recorded.

    :raises UsageError: for an unknown algorithm, a bad search space or a database that
        cannot be written, before any trial runs.
    """
    from d5core.environment import capture_environment
    from d5core.lv2.algorithms.trials import finished, load_trials, record_trial
    from d5core.results.paths import absolute_db
    from d5core.results.store import ResultsStore

    say = on_line or (lambda _line: None)
    started = time.perf_counter()
    trials = plan(spec)
    db_path = absolute_db(db)  # a URL reaches the trials unchanged
    tag = campaign_tag(spec.id)
    with ResultsStore.open(db_path) as store:
        store.require_writable()
        done = finished(store, spec.id)
    todo = [t for t in trials if t.key not in done]
    skipped = len(trials) - len(todo)
    say(
        f"campaign {spec.id}: {len(trials)} trials ({len(spec.suite.workloads)} workloads x "
        f"{len(spec.algorithms)} algorithms x {spec.studies} studies x {spec.trials} trials, "
        f"ruleset {spec.ruleset}); {skipped} already recorded, {len(todo)} to run"
    )
    environment = capture_environment(seeds=spec.seed)
    new: list[TrialRecord] = []
    with _recipes_dir() as folder:
        recipes: dict[str, Path] = {}
        for index, planned in enumerate(todo, start=1):
            name = planned.workload.name
            if name not in recipes:
                recipes[name] = workload_recipe(planned.workload, planned.budget_s, folder)
            record = run_trial(spec, planned, recipes[name], db_path)
            env = {
                **environment,
                "seeds": {"trial": planned.seed},
                "timestamp": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
            }
            with ResultsStore.open(db_path) as store:
                run_id = record_trial(store, record, environment=env, tags=[tag])
            new.append(replace(record, run_id=run_id))
            say(_line(index, len(todo), planned, record))
    with ResultsStore.open(db_path) as store:
        records = load_trials(store, campaign=spec.id)
    wanted = {t.key for t in trials}
    records = [r for r in records if r.key in wanted]
    return CampaignResult(spec, records, len(todo), skipped, time.perf_counter() - started, new)
