"""The plugin docs show code that exists and runs.

docs/plugins/tutorial.md shows whole files of the example plugin (tests/example_plugin):
each must be that file, and the tutorial's code, written out as the tutorial shows it,
must pass the tutorial's tests. docs/plugins/worked-example.md quotes excerpts: each must
still be in the file it names. A code block belongs to a file when the line before it
starts with the file's path in backticks and ends with a colon.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "plugins"
EXAMPLE = ROOT / "tests" / "example_plugin"
WORKED = DOCS / "worked_example"
ALGORITHM = DOCS / "algorithm_example"

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
_LABEL = re.compile(r"^`([\w./-]+)`.*:$")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a Markdown page."""

    language: str
    code: str
    #: The file the block shows, from the line before it; ``None`` when unlabelled.
    path: str | None


def code_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page``, in order, with the file each one shows."""
    text = page.read_text()
    blocks = []
    for match in _FENCE.finditer(text):
        before = [line for line in text[: match.start()].splitlines() if line.strip()]
        label = _LABEL.match(before[-1].strip()) if before else None
        blocks.append(Block(match[1], match[2], label[1] if label else None))
    return blocks


def test_code_blocks_are_found_with_the_files_they_show(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n```\nls\n```\n\n`pkg/mod.py` (excerpt):\n\n```python\nx = 1\n```\n"
        "\nNot a label:\n```toml\na = 1\n```\n"
    )
    assert code_blocks(page) == [
        Block("", "ls\n", None),
        Block("python", "x = 1\n", "pkg/mod.py"),
        Block("toml", "a = 1\n", None),
    ]


# -- the tutorial ----------------------------------------------------------------------


def _tutorial_files() -> dict[str, str]:
    files = {b.path: b.code for b in code_blocks(DOCS / "tutorial.md") if b.path}
    assert set(files) == {"pyproject.toml", "d5_loadavg/plugin.py", "tests/test_loadavg_plugin.py"}
    return files


def test_every_file_the_tutorial_shows_is_the_example_plugins_file() -> None:
    drifted = [
        path for path, code in _tutorial_files().items() if (EXAMPLE / path).read_text() != code
    ]
    assert drifted == [], (
        f"docs/plugins/tutorial.md differs from tests/example_plugin/ in {drifted}"
    )


def test_the_tutorials_code_passes_the_tutorials_tests(tmp_path: Path) -> None:
    """The plugin built from the tutorial's blocks alone (as its step 1 lays out the
    folder) imports, and the tutorial's tests pass against it."""
    for path, code in _tutorial_files().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(code)
    (tmp_path / "d5_loadavg" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    where = subprocess.run(
        [sys.executable, "-c", "import d5_loadavg.plugin as p; print(p.__file__)"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert Path(where.stdout.strip()) == tmp_path / "d5_loadavg" / "plugin.py", where.stderr
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b3 passed\b", result.stdout), result.stdout


# -- the worked example ----------------------------------------------------------------


def test_every_excerpt_of_the_worked_example_is_in_its_file() -> None:
    excerpts = [b for b in code_blocks(DOCS / "worked-example.md") if b.path]
    assert {b.path for b in excerpts} >= {
        "pyproject.toml",
        "d5_tinygemm/plugin.py",
        "d5_tinygemm/gemm.py",
        "d5_tinygemm/executor.py",
        "tests/test_tinygemm_operator.py",
    }
    stale = [b.path for b in excerpts if b.code not in (WORKED / str(b.path)).read_text()]
    assert stale == [], f"docs/plugins/worked-example.md quotes code no longer in {stale}"


def test_every_excerpt_of_the_algorithm_tutorial_is_in_its_file() -> None:
    excerpts = [b for b in code_blocks(DOCS / "algorithms.md") if b.path]
    assert {b.path for b in excerpts} == {"d5_polyak/algorithm.py", "pyproject.toml"}
    stale = [b.path for b in excerpts if b.code not in (ALGORITHM / str(b.path)).read_text()]
    assert stale == [], f"docs/plugins/algorithms.md quotes code no longer in {stale}"
