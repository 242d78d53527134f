"""Is the machine fit to measure? Readings from fake /proc and /sys trees, and a real burner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from d5core.hookspecs import hookimpl
from d5core.measure.fitness import MachineState, assess, snapshot
from d5core.measure.standard_jobs import spin

PID = 4242


def fake_tree(
    root: Path,
    *,
    busy: int = 1000,
    idle: int = 9000,
    steal: int = 0,
    own: int = 100,
    child: int = 0,
    load: str = "0.10 0.20 0.30 1/100 4242",
    governor: str | None = None,
    no_turbo: str | None = None,
    pressure: str | None = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0",
    meminfo: str = "MemTotal: 1000 kB\nMemAvailable: 800 kB\n",
) -> Path:
    """A /proc and /sys tree for two CPUs, the process PID (``own`` ticks) and one child."""
    proc = root / "proc"
    proc.mkdir(parents=True, exist_ok=True)
    user = busy  # all busy time as user time
    (proc / "stat").write_text(
        f"cpu  {user} 0 0 {idle} 0 0 0 {steal} 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n"
        "cpu1 1 0 0 1 0 0 0 0 0 0\nintr 0\n"
    )
    (proc / "loadavg").write_text(load + "\n")
    (proc / "meminfo").write_text(meminfo)
    if pressure is not None:
        (proc / "pressure").mkdir(exist_ok=True)
        (proc / "pressure" / "memory").write_text(pressure + "\nfull avg10=0.00 avg60=0.00\n")
    for pid, ppid, ticks in ((PID, 1, own), (PID + 1, PID, child), (1, 0, 5)):
        (proc / str(pid)).mkdir(exist_ok=True)
        # comm with a space and a parenthesis, as real process names may have
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 10
        (proc / str(pid) / "stat").write_text(f"{pid} (my (odd) name) " + " ".join(fields) + "\n")
    cpu = root / "sys/devices/system/cpu"
    cpu.mkdir(parents=True, exist_ok=True)
    if governor is not None:
        for n in (0, 1):
            (cpu / f"cpu{n}" / "cpufreq").mkdir(parents=True, exist_ok=True)
            (cpu / f"cpu{n}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    if no_turbo is not None:
        (cpu / "intel_pstate").mkdir(exist_ok=True)
        (cpu / "intel_pstate" / "no_turbo").write_text(no_turbo + "\n")
    return root


def take(root: Path, environ: dict[str, str] | None = None) -> MachineState:
    return snapshot(root, pid=PID, environ=environ or {})


def test_snapshot_reads_every_item_from_the_tree(tmp_path) -> None:
    root = fake_tree(tmp_path, own=70, child=30, governor="performance", no_turbo="1")
    s = take(root, {"OMP_NUM_THREADS": "2"})
    assert s.cores == 2
    assert (s.load.one_min, s.load.fifteen_min, s.load.cores) == (0.10, 0.30, 2)
    assert (s.cpu.busy, s.cpu.idle, s.cpu.steal, s.cpu.total) == (1000, 9000, 0, 10000)
    assert s.own_ticks == 100  # the process and its child
    assert s.governors == {"performance": [0, 1]}
    assert s.turbo is False
    assert s.memory_pressure_avg10 == 0.0 and s.memory_available == 0.8
    assert s.threads["OMP_NUM_THREADS"] == "2" and s.threads["MKL_NUM_THREADS"] is None
    assert s.unavailable == {}
    assert MachineState.from_json(s.to_json()) == s


def test_what_cannot_be_read_is_recorded_as_unavailable_with_the_reason(tmp_path) -> None:
    root = fake_tree(tmp_path, pressure=None)
    s = take(root)
    assert s.governors is None and s.turbo is None and s.memory_pressure_avg10 is None
    assert "scaling_governor" in s.unavailable["governors"]
    assert "no_turbo" in s.unavailable["turbo"]
    assert s.unavailable["memory_pressure"].endswith("pressure/memory does not exist")
    empty = snapshot(tmp_path / "nothing", pid=PID, environ={})
    assert empty.cpu is None and empty.load is None and empty.own_ticks is None
    assert set(empty.unavailable) >= {"cpu", "load", "own_ticks", "memory_available"}
    assert assess(empty, empty) == []  # nothing known: nothing guessed


def test_other_processes_using_the_cpu_give_a_warning(tmp_path) -> None:
    before = take(fake_tree(tmp_path / "a", busy=1000, idle=9000, own=100))
    # 200 ticks passed on 2 CPUs; the machine was busy 160 of them, we used 40.
    after = take(fake_tree(tmp_path / "b", busy=1160, idle=9040, own=140, load="2.90 1 1 3/100 1"))
    (warning, *_) = assess(before, after)
    assert warning == (
        "load average 2.90 on 2 cores: other processes used 60% of the CPU while measuring "
        "(more than 10%); timings may include waiting for a core"
    )


def test_a_quiet_machine_gives_no_warning(tmp_path) -> None:
    before = take(fake_tree(tmp_path / "a", busy=1000, idle=9000, own=100, governor="performance"))
    after = take(fake_tree(tmp_path / "b", busy=1105, idle=9095, own=200, governor="performance"))
    assert assess(before, after) == []


def test_without_cpu_times_a_high_load_average_warns(tmp_path) -> None:
    before = take(fake_tree(tmp_path / "a", load="3.00 2 2 3/100 1"))
    after = take(fake_tree(tmp_path / "b", load="3.50 2 2 3/100 1"))
    before = MachineState.from_json({**before.to_json(), "own_ticks": None})
    assert assess(before, after) == [
        "load average 3.50 on 2 cores while measuring (above 1 per core): other work may "
        "have competed for the cores"
    ]


def test_steal_governor_turbo_memory_and_threads_are_checked(tmp_path) -> None:
    kw = {
        "governor": "powersave",
        "no_turbo": "0",
        "meminfo": "MemTotal: 1000 kB\nMemAvailable: 50 kB\n",
        "pressure": "some avg10=7.50 avg60=1.00 avg300=0.00 total=5",
    }
    before = take(fake_tree(tmp_path / "a", busy=1000, idle=9000, steal=0, own=100, **kw))
    after = take(
        fake_tree(tmp_path / "b", busy=1100, idle=9080, steal=20, own=200, **kw),
        {"OPENBLAS_NUM_THREADS": "8"},
    )
    assert assess(before, after) == [
        "the hypervisor stole 10% of the CPU time while measuring (more than 2%): other "
        "virtual machines compete for these cores",
        "CPU frequency governor is 'powersave' on CPUs 0,1: the clock speed follows the "
        "load; 'performance' keeps it steady",
        "turbo boost is on: the clock speed depends on temperature and on how many cores "
        "are busy, so it varies between runs",
        "memory pressure: processes waited for memory 7.5% of the last 10 s (more than 1%)",
        "only 5% of the memory is available (less than 10%): the system may be reclaiming "
        "or swapping",
        "OPENBLAS_NUM_THREADS=8 asks for more threads than the 2 cores: threads will share "
        "cores and wait for each other",
    ]


def test_unlimited_thread_pools_are_flagged_when_other_processes_hold_cores(tmp_path) -> None:
    before = take(fake_tree(tmp_path / "a", busy=1000, idle=9000, own=100))
    after = take(fake_tree(tmp_path / "b", busy=1160, idle=9040, own=140))
    assert any(w.startswith("thread pools are not limited") for w in assess(before, after))
    pinned = take(fake_tree(tmp_path / "b"), {"OMP_NUM_THREADS": "1"})
    after = MachineState.from_json({**after.to_json(), "threads": pinned.threads})
    assert not any(w.startswith("thread pools") for w in assess(before, after))


def test_cpu_time_of_this_process_and_its_children_counts_as_its_own() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    before = snapshot()
    end = time.process_time() + 0.3  # CPU time, not wall time: steady on a busy machine
    while time.process_time() < end:
        pass
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass",
        ],
        check=True,
    )
    after = snapshot()
    assert before.cores == os.cpu_count()
    # 0.3 s here and at least 0.3 s in the child (its start-up comes on top).
    assert after.own_ticks - before.own_ticks >= 0.5 * tick


@pytest.fixture
def burner():
    """A CPU-burning process that is not ours: started through a parent that exits at
    once, so it is no descendant of the test. It stops by itself after 30 s."""
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time\\nend = time.time() + 30\\n"
        "while time.time() < end: pass'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(p.pid)\n"
    )
    pid = int(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    try:
        time.sleep(0.2)
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_cpu_burning_process_beside_a_measurement_yields_a_warning(burner) -> None:
    before = snapshot()
    spin(1.0)()  # the measurement: one core busy for a second
    warnings = assess(before, snapshot())
    assert any("other processes used" in w for w in warnings), warnings


class _Framework:
    """A framework plugin whose framework is imported: it reports its pool."""

    @hookimpl
    def d5_thread_settings(self) -> dict[str, str]:
        return {"fakeframework.threads": "3"}


class _IdleFramework:
    """A framework plugin whose framework was never imported: it reports nothing."""

    @hookimpl
    def d5_thread_settings(self) -> None:
        return None


def test_framework_thread_pools_come_from_the_plugins_that_report_them(
    tmp_path, d5_plugin_manager
) -> None:
    d5_plugin_manager.register(_Framework(), "fw")
    d5_plugin_manager.register(_IdleFramework(), "idle")
    s = take(fake_tree(tmp_path), {"OMP_NUM_THREADS": "2"})
    assert s.threads["fakeframework.threads"] == "3"
    assert s.threads["OMP_NUM_THREADS"] == "2"
    assert MachineState.from_json(s.to_json()) == s
