"""Environment capture: every fact measurement.md asks for, and failures that never crash."""

from __future__ import annotations

import json
import os
import stat
import sys
import types
from pathlib import Path

import pytest

from d5core import __version__
from d5core.environment import (
    THREAD_VARS,
    capture_environment,
    environment_differences,
    environment_fingerprint,
)
from d5core.hookspecs import hookimpl
from d5core.plugins import PluginManager

EXPECTED_KEYS = {
    "d5",
    "plugins",
    "packages",
    "frameworks",
    "python",
    "os",
    "cpu",
    "memory",
    "threads",
    "gpus",
    "hostname",
    "git",
    "argv",
    "seeds",
    "recipe_hash",
    "timestamp",
}


def _empty_manager() -> PluginManager:
    return PluginManager({}, discover_installed=False)


def _plugin(name: str, **hooks: object) -> types.SimpleNamespace:
    """An inline plugin object whose hooks are the given functions."""
    ns = types.SimpleNamespace(__name__=name)
    for hook_name, fn in hooks.items():
        setattr(ns, hook_name, hookimpl(fn))
    return ns


def test_capture_has_every_documented_key_and_is_json():
    env = capture_environment(
        argv=["d5", "bench", "op"],
        seeds={"data": 1, "init": 2},
        recipe_hash="abc123",
        manager=_empty_manager(),
        environ={"OMP_NUM_THREADS": "2", "KMP_AFFINITY": "compact", "PATH": "/bin"},
    )
    assert set(env) >= EXPECTED_KEYS
    assert json.loads(json.dumps(env)) == env
    assert env["d5"]["version"] == __version__
    assert env["packages"]["d5core"] == __version__
    assert env["argv"] == ["d5", "bench", "op"]
    assert env["seeds"] == {"data": 1, "init": 2}
    assert env["recipe_hash"] == "abc123"
    assert env["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert env["python"]["executable"] == sys.executable
    assert {"system", "release", "machine"} <= set(env["os"])
    assert env["cpu"]["logical_cores"] >= 1
    assert isinstance(env["cpu"]["flags"], list)
    assert env["memory"]["total_bytes"] > 0
    assert env["timestamp"].endswith("+00:00")


def test_thread_settings_list_every_pool_variable_and_affinity_ones():
    env = capture_environment(
        manager=_empty_manager(),
        environ={"OMP_NUM_THREADS": "4", "KMP_AFFINITY": "compact", "GOMP_CPU_AFFINITY": "0-3"},
    )
    threads = env["threads"]
    assert set(THREAD_VARS) <= set(threads)
    assert threads["OMP_NUM_THREADS"] == "4"
    assert threads["MKL_NUM_THREADS"] is None
    assert threads["KMP_AFFINITY"] == "compact"
    assert threads["GOMP_CPU_AFFINITY"] == "0-3"


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="needs /proc/cpuinfo")
def test_cpu_flags_come_from_proc_cpuinfo():
    env = capture_environment(manager=_empty_manager())
    text = Path("/proc/cpuinfo").read_text()
    line = next(
        (ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("flags", "Features")),
        None,
    )
    expected = sorted(set(line.split(":", 1)[1].split())) if line else []
    assert env["cpu"]["flags"] == expected


def test_installed_plugins_are_recorded_with_versions_from_metadata():
    env = capture_environment(manager=PluginManager({"D5_LOAD_PLUGINS": "core"}))
    core = [p for p in env["plugins"] if p["distribution"] == "d5core"]
    assert core and all(p["version"] == __version__ for p in core)
    for p in env["plugins"]:
        assert env["packages"][p["distribution"]] == p["version"]
    assert env["frameworks"]["d5core:core"]["d5core"] == __version__


def test_framework_facts_come_from_the_environment_hook():
    manager = _empty_manager()
    manager.register(_plugin("fake_fw", d5_environment_info=lambda: {"fw": "1.2", "threads": 3}))
    env = capture_environment(manager=manager)
    assert env["frameworks"]["fake_fw"] == {"fw": "1.2", "threads": 3}


def test_a_failing_environment_hook_is_recorded_not_raised():
    def boom() -> dict[str, object]:
        raise RuntimeError("driver   not\nloaded")

    manager = _empty_manager()
    manager.register(_plugin("broken_fw", d5_environment_info=boom))
    manager.register(_plugin("good_fw", d5_environment_info=lambda: {"fw": "2.0"}))
    env = capture_environment(manager=manager)
    assert env["frameworks"]["broken_fw"] == {"error": "RuntimeError: driver not loaded"}
    assert env["frameworks"]["good_fw"] == {"fw": "2.0"}


