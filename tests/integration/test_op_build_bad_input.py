"""``d5 op build`` on bad input: one line naming what is wrong, exit 2, never a traceback
or an internal error (issue 28, section 3). The source file, the cache folder (from
``D5_OP_CACHE`` or ``--cache``) and the framework names are each tried the ways a new
user got wrong: binary, empty, a folder, missing; under ``/proc``, under a file, a
device, unwritable; unknown names and names with shell metacharacters."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from d5core.api import hookimpl

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"


def _refused(result, *, notes: int = 0) -> str:
    """The one error line of a command that exited 2 (after ``notes`` note lines)."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("d5: error:")]
    assert len(errors) == 1 and len(lines) == 1 + notes, result.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (bytes(range(256)) * 4, "is a binary file"),
        ("// a comment in Latin-1: caf\xe9\n".encode("latin-1"), "is not UTF-8 text"),
        (b"", "is empty"),
        (b" \n\t\n", "is empty"),
    ],
    ids=["binary", "latin-1", "empty", "blank"],
)
def test_a_source_file_that_is_no_cpp_text_is_one_line_exit_2(tmp_path, d5_cli, content, said):
    source = tmp_path / "op.cpp"
    source.write_bytes(content)
    line = _refused(d5_cli("op", "build", str(source), "--cache", str(tmp_path / "c")))
    assert str(source) in line and said in line


def test_a_source_over_the_size_limit_is_refused_before_it_is_read(tmp_path, d5_cli):
    source = tmp_path / "huge.cpp"
    with source.open("wb") as stream:
        stream.truncate(17 << 20)  # sparse: nothing is written
    line = _refused(d5_cli("op", "build", str(source), "--cache", str(tmp_path / "c")))
    assert "at most 16 MiB" in line


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda tmp: tmp, "is a folder"),
        (lambda tmp: tmp / "missing.cpp", "does not exist"),
        (lambda tmp: Path("/dev/null"), "is not a regular file"),
    ],
    ids=["folder", "missing", "device"],
)
def test_a_source_path_that_is_no_file_is_one_line_exit_2(tmp_path, d5_cli, make, said):
    line = _refused(d5_cli("op", "build", str(make(tmp_path)), "--cache", str(tmp_path / "c")))
    assert said in line


def _file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("not a folder")
    return path


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda tmp: Path("/proc/d5-op-cache"), "cannot create D5_OP_CACHE=/proc/d5-op-cache"),
        (lambda tmp: Path("/proc"), "cannot write the custom operator cache /proc"),
        (lambda tmp: _file(tmp) / "cache", "lies under"),
        (lambda tmp: _file(tmp), "is a file, not a folder"),
        (lambda tmp: Path("/dev/null"), "D5_OP_CACHE=/dev/null is a device, not a folder"),
        (lambda tmp: tmp / 'q"uote', "holds the character '\"'"),
        (lambda tmp: tmp / "new\nline", "holds the character '\\n'"),
    ],
    ids=["under-proc", "proc", "under-a-file", "a-file", "dev-null", "quote", "newline"],
)
def test_a_cache_folder_d5_cannot_use_is_one_line_exit_2(tmp_path, d5_cli, monkeypatch, make, said):
    monkeypatch.setenv("D5_OP_CACHE", str(make(tmp_path)))
    line = _refused(d5_cli("op", "build", str(EXAMPLE), "--frameworks", "numpy"))
    assert said in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder of mode 500")
def test_an_unwritable_cache_folder_is_one_line_exit_2(tmp_path, d5_cli):
    cache = tmp_path / "read-only"
    cache.mkdir(mode=0o500)
    try:
        line = _refused(d5_cli("op", "build", str(EXAMPLE), "--frameworks", "numpy",
                               "--cache", str(cache)))  # fmt: skip
    finally:
        cache.chmod(0o700)
    assert "cannot write the custom operator cache" in line and "Permission denied" in line


def test_a_cache_option_naming_a_device_is_one_line_exit_2(tmp_path, d5_cli):
    line = _refused(d5_cli("op", "build", str(EXAMPLE), "--cache", "/dev/null"))
    assert "--cache /dev/null is a device, not a folder" in line


@pytest.mark.parametrize("name", ["bogus", "numpy;rm -rf ~", "$(id)"])
def test_an_unknown_framework_name_is_exit_2_naming_the_known_ones(tmp_path, d5_cli, name):
    result = d5_cli("op", "build", str(EXAMPLE), "--frameworks", name,
                    "--cache", str(tmp_path / "c"))  # fmt: skip
    line = _refused(result)
    assert f"unknown framework {name!r}" in line and "numpy" in line and "torch" in line
    assert not (tmp_path / "c").exists(), "an unknown name was found only after building"


class _Unable:
    """The glue of a framework whose plugin is installed but cannot build here."""

    name = "ghostframe"

    def available(self) -> bool:
        return False

    def version(self) -> str:
        raise AssertionError("a skipped framework's version is not asked for")

    def build(self, request, workdir):
        raise AssertionError("a skipped framework is not built")

    def load(self, artifact, spec):
        raise AssertionError("a skipped framework is not loaded")


def test_an_installed_but_unable_framework_stays_a_note(tmp_path, d5_plugin_manager, d5_cli):
    plugin = types.SimpleNamespace(d5_custom_op_glue=hookimpl(lambda: _Unable()))
    d5_plugin_manager.register(plugin, "ghost")
    result = d5_cli("op", "build", str(EXAMPLE), "--frameworks", "ghostframe",
                    "--cache", str(tmp_path / "c"))  # fmt: skip
    line = _refused(result, notes=1)
    assert "d5: ghostframe: skipped, ghostframe is not installed" in result.stderr
    assert "bias_gelu is ready for no framework" in line


@pytest.mark.parametrize(
    ("cxx", "said"),
    [("false", "is $CXX a C++ compiler?"), ("no-such-compiler++", "no C++ compiler")],
    ids=["not-a-compiler", "missing"],
)
def test_a_cxx_that_is_no_compiler_is_exit_2_saying_so(tmp_path, d5_cli, monkeypatch, cxx, said):
    monkeypatch.setenv("CXX", cxx)
    result = d5_cli("op", "build", str(EXAMPLE), "--frameworks", "numpy",
                    "--cache", str(tmp_path / "c"))  # fmt: skip
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert said in result.stderr and result.stderr.startswith("d5: error:")


@pytest.mark.parametrize("command", [("validate", "op"), ("bench", "op")], ids=" ".join)
def test_validate_and_bench_custom_refuse_the_same_bad_input_in_one_line(tmp_path, d5_cli, command):
    binary = tmp_path / "op.cpp"
    binary.write_bytes(bytes(range(256)))
    db = str(tmp_path / "results.sqlite")
    line = _refused(d5_cli(*command, "--custom", str(binary), "--backends", "numpy", "--db", db))
    assert "is a binary file" in line
    line = _refused(d5_cli(*command, "--custom", str(EXAMPLE), "--backends", "bogus", "--db", db))
    assert "unknown framework 'bogus'" in line
