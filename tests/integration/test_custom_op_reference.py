"""A custom operator's author may give a Python (numpy) reference of its forward
(``--reference FILE.py``, or ``SOURCE.py`` beside the source): every framework's forward
is compared with it. Without one, d5 says the forward was checked only for consistency
between frameworks, in its output and in the stored run."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.lv0.customop.runner import NO_PYTHON_REFERENCE
from d5core.results.store import ResultsStore
from d5core.testing.customop import crash_source

pytest.importorskip("d5_plugin_numpy")

DOUBLE = "def forward(inputs, attributes):\n    return [2 * inputs[0]]\n"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Path:
    return crash_source(tmp_path_factory.mktemp("src"), cache, "numpy")  # Y = 2 X


@pytest.fixture(autouse=True)
def _cached(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("D5_OP_CACHE", str(cache))


def _validate(d5_cli, source: Path, db: Path, *more: str):
    return d5_cli("validate", "op", "--custom", str(source), "--backends", "numpy",
                  "--db", str(db), *more)  # fmt: skip


def test_a_forward_that_disagrees_with_the_python_reference_fails_naming_it(
    source: Path, tmp_path: Path, d5_cli
) -> None:
    reference = tmp_path / "triple.py"
    reference.write_text(DOUBLE.replace("2 *", "3 *"))
    result = _validate(d5_cli, source, tmp_path / "r.db", "--reference", str(reference))
    assert result.exit_code == 1, result.stderr
    assert "output 0 (Y against triple.py): tol_ratio" in result.stderr


def test_a_reference_beside_the_source_is_used_and_recorded(
    tmp_path: Path, source: Path, d5_cli
) -> None:
    beside = tmp_path / "faulty.cpp"
    beside.write_text(source.read_text())
    (tmp_path / "faulty.py").write_text(DOUBLE)
    result = _validate(d5_cli, beside, tmp_path / "r.db")
    assert result.exit_code == 0, result.stderr
    assert "Y against faulty.py" in result.stdout
    with ResultsStore.open(tmp_path / "r.db") as store:
        [run] = store.list_runs(kind="validate")
    assert run.config["forward_reference"] == str((tmp_path / "faulty.py").resolve())


def test_without_a_reference_the_output_and_the_stored_run_say_so(
    source: Path, tmp_path: Path, d5_cli
) -> None:
    result = _validate(d5_cli, source, tmp_path / "r.db")
    assert result.exit_code == 0, result.stderr
    assert NO_PYTHON_REFERENCE in result.stderr
    with ResultsStore.open(tmp_path / "r.db") as store:
        [run] = store.list_runs(kind="validate")
    assert run.config["forward_reference"] == NO_PYTHON_REFERENCE


def test_a_reference_that_defines_no_forward_is_one_line_and_exit_2(
    source: Path, tmp_path: Path, d5_cli
) -> None:
    reference = tmp_path / "empty.py"
    reference.write_text("x = 1\n")
    result = _validate(d5_cli, source, tmp_path / "r.db", "--reference", str(reference))
    assert result.exit_code == 2, result.stderr
    assert "defines no forward(inputs, attributes)" in result.stderr
