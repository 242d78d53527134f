"""The custom operator build cache trusts only what no one else could have written
(issue 28, section 7), rebuilds a corrupt entry of the user's own, and loads each new
build once in a child process before caching it (section 1: an undefined symbol is
"not built", not a ready framework that fails at validate time).

Most tests build with the ``probe`` framework of ``tests/customop_probe.py``: the
operator's source compiled alone into a shared library and loaded with ctypes, about a
second per build, so that the cache is exercised without any framework's headers. One
build is made per module and copied into each test's own cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from customop_probe import ProbeGlue

from d5core.api import PluginManager, UsageError, hookimpl
from d5core.testing.customop import BuildResult, build

PROBE_OP = """\
#include <d5_op.h>
D5_OP_NAME("probe_op");
D5_OP_INPUTS("X");
D5_OP_OUTPUTS("Y");
{extra}
void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs) {{ {call} }}
void backward(const d5::Inputs& grad_out, const d5::Inputs& in, d5::Outputs& grad_in,
              const d5::Attributes& attrs) {{}}
"""

#: A library whose static initializer leaves a mark: what an attacker would plant.
PLANTED = r"""
#include <fstream>
#include <cstdlib>
__attribute__((constructor)) static void planted() {
  const char* mark = std::getenv("D5_TEST_PLANTED_MARK");
  if (mark != nullptr) std::ofstream(mark) << "the planted library ran\n";
}
"""


@pytest.fixture(scope="module")
def manager() -> PluginManager:
    made = PluginManager(environ={}, discover_installed=False)
    made.register(types.SimpleNamespace(d5_custom_op_glue=hookimpl(lambda: ProbeGlue())), "probe")
    return made


@pytest.fixture
def mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file a planted library writes when it is loaded (by d5 or any child of it)."""
    path = tmp_path / "planted-ran"
    monkeypatch.setenv("D5_TEST_PLANTED_MARK", str(path))
    return path


def _source(tmp_path: Path, extra: str = "", call: str = "", name: str = "probe_op.cpp") -> Path:
    path = tmp_path / name
    path.write_text(PROBE_OP.format(extra=extra, call=call))
    return path


def _planted_library(where: Path) -> None:
    source = where.parent / "planted.cpp"
    source.write_text(PLANTED)
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(where)], check=True)
    source.unlink()


def _plant(entry: Path, artifact_name: str) -> None:
    """Make ``entry`` what an attacker who predicted the key would: a library of their
    own and a manifest whose hash matches it."""
    entry.mkdir(parents=True)
    artifact = entry / artifact_name
    _planted_library(artifact)
    digest = hashlib.sha256(artifact.read_bytes()).hexdigest()
    manifest = {"op": "probe_op", "framework": "probe", "artifact": artifact_name,
                "key": "0" * 64, "sha256": digest, "build_seconds": 1.0}  # fmt: skip
    (entry / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, manager: PluginManager) -> BuildResult:
    """One probe build of the plain operator, in a cache of its own (never changed)."""
    where = tmp_path_factory.mktemp("pristine")
    return build(_source(where), ["probe"], cache=where / "cache", manager=manager)


def _expected_entry(pristine: BuildResult) -> tuple[Path, str]:
    """The entry a build of the plain operator uses (relative to the cache) and its
    artifact's name: the key is predictable."""
    done = pristine.builds["probe"]
    return done.directory.relative_to(done.directory.parents[1]), done.artifact.name


def _chown_tree(top: Path, uid: int) -> None:
    for folder, names, files in os.walk(top):
        for name in [*names, *files]:
            os.chown(Path(folder, name), uid, -1)
    os.chown(top, uid, -1)


@pytest.fixture
def cli_probe(manager: PluginManager) -> Iterator[None]:
    """The probe framework as the process-wide plugins, for ``d5_cli``."""
    from d5core.plugins import reset_plugin_manager

    reset_plugin_manager(manager)
    yield
    reset_plugin_manager(None)


def _one_line_refusal(result: Any) -> str:
    assert result.exit_code == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("d5: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to uid 65534 needs root")
def test_a_planted_entry_of_another_user_is_refused_and_never_loaded(
    tmp_path, pristine, manager, mark, cli_probe, d5_cli
):
    source = _source(tmp_path)
    relative, artifact = _expected_entry(pristine)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _plant(cache / relative, artifact)
    _chown_tree(cache / relative, 65534)  # what user nobody would have left there

    line = _one_line_refusal(d5_cli("op", "build", str(source), "--cache", str(cache)))
    assert "owned by uid 65534" in line and str(cache / relative) in line
    assert not mark.exists(), "d5 loaded a library another user planted"
    assert (cache / relative / artifact).is_file(), "d5 removed another user's files"


