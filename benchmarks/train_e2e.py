"""Time to accuracy as a user measures it: ``d5 run`` beside the same training written by hand.

For each recipe with hand loops (``benchmarks/hand/_problems.py``: ``digits-mlp`` and the
CNN ``synthetic-cnn``) and each framework that trains, three sides run, each in a fresh
process, the way a user would start them:

- ``hand``: ``benchmarks/hand/<framework>_loop.py``, the training in the framework's own
  idiom (its layers, its optimizer, its loss), with the same data, initial weights, batch
  order and test passes as the recipe;
- ``d5 native``: ``d5 run recipes/<recipe>.toml --set executor=<framework> --set
  optimizer=<framework's momentum>`` (the framework's own optimizer, the native path);
- ``d5 reference``: the same with ``--set optimizer=momentum``, d5's numpy optimizer
  (gradients converted to numpy every step). The numpy executor has only this side.

Time to accuracy starts at the first touch of data, after the imports, and stops when the
first test pass that reaches the target has finished, on every side
(``docs/training.md``, "Where time to accuracy starts and ends"). Wall time is the whole
process, from its start to its exit, measured here.

Every side of every pair runs once per round, in an order shuffled per round, so slow
spells of the machine hit all sides alike. A round starts only once the 1-minute load
average is under the core count (waiting up to ``--max-wait`` seconds), and a round the
load rose to the core count or above during is measured again, up to ``--retries``
times; the report says how many rounds were measured again and whether every kept round
stayed under. Each d5 side's ratio is its time over the hand loop's in the same round;
the table gives the ratio of the medians, the lowest and highest per-round ratio, and the
95% confidence interval of the ratio of the medians (a paired percentile bootstrap over
rounds: a round's sides stay together, as they shared the machine's state). A target is
**met** when the whole interval is at or under it, **missed** when the whole interval is
over it, and **undecided** otherwise: the rounds do not tell, whatever the medians say.
``--until-decided N`` adds rounds, one at a time, until every target is decided or N
rounds are kept.
Equal work is checked on every run: the same number of steps and the same final test
accuracy (within one test example) as the hand loop.

    .venv/bin/python benchmarks/train_e2e.py [--recipes digits-mlp,synthetic-cnn]
        [--frameworks torch,tensorflow,mxnet,jax,numpy] [--rounds 5] [--until-decided N]
        [--max-wait 600] [--json]

MXNet runs from ``.venv-mxnet`` (``make mxnet``); a framework whose environment is
missing is reported as not run, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HAND = ROOT / "benchmarks" / "hand"
sys.path.insert(0, str(HAND))

from _problems import PROBLEMS  # noqa: E402

#: Each framework's environment (``shared``: ``--venv``; ``mxnet``: ``--mxnet-venv``) and
#: its native momentum optimizer (``None``: d5's reference optimizer is the framework's own).
FRAMEWORKS: dict[str, tuple[str, str | None]] = {
    "torch": ("shared", "torch-momentum"),
    "tensorflow": ("shared", "tf-momentum"),
    "mxnet": ("mxnet", "mx-momentum"),
    "jax": ("shared", "jax-momentum"),
    "numpy": ("shared", None),
}
#: The targets of the d5 sides' ratios to the hand loop.
TARGETS = {"d5 native": 1.05, "d5 reference": 1.10}
#: The targets apply to these frameworks (issue 30); the others' rows are shown for
#: completeness, with their verdict, and do not hold ``--until-decided`` open.
TARGETED = ("torch", "tensorflow", "mxnet")
#: Level and resamples of the bootstrap interval of each ratio of medians (seeded).
CONFIDENCE = 0.95
RESAMPLES = 4000
#: Seconds between two looks at the load average while waiting.
_POLL = 2.0
#: The environment variables that set the frameworks' thread counts: both sides of a
#: pair run with the same environment, and the report names those that are set.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "MXNET_CPU_WORKER_NTHREADS",
)


@dataclass(frozen=True)
class Side:
    """One way of training one recipe on one framework, run as one fresh process."""

    recipe: str
    framework: str
    name: str  # "hand", "d5 native" or "d5 reference"
    command: tuple[str, ...]

    @property
    def pair(self) -> tuple[str, str]:
        return (self.recipe, self.framework)


def _cores() -> int:
    return os.cpu_count() or 1


def _load1() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def sides_of(recipe: str, framework: str, db: Path, venvs: Mapping[str, Path]) -> list[Side]:
    """The hand loop and the d5 sides of ``recipe`` on ``framework``, run from the
    environment ``venvs`` gives for it."""
    env, native = FRAMEWORKS[framework]
    bin_dir = venvs[env] / "bin"
    hand = (str(bin_dir / "python"), str(HAND / f"{framework}_loop.py"), recipe)
    run = (str(bin_dir / "d5"), "run", str(ROOT / "recipes" / f"{recipe}.toml"),
           "--set", f"executor={framework}", "--db", str(db), "--json")  # fmt: skip
    out = [Side(recipe, framework, "hand", hand)]
    if native is not None:
        out.append(Side(recipe, framework, "d5 native", (*run, "--set", f"optimizer={native}")))
    out.append(Side(recipe, framework, "d5 reference", (*run, "--set", "optimizer=momentum")))
    return out


def missing(framework: str, venvs: Mapping[str, Path]) -> str | None:
    """Why ``framework`` cannot run here, or ``None``."""
    env = venvs[FRAMEWORKS[framework][0]]
    python = env / "bin" / "python"
    if not python.exists():
        return f"{env} has no bin/python (make {'mxnet' if framework == 'mxnet' else 'dev'})"
    module = {"torch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet", "numpy": "numpy",
              "jax": "jax"}  # fmt: skip
    done = subprocess.run([str(python), "-c", f"import {module[framework]}"],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        return f"{module[framework]} does not import in {env}"
    return None


def _json_tail(text: str) -> dict[str, Any]:
    """The last JSON document of ``text`` (a hand loop's line, or ``d5 run --json``)."""
    start = text.rfind("\n{")
    return dict(json.loads(text[start + 1 :] if start >= 0 else text))


def run_side(side: Side) -> dict[str, Any]:
    """Run ``side`` in a fresh process: its time to accuracy, wall time, steps, final test
    accuracy and (d5 sides) the parts of its time to accuracy."""
    load = _load1()
    started = time.perf_counter()
    done = subprocess.run(side.command, capture_output=True, text=True, timeout=1800,
                          cwd=ROOT)  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"{side.framework} {side.name} on {side.recipe} failed: {tail}")
    found = _json_tail(done.stdout)
    if side.name == "hand":
        return {"tta": found["time_to_accuracy"], "wall": wall, "steps": found["steps"],
                "accuracy": found["final_test_accuracy"], "load": load}  # fmt: skip
    run = found["data"]["runs"][0]
    metrics = run["metrics"]
    return {"tta": metrics["time_to_accuracy"], "wall": wall, "steps": run["steps"],
            "accuracy": metrics["final_test_accuracy"], "load": load,
            "parts": run.get("time_to_accuracy_parts", {})}  # fmt: skip


