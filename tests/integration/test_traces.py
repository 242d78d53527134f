"""Traced runs end to end through the installed ``d5`` (docs/traces.md): ``--trace LEVEL``
on ``d5 bench``, ``d5 validate`` and ``d5 run``, and ``d5 trace RUN`` exporting the
timeline (``-o``) or summing it up (``--top``, ``--json``).

Every exported trace is checked against the trace event format: each event conforms,
metadata events name every process and thread track, a framework profiler's events lie in
the part of the timeline where d5 traced that framework's executor (and inside its
steps), and the run's config says it was traced. Bad input ends in one line and exit 2.

Each run is made once per module in a temporary store and kept as small as d5 allows
(one worker process, six to ten samples, a short time budget).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from json_schema_doc import check

from d5core import __version__
from d5core.cli.output import SCHEMA_VERSIONS, schema_name
from d5core.trace.document import D5_CATEGORY, TRACE_FORMAT, check_events, step_events

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "digits-mlp.toml"
#: The smallest measurement d5 bench accepts: the traced pass runs after it anyway.
QUICK = ("--processes", "1", "--min-samples", "6", "--max-samples", "10",
         "--time-budget", "0.05", "--warmup", "1")  # fmt: skip
#: Each framework's profiler, by the name its events carry as category.
PROFILERS = {"torch": "torch.profiler", "onnxruntime": "onnxruntime",
             "tensorflow": "tensorflow.profiler"}  # fmt: skip

# -- running d5 --------------------------------------------------------------------------


def d5(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed ``d5`` in a subprocess, as a user runs it (no calibration first)."""
    env = {**os.environ, "D5_NOISE_FLOOR": "0.03"}
    return subprocess.run(
        [str(Path(sys.executable).with_name("d5")), *args],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO,
    )  # fmt: skip