def test_a_planted_entry_others_can_write_is_refused_and_never_loaded(
    tmp_path, pristine, manager, mark, cli_probe, d5_cli
):
    source = _source(tmp_path)
    relative, artifact = _expected_entry(pristine)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    _plant(cache / relative, artifact)
    (cache / relative).chmod(0o777)  # a shared folder anyone could have filled

    line = _one_line_refusal(d5_cli("op", "build", str(source), "--cache", str(cache)))
    assert "others can write it (mode 777)" in line
    assert not mark.exists()


def test_a_world_writable_shared_cache_folder_is_refused(
    tmp_path, manager, mark, cli_probe, d5_cli, monkeypatch
):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # a shared, world-writable folder, as /tmp is
    monkeypatch.setenv("D5_OP_CACHE", str(shared))

    line = _one_line_refusal(d5_cli("op", "build", str(_source(tmp_path))))
    assert f"D5_OP_CACHE={shared}" in line and "others can write it (mode 1777)" in line
    assert list(shared.iterdir()) == [], "d5 wrote into a cache it does not trust"


def test_a_cache_under_a_folder_others_can_replace_is_refused(tmp_path, manager):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)  # not sticky: anyone could rename the cache away and replace it
    with pytest.raises(UsageError, match=r"lies under .*open, which others can write"):
        build(_source(tmp_path), ["probe"], cache=open_folder / "cache", manager=manager)


def test_a_private_cache_inside_a_sticky_shared_folder_is_used(tmp_path, manager):
    sticky = tmp_path / "tmp-like"
    sticky.mkdir()
    sticky.chmod(0o1777)  # others may add names here, but not rename or remove ours
    done = build(_source(tmp_path), ["probe"], cache=sticky / "mine", manager=manager)
    assert "probe" in done.builds
    assert stat.S_IMODE((sticky / "mine").stat().st_mode) & 0o077 == 0


def _built(
    tmp_path: Path, pristine: BuildResult, manager: PluginManager
) -> tuple[Path, Path, BuildResult]:
    """A source of the plain operator, a copy of the pristine cache, and its build."""
    source, cache = _source(tmp_path), tmp_path / "cache"
    shutil.copytree(pristine.builds["probe"].directory.parents[1], cache)
    done = build(source, ["probe"], cache=cache, manager=manager)
    assert done.builds["probe"].cached
    return source, cache, done


def test_an_artifact_that_does_not_match_its_recorded_hash_is_rebuilt_never_loaded(
    tmp_path, pristine, manager, mark
):
    source, cache, first = _built(tmp_path, pristine, manager)
    artifact = first.builds["probe"].artifact
    artifact.unlink()
    _planted_library(artifact)  # swapped in; the manifest still records the original hash

    notes: list[str] = []
    again = build(source, ["probe"], cache=cache, manager=manager, on_note=notes.append)
    done = again.builds["probe"]
    assert not done.cached and "does not match the hash recorded" in notes[0]
    done.kernels()
    assert not mark.exists(), "d5 loaded an artifact whose hash was not the one recorded"
    manifest = json.loads((done.directory / "manifest.json").read_text())
    assert manifest["sha256"] == hashlib.sha256(artifact.read_bytes()).hexdigest()


def test_a_truncated_artifact_is_rebuilt_not_an_internal_error(tmp_path, pristine, manager):
    source, cache, first = _built(tmp_path, pristine, manager)
    artifact = first.builds["probe"].artifact
    artifact.write_bytes(artifact.read_bytes()[:1000])

    again = build(source, ["probe"], cache=cache, manager=manager)
    assert not again.builds["probe"].cached
    again.builds["probe"].kernels()  # loads: the rebuilt library is whole


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\xff garbage", b"[1, 2]", b'{"artifact": "x.so"}', None],
    ids=["bytes", "not-an-object", "no-hash", "missing"],
)
def test_a_garbled_manifest_is_rebuilt_not_an_internal_error(tmp_path, pristine, manager, garbage):
    source, cache, first = _built(tmp_path, pristine, manager)
    manifest = first.builds["probe"].directory / "manifest.json"
    if garbage is None:
        manifest.unlink()
    else:
        manifest.write_bytes(garbage)

    again = build(source, ["probe"], cache=cache, manager=manager)
    assert not again.builds["probe"].cached
    assert "sha256" in json.loads(manifest.read_text())


def test_a_manifest_pointing_outside_its_entry_is_rebuilt(tmp_path, pristine, manager, mark):
    source, cache, first = _built(tmp_path, pristine, manager)
    outside = tmp_path / "outside.so"
    _planted_library(outside)
    entry = first.builds["probe"].directory
    data = json.loads((entry / "manifest.json").read_text())
    data["artifact"] = os.path.relpath(outside, entry)
    data["sha256"] = hashlib.sha256(outside.read_bytes()).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(data))

    again = build(source, ["probe"], cache=cache, manager=manager)
    assert not again.builds["probe"].cached
    again.builds["probe"].kernels()
    assert not mark.exists()