def wait_for_quiet(max_wait: float) -> float:
    """Sleep until the 1-minute load average is under the core count, for at most
    ``max_wait`` seconds; returns the seconds waited."""
    start = time.monotonic()
    while _load1() >= _cores() and time.monotonic() - start < max_wait:
        time.sleep(_POLL)
    return time.monotonic() - start


def measure(
    sides: Sequence[Side],
    rounds: int,
    retries: int,
    max_wait: float,
    rng: random.Random,
    more: Callable[[list[dict[tuple[str, str, str], dict[str, Any]]]], bool] | None = None,
) -> dict[str, Any]:
    """Every side once per round, shuffled; a round the load reached the core count
    during is measured again (up to ``retries`` times in all). Past ``rounds``, rounds go
    on while ``more(kept)`` says so."""
    kept: list[dict[tuple[str, str, str], dict[str, Any]]] = []
    repeated = waited = 0.0
    loads: list[float] = []
    while len(kept) < rounds or (more is not None and more(kept)):
        waited += wait_for_quiet(max_wait)
        order = list(sides)
        rng.shuffle(order)
        one: dict[tuple[str, str, str], dict[str, Any]] = {}
        highest = _load1()
        for side in order:
            one[(side.recipe, side.framework, side.name)] = run_side(side)
            highest = max(highest, _load1())
        if highest >= _cores() and repeated < retries:
            repeated += 1
            print(f"round {len(kept) + 1}: the load reached {highest:.2f} on {_cores()} cores; "
                  "measuring it again", file=sys.stderr)  # fmt: skip
            continue
        loads.append(highest)
        kept.append(one)
        print(f"round {len(kept)}/{max(rounds, len(kept))} done (highest load {highest:.2f})",
              file=sys.stderr)  # fmt: skip
    return {"rounds": kept, "repeated": int(repeated), "waited_s": waited, "loads": loads}


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def paired_ratio_ci(
    d5: Sequence[float], hand: Sequence[float], *, seed: int = 0
) -> tuple[float, float]:
    """The :data:`CONFIDENCE` interval of median(d5) / median(hand): a percentile
    bootstrap that draws whole rounds (both sides of a round together); the one ratio
    for a single round."""
    n = len(d5)
    if n < 2:
        ratio = d5[0] / hand[0]
        return ratio, ratio
    rng = random.Random(seed)
    ratios = []
    for _ in range(RESAMPLES):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(_median([d5[i] for i in picks]) / _median([hand[i] for i in picks]))
    ratios.sort()
    tail = (1.0 - CONFIDENCE) / 2.0
    low = ratios[int(tail * (RESAMPLES - 1))]
    high = ratios[round((1.0 - tail) * (RESAMPLES - 1))]
    return low, high


