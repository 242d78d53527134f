"""Traced runs in ``d5 report``, opened in a real browser: each traced run's step
timeline is in the page as a painted SVG figure, and its merged trace file is written
beside the page and linked from it, with how to open it (Perfetto, chrome://tracing).

Two traced runs in one temporary store: a real ``d5 bench net --trace step`` with the
numpy executor, and a two-rank run whose trace artifacts are stored by hand (d5's
spans and a profiler's operator events on two processes).

Chromium is found as ``chromium``, ``chromium-browser`` or ``google-chrome``. Without
it the browser checks are skipped with the way to install it, except under CI
(``CI=true``), where a missing browser fails them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.results.store import ResultsStore
from d5core.trace.document import artifact_name, new_document, read_document

#: How long one browser call may take (a cold start on a loaded CI machine is slow).
BROWSER_TIMEOUT_S = 120
#: The colours of d5's spans and of the profiler's events in a timeline (the palette's
#: first two: d5 first, then each profiler's category in name order).
D5_BLUE = (0x00, 0x72, 0xB2)
PROFILER_ORANGE = (0xE6, 0x9F, 0x00)


def d5(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed ``d5`` command, in a subprocess, as a user runs it."""
    env = {**os.environ, "D5_NOISE_FLOOR": "0.03"}  # no calibration run first
    done = subprocess.run(
        [str(Path(sys.executable).with_name("d5")), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, f"d5 {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def rank_trace(rank: int, pid: int) -> dict[str, Any]:
    """One rank's trace document: six steps of ``torch`` on the main thread, each with
    nested operator events, and an operator on a worker thread."""
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"rank {rank} (pid {pid})"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "main"}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "intra-op"}},
    ]  # fmt: skip
    t = 1e9
    for step, dur in enumerate([9000.0, 8000.0, 12000.0, 10000.0, 11000.0, 30000.0]):
        events += [
            {"name": "train.step", "cat": "d5", "ph": "X", "ts": t, "dur": dur, "pid": pid,
             "tid": 1, "args": {"subject": "torch", "step": step}},
            {"name": "aten::linear", "cat": "torch.profiler", "ph": "X", "ts": t + 500,
             "dur": dur * 0.6, "pid": pid, "tid": 1},
            {"name": "aten::addmm", "cat": "torch.profiler", "ph": "X", "ts": t + 800,
             "dur": dur * 0.5, "pid": pid, "tid": 1},
            {"name": "aten::mm", "cat": "torch.profiler", "ph": "X", "ts": t + 900,
             "dur": dur * 0.4, "pid": pid, "tid": 2},
        ]  # fmt: skip
        t += dur + 1000.0
    return new_document(events, rank=rank, profilers=["torch.profiler"], notes=[])


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The page of a report of two traced runs and an untraced one, what ``d5 report
    --json`` said of it, the traced runs' ids and a second page with the traces'
    figures only (for the screenshot)."""
    work = tmp_path_factory.mktemp("trace-report")
    db = str(work / "results.sqlite")
    budget = ["--processes", "1", "--time-budget", "0.02", "--min-samples", "6"]
    budget += ["--max-samples", "40", "--warmup", "1", "--db", db]
    d5("bench", "net", "mlp", "--executors", "numpy", "--batch", "2", *budget,
       "--trace", "step", cwd=work)  # fmt: skip
    d5("bench", "net", "mlp", "--executors", "numpy", "--batch", "2", *budget, cwd=work)
    with ResultsStore.open(db) as store:
        bench_id = next(r.id for r in store.list_runs() if r.config.get("trace") == "step")
        ranks_id = store.record_measurement_run(
            "two ranks", {"latency": [0.1, 0.2]}, environment={"cpu": {"model": "Test CPU"}}
        )
        for rank, pid in ((0, 4100), (1, 4200)):
            data = json.dumps(rank_trace(rank, pid)).encode()
            store.add_artifact(ranks_id, artifact_name(rank), data)
    page = work / "report.html"
    done = d5("report", "--last", "10", "--db", db, "-o", str(page), "--json", cwd=work)
    envelope = json.loads(done.stdout)
    traces_only = work / "traces-only.html"
    d5("report", "--last", "10", "--db", db, "-o", str(traces_only),
       "--figure", "trace-timeline", "--formats", "none", cwd=work)  # fmt: skip
    return {
        "page": page,
        "data": envelope.get("data", envelope),
        "traced": {"bench": bench_id, "ranks": ranks_id},
        "traces_only": traces_only,
    }


class _Dom(HTMLParser):
    """The figures of a rendered DOM (each figure's key, the elements inside it and its
    links) and every link of the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: dict[str, list[str]] = {}
        self.figure_links: dict[str, list[str]] = {}
        self.links: list[str] = []
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        key = found.get("data-key") if tag == "figure" else None
        if key is not None:
            self.figures[key] = []
            self.figure_links[key] = []
        for _, open_key in self._open:
            if open_key is not None:
                self.figures[open_key].append(tag)
                if tag == "a" and found.get("href"):
                    self.figure_links[open_key].append(str(found["href"]))
        if tag == "a" and found.get("href"):
            self.links.append(str(found["href"]))
        if tag not in _VOID:
            self._open.append((tag, key))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                return


_VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source"})


def browse(
    chromium: str, page: Path, *args: str, profile: Path
) -> subprocess.CompletedProcess[str]:
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
        page.resolve().as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S)


def trace_figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in data["figures"] if str(f["key"]).startswith("trace-timeline-")]


def test_each_traced_run_gets_a_timeline_and_its_merged_trace_beside_the_page(
    report: dict[str, Any],
) -> None:
    data, page, traced = report["data"], report["page"], report["traced"]
    assert data["problems"] == [], data["problems"]
    figures = trace_figures(data)
    assert {f["section"] for f in figures} == {"traces"}
    for run_id in traced.values():
        assert sum(run_id in f["key"] for f in figures) == 1, (run_id, figures)
    folder = page.parent / "traces"
    bench = read_document((folder / f"{traced['bench']}.trace.json").read_bytes())
    assert bench["otherData"]["run_id"] == traced["bench"]
    assert any(e.get("name") == "bench.step" for e in bench["traceEvents"])
    merged = read_document((folder / f"{traced['ranks']}.trace.json").read_bytes())
    assert {e["pid"] for e in merged["traceEvents"]} == {4100, 4200}
    assert merged["otherData"]["ranks"] == [0, 1]
    # The untraced run has no trace file.
    assert len(list(folder.iterdir())) == len(traced)


def test_the_timelines_render_in_chromium_and_link_their_trace_files(
    chromium: str, report: dict[str, Any], tmp_path: Path
) -> None:
    data, page, traced = report["data"], report["page"], report["traced"]
    dumped = browse(chromium, page, "--dump-dom", profile=tmp_path / "profile-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    figures = {str(f["key"]) for f in trace_figures(data)}
    assert figures and figures <= set(dom.figures)
    for key in figures:
        inside = dom.figures[key]
        assert inside.count("svg") == 1, (key, inside[:20])
        assert {"path", "text"} <= set(inside), key
        run_id = next(r for r in traced.values() if r in key)
        assert dom.figure_links[key].count(f"traces/{run_id}.trace.json") == 1, key
    for run_id in traced.values():
        href = f"traces/{run_id}.trace.json"
        assert dom.links.count(href) == 2  # the list under the runs, and its figure
        assert (page.parent / href).is_file()
    assert "Perfetto" in dumped.stdout and "chrome://tracing" in dumped.stdout


def test_the_timelines_are_painted(chromium: str, report: dict[str, Any], tmp_path: Path) -> None:
    shot = tmp_path / "traces.png"
    taken = browse(
        chromium, report["traces_only"], f"--screenshot={shot}", "--window-size=1200,3000",
        profile=tmp_path / "profile-shot",
    )  # fmt: skip
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    from matplotlib.image import imread

    pixels = np.asarray(imread(shot))[..., :3]
    rgb = np.round(pixels * 255).astype(np.int16).reshape(-1, 3)
    # The page holds the timelines alone: d5's spans and the profiler's events are on
    # screen in their colours, as bars (thousands of pixels), not only as the legend.
    for colour in (D5_BLUE, PROFILER_ORANGE):
        near = np.abs(rgb - np.array(colour)).max(axis=1) <= 12
        assert int(near.sum()) > 3000, f"colour {colour} is not painted"
