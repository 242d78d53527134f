"""System metrics: peak memory, CPU utilisation and RAPL energy."""

from __future__ import annotations

import json
import mmap
from pathlib import Path

import numpy as np
import pytest

from d5core.bus import TRAIN_EPOCH, TRAIN_STEP, MetricBus
from d5core.hookspecs import hookimpl
from d5core.metrics import CPUUtilization, Energy, PeakMemory
from d5core.metrics.memory import process_peak_rss
from d5core.plugins import PluginManager

MB = 1024 * 1024


# -- peak memory -----------------------------------------------------------


class _FakeAllocator:
    def __init__(self) -> None:
        self.resets: list[str] = []

    @hookimpl
    def d5_memory_peak(self, device):
        return {"fake.alloc": 4096} if device == "cpu" else None

    @hookimpl
    def d5_memory_reset_peak(self, device):
        self.resets.append(device)


class _BrokenAllocator:
    @hookimpl
    def d5_memory_peak(self, device):
        raise RuntimeError("allocator stats are gone")


class _OtherDeviceAllocator:
    @hookimpl
    def d5_memory_peak(self, device):
        return None


def _manager(*plugins: object) -> PluginManager:
    manager = PluginManager(discover_installed=False)
    for i, plugin in enumerate(plugins):
        manager.register(plugin, name=f"inline-{i}")
    return manager


PAGE = mmap.PAGESIZE


def test_peak_memory_grows_after_allocating_50_mb():
    metric = PeakMemory(manager=_manager())
    metric.attach(MetricBus())
    before = metric.result()
    if not before["reset"]:
        pytest.skip(f"the peak cannot be reset here: {before['reset_note']}")
    # fresh pages straight from the kernel, every one written so all of it is resident:
    # memory from malloc could be pages the heap already holds (d5's steady allocator
    # policy keeps freed memory for reuse), which would not raise the peak
    block = mmap.mmap(-1, 50 * MB)
    np.frombuffer(block, dtype=np.uint8)[::PAGE] = 1
    after = metric.result()
    block.close()
    assert after["source"] == "VmHWM"
    assert after["value"] >= before["value"] + 45 * MB
    assert after["unit"] == "B"


def test_peak_memory_reports_allocator_peaks_beside_the_process_peak():
    fake = _FakeAllocator()
    metric = PeakMemory(manager=_manager(fake, _BrokenAllocator(), _OtherDeviceAllocator()))
    metric.attach(MetricBus())
    out = metric.result()
    assert fake.resets == ["cpu"]
    assert out["allocators"] == {"fake.alloc": 4096}
    assert out["value"] > 0
    assert out["allocator_problems"] == [
        "plugin 'inline-1' failed in d5_memory_peak: RuntimeError: allocator stats are gone"
    ]
    json.dumps(out, allow_nan=False)


def test_peak_memory_reads_vmhwm_from_a_status_file(tmp_path: Path):
    (tmp_path / "status").write_text("Name:\tpython\nVmPeak:\t 9000 kB\nVmHWM:\t 1234 kB\n")
    assert process_peak_rss(tmp_path) == (1234 * 1024, "VmHWM")


def test_peak_memory_falls_back_to_getrusage_without_vmhwm(tmp_path: Path):
    (tmp_path / "status").write_text("Name:\tpython\n")
    peak, source = process_peak_rss(tmp_path)
    assert source == "ru_maxrss"
    assert peak > 1 * MB


def test_peak_memory_says_when_the_peak_could_not_be_reset(tmp_path: Path):
    (tmp_path / "status").write_text("VmHWM:\t 2048 kB\n")
    (tmp_path / "clear_refs").mkdir()  # writing to a directory fails like a denied write
    metric = PeakMemory(manager=_manager(), proc_self=tmp_path)
    metric.attach(MetricBus())
    out = metric.result()
    assert out["value"] == 2048 * 1024
    assert out["reset"] is False
    assert out["reset_note"].startswith(f"could not reset the peak through {tmp_path}/clear_refs")


# -- CPU utilisation ---------------------------------------------------------


class _Ticker:
    """A fake clock and CPU-time source that the test advances."""

    def __init__(self) -> None:
        self.ns = 0
        self.cpu = 0.0

    def advance(self, wall_s: float, cpu_s: float) -> None:
        self.ns += int(wall_s * 1e9)
        self.cpu += cpu_s


def test_cpu_utilization_is_cpu_time_over_wall_time_per_core():
    t = _Ticker()
    metric = CPUUtilization(cpu_seconds=lambda: t.cpu, clock_ns=lambda: t.ns, cores=4)
    bus = MetricBus()
    t.advance(10.0, 10.0)  # before the metric is attached: not counted
    metric.attach(bus)
    t.advance(2.0, 3.0)
    bus.publish("run.end")
    t.advance(5.0, 5.0)  # after the run ended: not counted
    out = metric.result()
    assert out["busy_cores"] == pytest.approx(1.5)
    assert out["value"] == pytest.approx(37.5)
    assert (out["cores"], out["wall_seconds"], out["cpu_seconds"]) == (4, 2.0, 3.0)
    assert out["stopped_by"] == "run.end"