def succeeded(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"{' '.join(done.args)}:\n{done.stdout}\n{done.stderr}"
    return done


def envelope(done: subprocess.CompletedProcess[str], command: str) -> Any:
    """The ``data`` of a ``--json`` output, after checking its envelope."""
    document = json.loads(succeeded(done).stdout)
    assert document["schema"] == schema_name(command)
    assert document["d5"] == __version__
    return document["data"]


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a command refused as bad input (exit 2, no traceback)."""
    assert done.returncode == 2, f"{done.args}: exit {done.returncode}\n{done.stderr}"
    assert "Traceback" not in done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if line.strip()]
    said = [line for line in said if not line.startswith("d5: warning")]
    assert len(said) == 1 and said[0].startswith("d5: error: "), done.stderr
    return said[0]


def run_id(data: Any) -> str:
    """The run id a ``--json`` output of d5 bench, validate or run names."""
    if isinstance(data, list):
        (found,) = {row["run_id"] for row in data}
        return str(found)
    if "runs" in data:
        return str(data["runs"][0]["run_id"])
    return str(data["run_id"])


def config_of(db: Path, run: str) -> dict[str, Any]:
    data = envelope(d5("results", "show", run, "--db", str(db), "--json"), "results show")
    return dict(data["run"]["config"])


def export(db: Path, run: str, to: Path) -> dict[str, Any]:
    """``d5 trace RUN -o FILE``, read back."""
    succeeded(d5("trace", run, "--db", str(db), "-o", str(to)))
    document: dict[str, Any] = json.loads(to.read_text())
    return document


#: Runs a traced command once per module: its store and run id.
Traced = Callable[..., tuple[Path, str]]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """Run a d5 command with ``--db`` and ``--json`` in a store of its own; the store and
    the run's id. Each distinct command runs once per module."""
    made: dict[tuple[str, ...], tuple[Path, str]] = {}

    def run(*args: str, command: str) -> tuple[Path, str]:
        if args not in made:
            db = tmp_path_factory.mktemp("traced") / "results.sqlite"
            made[args] = (db, run_id(envelope(d5(*args, "--db", str(db), "--json"), command)))
        return made[args]

    return run


# -- reading a trace ----------------------------------------------------------------------


def unnamed_tracks(document: dict[str, Any], pids: Sequence[int] | None = None) -> list[str]:
    """The process and thread tracks (of ``pids``, or all) that no metadata event names."""
    events = document["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    processes = {e["pid"] for e in meta if e["name"] == "process_name" and e["args"].get("name")}
    threads = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name"}
    missing = []
    for event in events:
        if event.get("ph") == "M" or (pids is not None and event["pid"] not in pids):
            continue
        if event["pid"] not in processes:
            missing.append(f"process {event['pid']}")
        if (
            "tid" in event
            and event.get("ph") != "C"
            and (event["pid"], event["tid"]) not in threads
        ):
            missing.append(f"thread {event['pid']}/{event['tid']}")
    return sorted(set(missing))


def badly_nested(events: Sequence[dict[str, Any]]) -> int:
    """How many complete events on one thread overlap another without nesting in it."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    bad = 0
    for thread in by_thread.values():
        ends: list[float] = []
        for e in sorted(thread, key=lambda e: (e["ts"], -e["dur"])):
            while ends and ends[-1] <= e["ts"]:
                ends.pop()
            if ends and e["ts"] + e["dur"] > ends[-1] + 1.0:  # 1 µs of rounding
                bad += 1
            ends.append(e["ts"] + e["dur"])
    return bad


def parts_by_subject(document: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each traced executor's part of the timeline: from the start of its first d5 span
    (``prepare``) to the end of its last step."""
    parts: dict[str, tuple[float, float]] = {}
    for e in document["traceEvents"]:
        subject = (e.get("args") or {}).get("subject")
        if e.get("cat") == D5_CATEGORY and e.get("ph") == "X" and subject:
            low, high = parts.get(subject, (float("inf"), float("-inf")))
            parts[subject] = (min(low, e["ts"]), max(high, e["ts"] + e["dur"]))
    return parts


def check_framework_trace(document: dict[str, Any], executors: Sequence[str]) -> None:
    """What every traced ``d5 bench net --trace framework`` holds: conforming events,
    every track named, and each framework's profiler events in its executor's part of the
    timeline (after the previous executor's, before the next one's), within its steps."""
    events = document["traceEvents"]
    assert check_events(events) == []
    assert unnamed_tracks(document) == []
    other = document["otherData"]
    assert other["format"] == TRACE_FORMAT and other["level"] == "framework"
    assert other["notes"] == [], other["notes"]
    assert sorted(other["profilers"]) == sorted(PROFILERS[e] for e in executors)
    parts = parts_by_subject(document)
    assert list(parts) == list(executors)  # traced one after the other, in the order given
    bounds = [parts[e] for e in executors]
    for index, executor in enumerate(executors):
        after = bounds[index - 1][1] if index else float("-inf")
        before = bounds[index + 1][0] if index + 1 < len(bounds) else float("inf")
        mine = [e for e in events if e.get("cat") == PROFILERS[executor] and e["ph"] == "X"]
        assert mine, f"no events of {PROFILERS[executor]}"
        for event in mine:
            assert after <= event["ts"] and event["ts"] + event["dur"] <= before, (executor, event)
        steps = step_events(document, executor)
        assert len(steps) == 10
        for step in steps:  # the profiler saw every step
            assert any(
                step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"]
                for e in mine
            ), (executor, step)


# -- d5 bench net --trace framework --------------------------------------------------------

THREE = ("bench", "net", "lenet5", "--executors", "torch,onnxruntime,tensorflow",
         "--trace", "framework", *QUICK)  # fmt: skip
TWO = ("bench", "net", "lenet5", "--executors", "torch,onnxruntime", "--trace", "framework",
       *QUICK)  # fmt: skip


def test_a_bench_of_three_frameworks_traces_each_with_its_profiler(
    traced: Traced, tmp_path: Path
) -> None:
    db, run = traced(*THREE, command="bench net")
    assert config_of(db, run)["trace"] == "framework"  # its timed workers ran untraced
    check_framework_trace(export(db, run, tmp_path / "three.json"), ["torch", "onnxruntime",
                                                                     "tensorflow"])  # fmt: skip


def test_a_bench_of_two_frameworks_traces_each_with_its_profiler(
    traced: Traced, tmp_path: Path
) -> None:
    db, run = traced(*TWO, command="bench net")
    assert config_of(db, run)["trace"] == "framework"
    check_framework_trace(export(db, run, tmp_path / "two.json"), ["torch", "onnxruntime"])


def test_top_lists_each_executors_operators_with_shares_of_its_steps(traced: Traced) -> None:
    db, run = traced(*TWO, command="bench net")
    data = envelope(d5("trace", run, "--db", str(db), "--top", "1000", "--json"), "trace")
    assert [t["subject"] for t in data["top"]] == ["torch", "onnxruntime"]
    for top in data["top"]:
        assert top["steps"] == 10 and top["rows"], top
        assert {r["source"] for r in top["rows"]} >= {PROFILERS[top["subject"]]}
        selfs = [r["self_s"] for r in top["rows"]]
        assert selfs == sorted(selfs, reverse=True)
        for row in top["rows"]:
            assert 0.0 <= row["share"] <= 1.0
            assert row["per_step_s"] * top["steps"] == pytest.approx(row["self_s"])
        on_thread = sum(r["share"] for r in top["rows"] if r["on_step_thread"])
        assert on_thread == pytest.approx(top["operators_on_step_thread_s"] / top["step_total_s"])
        outside = top["outside_operators_s"] / top["step_total_s"]
        assert on_thread + outside == pytest.approx(1.0)
        assert outside < 0.5  # the profiler's operators hold most of a step
        assert top["measured_step_s"] and top["measured_step_s"] > 0


def test_top_prints_a_table_per_executor_with_its_caption(traced: Traced) -> None:
    db, run = traced(*TWO, command="bench net")
    out = succeeded(d5("trace", run, "--db", str(db), "--top", "3")).stdout
    assert f"run {run}: trace at level framework" in out
    assert "top 3 operators of torch: 10 traced steps" in out
    assert "top 3 operators of onnxruntime: 10 traced steps" in out
    assert out.count("in no operator (d5, Python)") == 2
    assert out.count("operators on the step's thread") == 2
    table = out[out.index("top 3 operators of torch") : out.index("top 3 operators of onnxruntime")]
    rows = [line for line in table.splitlines() if "torch.profiler" in line]
    assert len(rows) == 3
    shares = [float(line.rsplit("│", 2)[-2].strip().rstrip("%")) for line in rows]
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 100.0


def test_the_json_of_d5_trace_is_its_documented_schema(traced: Traced, tmp_path: Path) -> None:
    assert SCHEMA_VERSIONS["trace"] == 1 and schema_name("trace") == "d5.trace/1"
    db, run = traced(*TWO, command="bench net")
    bare = envelope(d5("trace", run, "--db", str(db), "--json"), "trace")
    check("trace", bare)
    assert bare["run_id"] == run and bare["output"] is None and bare["top"] == []
    assert bare["level"] == "framework" and bare["notes"] == []
    assert sorted(bare["profilers"]) == ["onnxruntime", "torch.profiler"]
    to = tmp_path / "out" / "trace.json"
    written = envelope(
        d5("trace", run, "--db", str(db), "-o", str(to), "--top", "2", "--json"), "trace"
    )
    check("trace", written)
    assert written["output"] == str(to)
    assert written["events"] == bare["events"] == len(json.loads(to.read_text())["traceEvents"])
    assert [len(t["rows"]) for t in written["top"]] == [2, 2]


def test_subject_keeps_one_executors_steps(traced: Traced) -> None:
    db, run = traced(*TWO, command="bench net")
    data = envelope(
        d5("trace", run, "--db", str(db), "--top", "5", "--subject", "onnxruntime", "--json"),
        "trace",
    )
    assert [t["subject"] for t in data["top"]] == ["onnxruntime"]
    assert {r["source"] for r in data["top"][0]["rows"]} == {"onnxruntime"}


# -- d5 run --ranks 2 --trace step ---------------------------------------------------------


def test_two_ranks_share_one_timeline(
    d5_ranks: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    db = tmp_path / "results.sqlite"
    done = d5_ranks("run", str(RECIPE), "--ranks", "2", "--trace", "step", "--db", str(db),
                    "--json", env={"D5_NOISE_FLOOR": "0.03"}, timeout=300)  # fmt: skip
    run = run_id(envelope(done, "run"))
    assert config_of(db, run)["trace"] == "step"
    document = export(db, run, tmp_path / "ranks.json")
    events = document["traceEvents"]
    assert check_events(events) == [] and unnamed_tracks(document) == []
    assert document["otherData"]["ranks"] == [0, 1]
    assert document["otherData"]["level"] == "step"
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(names) == 2
    assert sorted(name.split(" (")[0] for name in names.values()) == ["rank 0", "rank 1"]
    steps = {pid: [e for e in events if e["pid"] == pid and e["name"] == "train.step"]
             for pid in names}  # fmt: skip
    assert all(steps.values()) and len({len(s) for s in steps.values()}) == 1
    # one time base: the ranks trained side by side, so their steps overlap in time
    (first, second) = steps.values()
    assert first[0]["ts"] < second[-1]["ts"] + second[-1]["dur"]
    assert second[0]["ts"] < first[-1]["ts"] + first[-1]["dur"]


# -- the other commands ----------------------------------------------------------------------


def test_a_traced_validation_keeps_each_executors_calls_as_steps(
    traced: Traced, tmp_path: Path
) -> None:
    db, run = traced("validate", "net", "lenet5", "--executor", "torch", "--trace", "step",
                     command="validate net")  # fmt: skip
    assert config_of(db, run)["trace"] == "step"
    document = export(db, run, tmp_path / "validate.json")
    assert check_events(document["traceEvents"]) == [] and unnamed_tracks(document) == []
    calls = step_events(document)
    assert {e["name"] for e in calls} == {"validate.call"}
    assert step_events(document, "torch")
    assert document["otherData"]["kind"] == "validate"


def test_a_traced_scenario_at_full_keeps_loadgens_track(traced: Traced, tmp_path: Path) -> None:
    db, run = traced("bench", "net", "lenet5", "--executors", "onnxruntime", "--scenario",
                     "single-stream", "--min-duration", "1", "--min-query-count", "50",
                     "--trace", "full", command="bench net scenario")  # fmt: skip
    document = export(db, run, tmp_path / "scenario.json")
    events = document["traceEvents"]
    assert check_events(events) == []
    tracks = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    (loadgen,) = [pid for pid, name in tracks.items() if name.startswith("LoadGen")]
    assert "onnxruntime" in tracks[loadgen]
    queries = [e for e in events if e["pid"] == loadgen and e["name"] == "IssueQuery"]
    assert len(queries) >= 50
    assert all(e["cat"] == "loadgen" for e in events if e["pid"] == loadgen and e["ph"] != "M")
    # the performance run came first, the traced steps after it, on one time base
    d5_spans = [e for e in events if e.get("cat") == D5_CATEGORY and e["ph"] == "X"]
    assert max(e["ts"] for e in queries) < min(e["ts"] for e in d5_spans)
    assert len(step_events(document, "onnxruntime")) == 10
    assert any(e["ph"] == "C" for e in events)
    assert any("LoadGen" in note for note in document["otherData"]["notes"])


def test_loadgens_track_nests_and_names_its_threads(traced: Traced, tmp_path: Path) -> None:
    db, run = traced("bench", "net", "lenet5", "--executors", "onnxruntime", "--scenario",
                     "single-stream", "--min-duration", "1", "--min-query-count", "50",
                     "--trace", "full", command="bench net scenario")  # fmt: skip
    document = export(db, run, tmp_path / "scenario.json")
    assert unnamed_tracks(document) == []
    assert badly_nested(document["traceEvents"]) == 0


def test_a_traced_operator_at_full_has_counter_events(traced: Traced, tmp_path: Path) -> None:
    db, run = traced("bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                     "--trace", "full", *QUICK, command="bench op")  # fmt: skip
    assert config_of(db, run)["trace"] == "full"
    document = export(db, run, tmp_path / "op.json")
    events = document["traceEvents"]
    assert check_events(events) == [] and unnamed_tracks(document) == []
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"cpu time (ms)", "page faults", "context switches"}
    assert all(isinstance(v, (int, float)) for e in counters for v in e["args"].values())
    steps = step_events(document, "numpy")
    assert len(steps) == 10
    # the counters bracket every traced step
    stamps = {e["ts"] for e in counters}
    assert all(s["ts"] in stamps for s in steps)


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64"),
        ("bench", "net", "lenet5", "--executors", "numpy"),
        ("bench", "net", "lenet5", "--executors", "onnxruntime", "--scenario", "single-stream"),
        ("validate", "op", "Gemm", "--backend", "numpy"),
        ("validate", "net", "lenet5", "--executor", "torch"),
        ("run", str(RECIPE)),
        ("run", str(RECIPE), "--ranks", "2"),
    ],
    ids=lambda c: " ".join(c[:2]) + (" " + c[-1] if c[-1].startswith(("single", "2")) else ""),
)
def test_an_unknown_trace_level_stops_the_command_in_one_line(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    db = tmp_path / "results.sqlite"
    line = one_line_error(d5(*command, "--trace", "bogus", "--db", str(db), timeout=120))
    assert "unknown trace level 'bogus'" in line and "step, framework, full" in line
    assert (
        not db.exists() or "run_id" not in d5("results", "list", "--db", str(db), "--json").stdout
    )


def test_tracing_a_run_that_kept_no_trace_is_refused(traced: Traced) -> None:
    db, run = traced("bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                     *QUICK, command="bench op")  # fmt: skip
    line = one_line_error(d5("trace", run, "--db", str(db), "--top", "5"))
    assert f"run {run} has no trace" in line and "--trace" in line


def test_an_existing_output_file_is_never_replaced(traced: Traced, tmp_path: Path) -> None:
    db, run = traced("bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                     "--trace", "full", *QUICK, command="bench op")  # fmt: skip
    existing = tmp_path / "mine.json"
    existing.write_text("my own notes")
    line = one_line_error(d5("trace", run, "--db", str(db), "-o", str(existing)))
    assert str(existing) in line and "exists" in line
    assert existing.read_text() == "my own notes"


@pytest.mark.parametrize("top", [(), ("--top", "3")])
def test_a_subject_that_was_not_traced_is_refused_naming_those_that_were(
    traced: Traced, top: tuple[str, ...]
) -> None:
    db, run = traced("bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                     "--trace", "full", *QUICK, command="bench op")  # fmt: skip
    line = one_line_error(d5("trace", run, "--db", str(db), *top, "--subject", "torch"))
    assert "'torch'" in line and "numpy" in line