def verdict(low: float, high: float, target: float) -> str:
    """``met`` when the interval is at or under ``target``, ``missed`` when it is over
    it, ``undecided`` when it holds it."""
    if high <= target:
        return "met"
    if low > target:
        return "missed"
    return "undecided"


def summarize(sides: Sequence[Side], measured: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per side: median time to accuracy and wall time over the kept rounds,
    and for d5 sides the ratios to the hand loop of the same round, with equal work."""
    rounds = measured["rounds"]
    rows = []
    for side in sides:
        key = (side.recipe, side.framework, side.name)
        runs = [r[key] for r in rounds]
        hand = [r[(side.recipe, side.framework, "hand")] for r in rounds]
        row: dict[str, Any] = {
            "recipe": side.recipe, "framework": side.framework, "side": side.name,
            "tta_s": _median([r["tta"] for r in runs]),
            "wall_s": _median([r["wall"] for r in runs]),
            "steps": sorted({r["steps"] for r in runs}),
            "accuracy": sorted({round(r["accuracy"], 6) for r in runs}),
        }  # fmt: skip
        if side.name != "hand":
            tta = [r["tta"] / h["tta"] for r, h in zip(runs, hand, strict=True)]
            wall = [r["wall"] / h["wall"] for r, h in zip(runs, hand, strict=True)]
            test_size = _test_size(side.recipe)
            low, high = paired_ratio_ci([r["tta"] for r in runs], [h["tta"] for h in hand])
            row["tta_ratio"] = {
                "ratio": row["tta_s"] / _median([h["tta"] for h in hand]),
                "min": min(tta), "max": max(tta), "ci_low": low, "ci_high": high,
            }  # fmt: skip
            row["wall_ratio"] = {
                "ratio": row["wall_s"] / _median([h["wall"] for h in hand]),
                "min": min(wall), "max": max(wall),
            }  # fmt: skip
            row["target"] = TARGETS[side.name]
            row["targeted"] = side.framework in TARGETED
            row["verdict"] = verdict(low, high, row["target"])
            row["equal_work"] = all(
                r["steps"] == h["steps"] and abs(r["accuracy"] - h["accuracy"]) <= 1 / test_size
                for r, h in zip(runs, hand, strict=True)
            )
            row["parts"] = {
                name: _median([r["parts"].get(name, 0.0) for r in runs])
                for name in runs[0].get("parts", {})
            }
        rows.append(row)
    return rows


def _test_size(recipe: str) -> int:
    problem = PROBLEMS[recipe]
    return 360 if problem.model == "mlp" else int(problem.options["samples"])


def _ratio(cell: Mapping[str, float]) -> str:
    return f"{cell['ratio']:.2f} [{cell['min']:.2f}, {cell['max']:.2f}]"


def _undecided(sides: Sequence[Side]) -> Callable[[list[Any]], bool]:
    """For ``--until-decided``: whether a targeted row's verdict is still open."""

    def more(kept: list[Any]) -> bool:
        rows = summarize(sides, {"rounds": kept})
        return any(r.get("targeted") and r["verdict"] == "undecided" for r in rows)

    return more


def table(report: Mapping[str, Any]) -> list[str]:
    """The report as Markdown: the machine, the rounds and load, then one table."""
    under = all(v < report["cores"] for v in report["loads"])
    threads = ", ".join(f"{k}={v}" for k, v in report["threads"].items()) or "none set"
    lines = [
        f"machine: {report['machine']}; thread variables: {threads}",
        f"{report['rounds']} rounds kept, each side a fresh process per round, shuffled; "
        f"{report['repeated']} round(s) measured again because the load reached the core "
        f"count; highest load per kept round: "
        + ", ".join(f"{v:.2f}" for v in report["loads"])
        + (
            " (all under the core count)"
            if under
            else " (NOT all under the core count: figures less trustworthy)"
        ),
        "time to accuracy (TTA) and wall time: medians over rounds, seconds; ratios: d5 over "
        "the hand loop, ratio of the medians [lowest, highest per-round ratio]; TTA "
        f"{CONFIDENCE:.0%} CI: paired bootstrap over rounds; target: met when the whole "
        "interval is at or under it, missed when over it, else undecided",
        "",
        "| recipe | framework | side | TTA s | TTA ratio | TTA ratio CI | target | wall s "
        "| wall ratio | steps | final accuracy | equal work | TTA parts (setup / steps / "
        "tests / recording / loop, s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        steps = "/".join(str(s) for s in row["steps"])
        acc = "/".join(f"{a:.4f}" for a in row["accuracy"])
        if row["side"] == "hand":
            lines.append(
                f"| {row['recipe']} | {row['framework']} | hand | {row['tta_s']:.3f} | | | "
                f"| {row['wall_s']:.2f} | | {steps} | {acc} | | |"
            )
            continue
        met = row["verdict"] if row["verdict"] != "missed" else "MISSED"
        if not row["targeted"]:
            met += " (not a target)"
        ci = f"{row['tta_ratio']['ci_low']:.2f}–{row['tta_ratio']['ci_high']:.2f}"
        parts = " / ".join(f"{v:.3f}" for v in row["parts"].values())
        lines.append(
            f"| {row['recipe']} | {row['framework']} | {row['side']} | {row['tta_s']:.3f} "
            f"| {_ratio(row['tta_ratio'])} | {ci} | {row['target']:.2f} {met} "
            f"| {row['wall_s']:.2f} "
            f"| {_ratio(row['wall_ratio'])} | {steps} | {acc} "
            f"| {'yes' if row['equal_work'] else 'NO'} | {parts} |"
        )
    for framework, why in report["not_run"].items():
        lines.append(f"\nnot run: {framework}: {why}")
    return lines


def _machine() -> str:
    import platform

    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {_cores()} cores, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipes", default=",".join(PROBLEMS))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--until-decided", type=int, default=0, metavar="N",
                        help="after --rounds, add rounds until every targeted ratio's "
                        "interval decides its target, up to N rounds in all")  # fmt: skip
    parser.add_argument("--retries", type=int, default=5,
                        help="rounds measured again at most, when the load rose")  # fmt: skip
    parser.add_argument("--max-wait", type=float, default=600.0,
                        help="seconds to wait for a quiet machine before each round")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the sides")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv",
                        help="the environment of torch, tensorflow and numpy")  # fmt: skip
    parser.add_argument("--mxnet-venv", type=Path, default=ROOT / ".venv-mxnet",
                        help="MXNet's environment")  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    recipes = [r for r in args.recipes.split(",") if r]
    frameworks = [f for f in args.frameworks.split(",") if f]
    for name in recipes:
        if name not in PROBLEMS:
            parser.error(f"--recipes: no hand loops for {name!r}; known: {', '.join(PROBLEMS)}")
    for name in frameworks:
        if name not in FRAMEWORKS:
            parser.error(f"--frameworks: unknown {name!r}; known: {', '.join(FRAMEWORKS)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.until_decided and args.until_decided < args.rounds:
        parser.error("--until-decided N must be at least --rounds (it counts every round)")
    if args.retries < 0 or args.max_wait < 0:
        parser.error("--retries and --max-wait must not be negative")
    venvs = {"shared": args.venv.absolute(), "mxnet": args.mxnet_venv.absolute()}
    not_run = {f: why for f in frameworks if (why := missing(f, venvs)) is not None}
    with tempfile.TemporaryDirectory(prefix="d5-e2e-") as tmp:
        sides = [
            side
            for recipe in recipes
            for framework in frameworks
            if framework not in not_run
            for side in sides_of(recipe, framework, Path(tmp) / f"{framework}.db", venvs)
        ]
        more = None
        if args.until_decided:
            undecided = _undecided(sides)
            cap = args.until_decided

            def more(kept: list[Any]) -> bool:
                return len(kept) < cap and undecided(kept)

        measured = measure(sides, args.rounds, args.retries, args.max_wait,
                           random.Random(args.seed), more)  # fmt: skip
    report = {
        "machine": _machine(),
        "cores": _cores(),
        "threads": {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ},
        "rounds": len(measured["rounds"]),
        "repeated": measured["repeated"],
        "waited_s": measured["waited_s"],
        "loads": measured["loads"],
        "rows": summarize(sides, measured),
        "not_run": not_run,
        "raw": [{" / ".join(k): v for k, v in r.items()} for r in measured["rounds"]],
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(table(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
