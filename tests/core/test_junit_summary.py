"""`.ci/junit_summary.py`: a skip for a module the session has installed fails `make test`."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

CI = Path(__file__).resolve().parents[2] / ".ci"
#: A module name no session has; the tests pretend a session has it by listing it.
PROBE = "d5_lane_probe_module"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, CI / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


summary = _load("junit_summary")
lane_modules = _load("lane_modules")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real JUnit report, written by pytest, of a session with one test passing, one
    skipped in its body for want of PROBE, a module skipped while collecting for want of
    PROBE's submodule, and one skipped for want of a CUDA device."""
    folder = tmp_path_factory.mktemp("lane")
    (folder / "test_body.py").write_text(
        textwrap.dedent(f"""
            import pytest

            def test_passes():
                pass

            def test_needs_probe():
                pytest.importorskip("{PROBE}")

            def test_needs_cuda():
                pytest.skip("needs a CUDA device")
        """)
    )
    (folder / "test_module.py").write_text(
        f'import pytest\npytest.importorskip("{PROBE}.sub")\n\ndef test_x():\n    pass\n'
    )
    xml = folder / "reports" / "lane.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return xml


def _summarise(report: Path, modules: list[str] | None, capsys: pytest.CaptureFixture[str]):
    listing = report.with_name("lane.modules.txt")
    listing.unlink(missing_ok=True)
    if modules is not None:
        listing.write_text("".join(f"{m}\n" for m in modules))
    code = summary.main(str(report.parent))
    return code, capsys.readouterr().out.splitlines()


def test_skips_for_a_module_the_session_lacks_pass_and_are_counted(report, capsys) -> None:
    code, lines = _summarise(report, ["pytest", "json"], capsys)
    assert code == 0, lines
    assert lines == ["lane: 1 passed, 0 failed, 3 skipped", "total: 1 passed, 0 failed, 3 skipped"]


def test_a_skip_for_a_module_the_session_has_fails_with_one_line_per_test(report, capsys) -> None:
    code, lines = _summarise(report, ["pytest", PROBE], capsys)
    assert code == 1
    problems = [line for line in lines if f"but this session has '{PROBE}' installed" in line]
    assert len(problems) == 2, lines
    body, module = sorted(problems)
    assert body.startswith(f"lane: test_body::test_needs_probe skipped for want of '{PROBE}',")
    # a module skipped while collecting names the submodule; its package is what counts
    assert module.startswith(f"lane: test_module skipped for want of '{PROBE}.sub',")
    assert not any("cuda" in line.lower() for line in problems)
    assert lines[-1] == "2 skip(s) counted as failures: the session has the module"


def test_an_import_skip_without_the_sessions_module_list_fails(report, capsys) -> None:
    code, lines = _summarise(report, None, capsys)
    assert code == 1
    assert any("recorded no lane.modules.txt" in line for line in lines), lines


def test_a_skip_quoting_an_import_error_is_judged_like_importorskip() -> None:
    lane = summary.Lane(
        "integration",
        skips=[
            summary.Skip("t::mpi", "the MPI plugin cannot be imported (No module named 'mpi4py')"),
            summary.Skip("t::gpu", "needs a CUDA device"),
        ],
    )
    (problem,) = summary.misplaced_skips(lane, {"mpi4py"})
    assert problem.startswith("integration: t::mpi skipped for want of 'mpi4py'")
    assert summary.misplaced_skips(lane, {"numpy"}) == []


def test_the_module_list_names_what_this_interpreter_can_import(tmp_path: Path) -> None:
    listing = tmp_path / "modules.txt"
    assert lane_modules.main([str(listing)]) == 0
    names = listing.read_text().splitlines()
    assert names == sorted(names)
    assert {"d5core", "pytest", "json", "sys"} <= set(names)
    assert PROBE not in names
    assert "junit_summary" not in names  # the script's own folder is not a place to import from


def test_no_test_gives_importorskip_a_reason_that_hides_the_module() -> None:
    """pytest's own reason names the module ("could not import 'X'"), which the summary
    needs to judge the skip; a custom reason would hide it."""
    root = CI.parent
    files = [*root.glob("tests/**/*.py"), *root.glob("plugins/*/tests/**/*.py")]
    files += root.glob("docs/plugins/*/tests/**/*.py")
    hidden = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "importorskip"
                and any(k.arg == "reason" for k in node.keywords)
            ):
                hidden.append(f"{path.relative_to(root)}:{node.lineno}")
    assert hidden == []
