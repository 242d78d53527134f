"""``d5 report`` opened in a real browser: headless Chromium loads the page from disk,
every figure is in the rendered DOM as SVG, and the screenshot is not blank.

The runs are real: a tiny ``d5 bench op`` and ``d5 bench net`` with the numpy backend,
plus a run stored by hand whose name and tags are hostile, all in one temporary store.

Chromium is found as ``chromium``, ``chromium-browser`` or ``google-chrome``. Without
it the test is skipped with the way to install it, except under CI (``CI=true``),
where CI installs it first (``.ci/run``) and a missing browser fails the test, so that
the check is never silently left out there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from d5core.results.store import ResultsStore

SCRIPT = "<script>alert(1)</script>"
QUOTES = "he said \"hi\" & 'bye'"
#: How long one browser call may take (a cold start on a loaded CI machine is slow).
BROWSER_TIMEOUT_S = 120


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


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A report of real runs: its page and what ``d5 report --json`` said of it."""
    work = tmp_path_factory.mktemp("browser-report")
    db = str(work / "results.sqlite")
    budget = ["--processes", "1", "--time-budget", "0.02", "--min-samples", "6"]
    budget += ["--max-samples", "40", "--warmup", "1", "--db", db]
    d5("bench", "op", "Gemm", "--backends", "numpy", "--shape", "32x32,32x32", *budget,
       "--tag", QUOTES, cwd=work)  # fmt: skip
    d5("bench", "net", "mlp", "--executors", "numpy", "--batch", "2", *budget, cwd=work)
    # A run named to attack the page, with samples the operator figures draw.
    labels = {"backend": SCRIPT, "problem": "8x8", "dtype": "float32", "direction": "forward"}
    samples = np.random.default_rng(0).lognormal(-7, 0.1, 40).tolist()
    with (
        ResultsStore.open(db) as store,
        store.run("op", SCRIPT, config={"op": SCRIPT}, tags=[QUOTES, SCRIPT]) as run_id,
    ):
        store.add_measurement(run_id, "time", samples, labels=labels)
    page = work / "report.html"
    done = d5("report", "--last", "10", "--db", db, "-o", str(page), "--json", cwd=work)
    envelope = json.loads(done.stdout)
    return page, envelope


class _Dom(HTMLParser):
    """The figures of a rendered DOM: each figure's key and the elements inside it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.figures: dict[str, list[str]] = {}
        self.scripts = 0
        self.handlers: list[tuple[str, str]] = []
        self._open: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.scripts += tag == "script"
        self.handlers += [(tag, name) for name in found if name.startswith("on")]
        key = found.get("data-key") if tag == "figure" else None
        if key is not None:
            self.figures[key] = []
        for _, open_key in self._open:
            if open_key is not None:
                self.figures[open_key].append(tag)
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


def test_the_report_renders_every_figure_in_chromium(
    chromium: str, report: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    page, envelope = report
    data = envelope.get("data", envelope)
    assert isinstance(data, dict)
    figures = data["figures"]
    assert isinstance(figures, list)
    keys = {str(f["key"]) for f in figures}
    sections = {str(f["section"]) for f in figures}
    assert {"operators", "networks"} <= sections, figures

    dumped = browse(chromium, page, "--dump-dom", profile=tmp_path / "profile-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    dom = _Dom()
    dom.feed(dumped.stdout)
    # The page loaded, and the browser built every figure with its SVG inside it.
    assert "d5 report" in dumped.stdout
    assert set(dom.figures) == keys
    for key, inside in dom.figures.items():
        assert inside.count("svg") == 1, (key, inside[:20])
        assert {"path", "text"} <= set(inside), key  # drawn, with its labels
    # Nothing from the store became an element or a handler.
    assert dom.scripts == 0 and dom.handlers == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dumped.stdout
    assert "he said \"hi\" &amp; 'bye'" in dumped.stdout

    shot = tmp_path / "report.png"
    taken = browse(
        chromium, page, f"--screenshot={shot}", "--window-size=1200,4000",
        profile=tmp_path / "profile-shot",
    )  # fmt: skip
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    from matplotlib.image import imread

    pixels = np.asarray(imread(shot))[..., :3]
    assert pixels.shape[:2] == (4000, 1200)
    rgb = np.round(pixels * 255).astype(np.uint8).reshape(-1, 3)
    colours = np.unique(rgb, axis=0)
    non_white = float(np.mean(np.any(rgb < 245, axis=1)))
    # A page of text alone has a few hundred (anti-aliasing) and is nearly all white.
    assert len(colours) > 500, f"only {len(colours)} distinct colours: a blank page?"
    assert non_white > 0.05, f"only {non_white:.1%} of the screenshot is not white"
    # The figures' own colours (the palette's blue, drawn half transparent over white)
    # are on screen: the SVGs were painted, not only parsed.
    blue = np.array([0x00, 0x72, 0xB2])
    tinted = 0.4 * 255 + 0.6 * blue
    near = np.abs(rgb.astype(float) - tinted).max(axis=1) < 40
    assert int(near.sum()) > 500, "no figure colour on the screenshot"