def test_cpu_utilization_restarts_at_run_start():
    t = _Ticker()
    metric = CPUUtilization(cpu_seconds=lambda: t.cpu, clock_ns=lambda: t.ns, cores=2)
    bus = MetricBus()
    metric.attach(bus)
    t.advance(100.0, 0.0)  # set-up before the run
    bus.publish("run.start")
    t.advance(1.0, 2.0)
    assert metric.result()["value"] == pytest.approx(100.0)


def test_cpu_utilization_of_this_process_counts_a_busy_loop():
    metric = CPUUtilization()
    metric.attach(MetricBus())
    total = 0
    for i in range(2_000_000):
        total += i
    out = metric.result()
    assert out["cpu_seconds"] > 0
    assert out["cores"] >= 1


def test_cpu_utilization_with_a_failing_source_is_unavailable():
    def broken() -> float:
        raise OSError("no /proc")

    metric = CPUUtilization(cpu_seconds=broken)
    metric.attach(MetricBus())
    assert metric.result()["unavailable"] == (
        "reading the process CPU time raised OSError: no /proc"
    )


# -- energy ------------------------------------------------------------------


def _zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int | None = None) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(f"{label}\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    if max_uj is not None:
        (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zone


def _set(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


def test_energy_sums_packages_and_dram_from_a_powercap_tree(tmp_path: Path):
    pkg0 = _zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000, 10**12)
    core = _zone(tmp_path, "intel-rapl:0:0", "core", 500_000, 10**12)
    dram = _zone(tmp_path, "intel-rapl:0:1", "dram", 0, 10**12)
    pkg1 = _zone(tmp_path, "intel-rapl:1", "package-1", 7, 10**12)
    clock = iter(range(0, 10**12, 10**9))  # each reading one second later
    metric = Energy(root=tmp_path, clock_ns=lambda: next(clock))
    metric.attach(MetricBus())
    _set(pkg0, 3_000_000)  # +2 J
    _set(core, 1_500_000)  # +1 J, part of package-0
    _set(dram, 250_000)  # +0.25 J
    _set(pkg1, 1_000_007)  # +1 J
    out = metric.result()
    assert out["value"] == pytest.approx(3.25)
    assert out["unit"] == "J"
    assert out["counted"] == ["package-0", "dram", "package-1"]
    assert out["zones"]["intel-rapl:0:0"] == {
        "name": "core",
        "joules": 1.0,
        "wraps": 0,
        "counted": False,
    }
    assert out["seconds"] == pytest.approx(1.0)
    assert out["watts"] == pytest.approx(3.25)
    json.dumps(out, allow_nan=False)


def test_energy_corrects_a_counter_wrap_with_max_energy_range(tmp_path: Path):
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", 900_000, 1_000_000)
    metric = Energy(root=tmp_path)
    metric.attach(MetricBus())
    _set(pkg, 100_000)  # wrapped: 100_000 to the top, then 100_000 more
    out = metric.result()
    assert out["value"] == pytest.approx(0.2)
    assert out["zones"]["intel-rapl:0"]["wraps"] == 1


def test_energy_samples_on_epoch_events_so_two_wraps_are_both_counted(tmp_path: Path):
    pkg = _zone(tmp_path, "intel-rapl:0", "package-0", 0, 1_000_000)
    metric = Energy(root=tmp_path, poll_s=0.0)
    bus = MetricBus()
    metric.attach(bus)
    _set(pkg, 800_000)
    bus.publish(f"{TRAIN_EPOCH}.end")
    _set(pkg, 600_000)  # wrapped once: +800_000
    bus.publish(f"{TRAIN_STEP}.end", duration_ns=1)
    _set(pkg, 400_000)  # wrapped again: +800_000
    out = metric.result()
    assert out["value"] == pytest.approx(2.4)
    assert out["zones"]["intel-rapl:0"]["wraps"] == 2


def test_energy_on_a_tree_without_zones_is_unavailable_never_zero(tmp_path: Path):
    metric = Energy(root=tmp_path)
    metric.attach(MetricBus())
    out = metric.result()
    assert "value" not in out
    assert out["unavailable"].startswith(f"no RAPL zones (intel-rapl:*) under {tmp_path}")


def test_energy_on_an_unreadable_counter_is_unavailable_with_the_reason(tmp_path: Path):
    zone = tmp_path / "intel-rapl:0"
    (zone / "energy_uj").mkdir(parents=True)  # unreadable even for root
    metric = Energy(root=tmp_path)
    metric.attach(MetricBus())
    out = metric.result()
    assert "value" not in out
    assert out["unavailable"].startswith(f"{zone}/energy_uj is not readable (IsADirectoryError")


def test_energy_explains_a_permission_error():
    from d5core.metrics.energy import _why_unreadable

    why = _why_unreadable(Path("/x/energy_uj"), PermissionError(13, "Permission denied"))
    assert "readable by root only" in why


def test_energy_on_this_machine_is_a_number_or_a_reason():
    metric = Energy()
    metric.attach(MetricBus())
    out = metric.result()
    assert ("value" in out and out["value"] >= 0) or out["unavailable"]
    assert out.get("value") != 0 or out["zones"]