def test_a_hook_returning_a_non_mapping_is_recorded_as_an_error():
    manager = _empty_manager()
    manager.register(_plugin("odd_fw", d5_environment_info=lambda: ["not", "a", "dict"]))
    env = capture_environment(manager=manager)
    assert "not a mapping" in env["frameworks"]["odd_fw"]["error"]


def test_git_commit_and_dirty_flag_of_the_working_directory(tmp_path, monkeypatch):
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    try:
        subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
        (repo / "f.txt").write_text("a\n")
        subprocess.run([*git, "add", "f.txt"], cwd=repo, check=True)
        subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=repo, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not usable here")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.chdir(repo)
    env = capture_environment(manager=_empty_manager())
    assert env["git"]["commit"] == head and env["git"]["dirty"] is False
    (repo / "f.txt").write_text("b\n")
    assert capture_environment(manager=_empty_manager())["git"]["dirty"] is True


def test_git_is_none_outside_a_repository(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert capture_environment(manager=_empty_manager())["git"] is None


def _fake_nvidia_smi(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


@pytest.mark.skipif(os.name != "posix", reason="uses a shell script as a fake nvidia-smi")
def test_gpus_are_read_from_nvidia_smi(tmp_path, monkeypatch):
    _fake_nvidia_smi(
        tmp_path / "bin",
        "echo '0, NVIDIA H100 80GB HBM3, 550.54.15, 81559, GPU-aaaa'\n"
        "echo '1, NVIDIA H100 80GB HBM3, 550.54.15, 81559, GPU-bbbb'\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    gpus = capture_environment(manager=_empty_manager())["gpus"]
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "driver_version": "550.54.15",
            "memory_total_mib": 81559,
            "uuid": "GPU-aaaa",
        },
        {
            "index": 1,
            "name": "NVIDIA H100 80GB HBM3",
            "driver_version": "550.54.15",
            "memory_total_mib": 81559,
            "uuid": "GPU-bbbb",
        },
    ]


@pytest.mark.skipif(os.name != "posix", reason="uses a shell script as a fake nvidia-smi")
def test_a_failing_nvidia_smi_gives_no_gpus(tmp_path, monkeypatch):
    _fake_nvidia_smi(tmp_path / "bin", "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert capture_environment(manager=_empty_manager())["gpus"] == []


def test_no_nvidia_smi_gives_no_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert capture_environment(manager=_empty_manager())["gpus"] == []


def test_fingerprint_ignores_what_changes_between_runs_on_one_machine():
    a = capture_environment(argv=["a"], seeds=1, recipe_hash="x", manager=_empty_manager())
    b = dict(a, argv=["b"], seeds=2, recipe_hash="y", timestamp="later", hostname="other")
    b["git"] = {"commit": "0" * 40, "dirty": True}
    assert environment_fingerprint(a) == environment_fingerprint(b)
    assert environment_differences(a, b) == []


@pytest.mark.parametrize(
    ("section", "key", "value", "named"),
    [
        ("cpu", "model", "Other CPU 9000", "cpu_model"),
        ("cpu", "logical_cores", 512, "logical_cores"),
        ("os", "release", "0.0.1-other", "os.release"),
        ("python", "version", "3.99.0", "python.version"),
        ("packages", "torch", "9.9.9", "packages.torch"),
        ("threads", "OMP_NUM_THREADS", "64", "threads.OMP_NUM_THREADS"),
        ("allocator", "policy", "user", "allocator.policy"),
    ],
)
def test_fingerprint_changes_with_comparability_relevant_facts(section, key, value, named):
    a = capture_environment(manager=_empty_manager(), environ={})
    b = json.loads(json.dumps(a))
    b[section][key] = value
    assert environment_fingerprint(a) != environment_fingerprint(b)
    differences = environment_differences(a, b)
    assert len(differences) == 1 and differences[0].startswith(f"{named}: ")
    assert repr(value) in differences[0]


def test_fingerprint_of_a_partial_environment_does_not_fail():
    assert environment_fingerprint({}) == environment_fingerprint({"argv": ["x"]})
    assert environment_differences({}, {"cpu": {"model": "m"}}) == ["cpu_model: None vs 'm'"]
