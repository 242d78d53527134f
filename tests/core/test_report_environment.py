"""The report's environment table: facts per distinct environment, differences marked,
machines named, and every stored string escaped in its HTML."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from d5core.environment import capture_environment
from d5core.levels.report import ReportRun
from d5core.plugins import PluginManager
from d5core.report.environment import (
    FACT_GROUPS,
    describe_environment,
    environment_table,
    machines_of,
    machines_warning,
    render_environment,
)
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import report_runs


def environment(**changes: Any) -> dict[str, Any]:
    """A stored environment shaped as ``capture_environment`` makes them."""
    env: dict[str, Any] = {
        "d5": {"version": "0.1.0", "plugin_api": "1.6"},
        "plugins": [
            {
                "name": "numpy",
                "group": "d5.frameworks",
                "distribution": "d5-plugin-numpy",
                "version": "0.1.0",
                "status": "ok",
            },
        ],
        "packages": {"d5core": "0.1.0", "d5-plugin-numpy": "0.1.0"},
        "frameworks": {
            "d5-plugin-numpy:numpy": {
                "numpy": "2.4.6",
                "blas": {"name": "scipy-openblas", "version": "0.3.31"},
            },
            "d5-plugin-tensorflow:tensorflow": {"tensorflow": "2.21.0", "imported": False},
        },
        "python": {
            "version": "3.11.7",
            "implementation": "CPython",
            "executable": "/venv/bin/python",
            "compiler": "GCC 12.2.0",
        },
        "os": {
            "system": "Linux",
            "release": "6.1.0",
            "version": "#1 SMP",
            "machine": "x86_64",
            "platform": "Linux-6.1.0-x86_64",
        },
        "cpu": {
            "model": "AMD EPYC 9654",
            "logical_cores": 8,
            "physical_cores": 4,
            "usable_cores": 8,
            "max_mhz": None,
            "flags": ["avx", "avx2", "fma", "sse4_2", "avx512f", "aes"],
        },
        "memory": {"total_bytes": 16 * 2**30},
        "threads": {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": None},
        "allocator": {"policy": "system", "library": "glibc 2.36", "applied": False},
        "gpus": [],
        "hostname": "node-a",
        "git": {"commit": "a" * 40, "dirty": False, "directory": "/src"},
        "argv": ["d5", "bench", "op", "gemm"],
        "seeds": 0,
        "recipe_hash": None,
        "timestamp": "2026-01-01T00:00:00+00:00",
    }
    for path, value in changes.items():
        target = env
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
    return env


def facts_of(env: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {(group, fact): value for group, fact, value in describe_environment(env)}


def stored_runs(tmp_path: Path, environments: list[dict[str, Any]]) -> list[ReportRun]:
    """One stored run per environment, read back as a report reads them."""
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        ids = []
        for i, env in enumerate(environments):
            with store.run("op", f"gemm-{i}", environment=env) as run_id:
                store.add_measurement(run_id, "time", [1e-3, 2e-3, 3e-3])
            ids.append(run_id)
        return report_runs(store, ids)


def test_one_environment_gives_every_fact_the_brief_asks_for() -> None:
    facts = facts_of(environment())
    assert facts[("machine", "host")] == "node-a"
    assert facts[("machine", "CPU model")] == "AMD EPYC 9654"
    assert facts[("machine", "CPU cores")] == "8 logical, 4 physical, 8 usable"
    flags = facts[("machine", "CPU flags")]
    assert flags.startswith("6 flags; vector: sse4_2 avx avx2 fma avx512f; set ")
    assert facts[("machine", "memory")] == "16.0 GiB"
    assert facts[("machine", "GPUs")] == "none"
    assert facts[("operating system", "OS")] == "Linux x86_64"
    assert facts[("operating system", "kernel")] == "6.1.0 #1 SMP"
    assert facts[("python", "Python")] == "CPython 3.11.7"
    assert facts[("python", "interpreter")] == "/venv/bin/python"
    assert facts[("d5 and plugins", "d5")] == "0.1.0"
    assert facts[("d5 and plugins", "package d5-plugin-numpy")] == "0.1.0"
    assert facts[("d5 and plugins", "plugins not loaded")] == "none"
    assert facts[("frameworks", "d5-plugin-numpy:numpy numpy")] == "2.4.6"
    assert facts[("frameworks", "d5-plugin-numpy:numpy blas name")] == "scipy-openblas"
    assert facts[("frameworks", "d5-plugin-tensorflow:tensorflow tensorflow")] == "2.21.0"
    assert facts[("threads", "OMP_NUM_THREADS")] == "4"
    assert facts[("threads", "MKL_NUM_THREADS")] == "not set"
    assert facts[("allocator", "allocator policy")] == "system"
    assert facts[("allocator", "allocator library")] == "glibc 2.36"
    assert facts[("source", "git commit")] == "a" * 40
    assert facts[("source", "uncommitted changes")] == "no"
    # What one process happened to do is no fact about the set-up.
    assert not any("imported" in fact for _, fact in facts)
    assert ("allocator", "allocator applied") not in facts
    # The per-run keys are listed per run, not as facts of the environment.
    assert not any("argv" in fact or "timestamp" in fact for _, fact in facts)
    groups = [group for group, _, _ in describe_environment(environment())]
    assert groups == sorted(groups, key=FACT_GROUPS.index)


def test_the_flags_summary_tells_different_flag_sets_apart() -> None:
    one = facts_of(environment())[("machine", "CPU flags")]
    flags = ["avx", "avx2", "fma", "sse4_2", "avx512f", "sha"]
    other = facts_of(environment(cpu__flags=flags))[("machine", "CPU flags")]
    same = facts_of(environment(cpu__flags=list(reversed(flags))))[("machine", "CPU flags")]
    assert one.split("; set ")[0] == other.split("; set ")[0]  # same count and vector flags
    assert one != other  # yet a different set
    assert other == same  # the order they were listed in does not matter


def test_sections_that_failed_or_were_never_recorded_say_so() -> None:
    env = environment(cpu={"error": "OSError: no /proc"}, git=None, gpus={"error": "boom"})
    del env["memory"]
    facts = facts_of(env)
    assert facts[("machine", "CPU model")] == "not recorded: OSError: no /proc"
    assert facts[("machine", "memory")] == "—"
    assert facts[("machine", "GPUs")] == "not recorded: boom"
    assert facts[("source", "git commit")] == "not in a git checkout"
    assert facts_of(environment(git__dirty=True))[("source", "uncommitted changes")] == (
        "yes (dirty)"
    )
    bad_plugin = environment()
    bad_plugin["plugins"].append(
        {"name": "torch", "group": "d5.frameworks", "distribution": "d5-plugin-torch",
         "version": "0.1.0", "status": "failed"}
    )  # fmt: skip
    assert facts_of(bad_plugin)[("d5 and plugins", "plugins not loaded")] == (
        "torch (d5.frameworks): failed"
    )


def test_runs_are_grouped_by_environment_and_differences_found(tmp_path: Path) -> None:
    a = environment()
    a_again = environment(argv=["d5", "bench", "op", "conv"], seeds=7)
    a_again["frameworks"]["d5-plugin-tensorflow:tensorflow"]["imported"] = True
    b = environment(hostname="node-b", cpu__model="Intel Xeon 8480")
    b["frameworks"]["d5-plugin-numpy:numpy"]["numpy"] = "1.23.5"
    b["git"]["commit"] = "b" * 40
    runs = stored_runs(tmp_path, [a, b, a_again])
    table = environment_table(runs)

    assert [c.label for c in table.columns] == ["E1", "E2"]
    assert table.columns[0].runs == (runs[0].id, runs[2].id)
    assert table.columns[1].runs == (runs[1].id,)
    assert table.columns[0].machine == "node-a (AMD EPYC 9654)"
    assert table.columns[1].machine == "node-b (Intel Xeon 8480)"
    assert table.column_of(runs[2].id) == "E1"
    assert table.column_of("nope") is None

    differing = {(row.group, row.fact): row.values for row in table.differences()}
    assert differing == {
        ("machine", "host"): ("node-a", "node-b"),
        ("machine", "CPU model"): ("AMD EPYC 9654", "Intel Xeon 8480"),
        ("frameworks", "d5-plugin-numpy:numpy numpy"): ("2.4.6", "1.23.5"),
        ("source", "git commit"): ("a" * 40, "b" * 40),
    }
    python = table.row("python", "Python")
    assert python is not None and not python.differs and python.values == ("CPython 3.11.7",) * 2

    commands = {c.run: c for c in table.commands}
    assert commands[runs[0].id].command == "d5 bench op gemm"
    assert commands[runs[2].id].command == "d5 bench op conv"
    assert commands[runs[2].id].seeds == "7"
    assert commands[runs[1].id].environment == "E2"

    assert table.mixed_machines
    assert machines_of(runs) == {
        "node-a (AMD EPYC 9654)": (runs[0].id, runs[2].id),
        "node-b (Intel Xeon 8480)": (runs[1].id,),
    }
    warning = machines_warning(runs)
    assert warning is not None
    assert "2 different machines" in warning
    assert "node-a (AMD EPYC 9654): 2 runs" in warning
    assert "node-b (Intel Xeon 8480): 1 run)" in warning


def test_a_fact_only_one_environment_recorded_differs(tmp_path: Path) -> None:
    with_gpu = environment(
        gpus=[{"name": "H100", "memory_total_mib": 81559, "driver_version": "550"}]
    )
    with_gpu["threads"]["KMP_AFFINITY"] = "compact"
    runs = stored_runs(tmp_path, [environment(), with_gpu])
    table = environment_table(runs)
    affinity = table.row("threads", "KMP_AFFINITY")
    assert affinity is not None and affinity.values == ("—", "compact") and affinity.differs
    gpus = table.row("machine", "GPUs")
    assert gpus is not None and gpus.values == ("none", "H100 (81559 MiB, driver 550)")
    assert not table.mixed_machines  # same host and CPU: one machine
    assert machines_warning(runs) is None


def test_html_marks_differences_without_colour_and_escapes_values(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>"
    b = environment(hostname=hostile, argv=["d5", "bench", 'x" onmouseover="alert(1)'])
    runs = stored_runs(tmp_path, [environment(), b])
    html = render_environment(environment_table(runs))
    assert "<script" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'onmouseover="' not in html
    assert "onmouseover=&quot;alert(1)" in html
    differing_rows = re.findall(r'<tr class="differs">(.*?)</tr>', html)
    assert differing_rows, html
    for row in differing_rows:
        assert "≠ differs" in row  # readable without colour
    assert any("host" in row and "node-a" in row for row in differing_rows)
    same = re.findall(r'<tr><th scope="row">Python</th>(.*?)</tr>', html)
    assert same and "≠" not in same[0]
    assert "1 fact differs between the 2 environments" in html


def test_the_summary_counts_and_names_the_differing_facts(tmp_path: Path) -> None:
    runs = stored_runs(
        tmp_path,
        [environment(), environment(memory__total_bytes=2**30, threads__OMP_NUM_THREADS="1")],
    )
    html = render_environment(environment_table(runs))
    summary = re.search(r'<p class="env-summary">(.*?)</p>', html)
    assert summary is not None
    assert "2 facts differ between the 2 environments" in summary.group(1)
    assert "memory" in summary.group(1) and "OMP_NUM_THREADS" in summary.group(1)


def test_html_of_a_single_environment_has_no_difference_marks(tmp_path: Path) -> None:
    runs = stored_runs(tmp_path, [environment(), environment(argv=["d5", "other"])])
    table = environment_table(runs)
    assert len(table.columns) == 1 and not table.differences()
    html = render_environment(table)
    assert "same environment" in html
    assert "differs" not in html and "≠" not in html
    assert "d5 other" in html  # each run's command line is still listed
    assert render_environment(environment_table([])).count("No runs") == 1


def test_a_real_captured_environment_is_described(
    tmp_path: Path, d5_plugin_manager: PluginManager
) -> None:
    env = capture_environment(manager=d5_plugin_manager)
    facts = facts_of(copy.deepcopy(env))
    assert facts[("machine", "host")] == env["hostname"]
    assert facts[("python", "Python")].endswith(env["python"]["version"])
    assert facts[("d5 and plugins", "d5")] == env["d5"]["version"]
    assert all(isinstance(value, str) and "\n" not in value for value in facts.values())
    runs = stored_runs(tmp_path, [env])
    table = environment_table(runs)
    assert len(table.columns) == 1
    assert table.commands[0].command != "—"


@pytest.mark.parametrize("count", [1, 9])
def test_column_headings_list_at_most_eight_runs(tmp_path: Path, count: int) -> None:
    runs = stored_runs(tmp_path, [environment() for _ in range(count)])
    html = render_environment(environment_table(runs))
    heading = re.search(r'<th scope="col" class="env-column".*?</th>', html)
    assert heading is not None
    shown = [run.id for run in runs if run.id in heading.group(0)]
    assert len(shown) == min(count, 8)
    assert ("and 1 more" in heading.group(0)) == (count == 9)