def test_an_artifact_changed_after_the_check_is_not_loaded(tmp_path, pristine, manager, mark):
    _, _, first = _built(tmp_path, pristine, manager)
    done = first.builds["probe"]
    done.artifact.unlink()
    _planted_library(done.artifact)  # between d5's check and its load

    with pytest.raises(UsageError, match="changed after d5 checked it"):
        done.kernels()
    assert not mark.exists()


def test_a_build_made_under_a_permissive_umask_is_still_trusted(tmp_path, manager):
    source, cache = _source(tmp_path), tmp_path / "cache"
    old = os.umask(0)
    try:
        build(source, ["probe"], cache=cache, manager=manager)
    finally:
        os.umask(old)
    for path in [cache, *cache.rglob("*")]:
        assert not path.stat().st_mode & 0o022, f"{path} was left writable by others"
    again = build(source, ["probe"], cache=cache, manager=manager)
    assert again.builds["probe"].cached


def test_an_undefined_symbol_is_not_built_for_that_framework_and_nothing_is_cached(
    tmp_path, manager
):
    source = _source(tmp_path, extra="int d5_missing_helper(int);",
                     call="(void)d5_missing_helper(1);")  # fmt: skip
    cache = tmp_path / "cache"
    notes: list[str] = []
    done = build(source, ["probe"], cache=cache, manager=manager, on_note=notes.append)
    assert done.builds == {}
    assert len(notes) == 1 and notes[0].startswith("probe: not built, ")
    assert "undefined symbol d5_missing_helper(int)" in notes[0]
    assert not any(p.is_file() for p in cache.rglob("*")), "a build that does not load was cached"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("#include <cstdlib>\nstatic int boom = (std::abort(), 0);", "SIGABRT"),
        ("#include <csignal>\nstatic int boom = (std::raise(SIGSEGV), 0);", "SIGSEGV"),
        ("#include <cstdlib>\nstatic int boom = (std::exit(0), 0);", "status 0"),
        ("static int boom = (throw 7, 0);", "SIGABRT"),
    ],
    ids=["abort", "segfault", "exit-0", "throw-int"],
)
def test_a_static_initializer_that_kills_its_process_is_not_built_and_d5_survives(
    tmp_path, manager, extra, said
):
    notes: list[str] = []
    done = build(_source(tmp_path, extra=extra), ["probe"], cache=tmp_path / "cache",
                 manager=manager, on_note=notes.append)  # fmt: skip
    assert done.builds == {}
    assert len(notes) == 1 and notes[0].startswith("probe: not built, ") and said in notes[0]


def test_a_static_initializer_that_never_returns_is_not_built_past_the_load_limit(
    tmp_path, manager, monkeypatch
):
    from d5core.lv0.customop import loadcheck

    monkeypatch.setattr(loadcheck, "LOAD_SECONDS", 3.0)
    spin = (
        "static int spin() { volatile int x = 0; for (;;) x = x + 1; }\nstatic int boom = spin();"
    )
    notes: list[str] = []
    done = build(_source(tmp_path, extra=spin), ["probe"], cache=tmp_path / "cache",
                 manager=manager, on_note=notes.append)  # fmt: skip
    assert done.builds == {}
    assert len(notes) == 1 and "did not finish within 3 s" in notes[0]
    assert not any(p.is_file() for p in (tmp_path / "cache").rglob("*"))


@pytest.mark.slow
def test_d5_op_build_of_an_operator_linking_an_undefined_symbol_exits_2_naming_it(tmp_path, d5_cli):
    # the real numpy glue (a pybind11 module), as issue 28 found it: "1 framework ready"
    example = Path(__file__).resolve().parents[2] / "examples" / "custom_ops" / "bias_gelu.cpp"
    text = example.read_text().replace(
        'const double scale = attrs.f("scale");',
        'const double scale = attrs.f("scale") + d5_missing_helper(1);', 1,
    ).replace("void forward(", "int d5_missing_helper(int);\nvoid forward(", 1)  # fmt: skip
    source = tmp_path / "undefined_op.cpp"
    source.write_text(text)
    result = d5_cli("op", "build", str(source), "--frameworks", "numpy",
                    "--cache", str(tmp_path / "cache"))  # fmt: skip
    assert result.exit_code == 2, result.stderr + result.stdout
    assert "ready in" not in result.stdout
    notes = [line for line in result.stderr.splitlines() if "not built" in line]
    assert len(notes) == 1 and "undefined symbol d5_missing_helper(int)" in notes[0]
    assert "Traceback" not in result.stderr


def test_a_corrupt_entry_is_rebuilt_by_the_command_too(
    tmp_path, pristine, manager, cli_probe, d5_cli
):
    source, cache, first = _built(tmp_path, pristine, manager)
    first.builds["probe"].artifact.write_bytes(b"\x7fELF truncated")

    result = d5_cli("op", "build", str(source), "--cache", str(cache))
    assert result.exit_code == 0, result.stderr
    assert "corrupt" in result.stderr and "probe: built in" in result.stdout
