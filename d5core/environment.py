"""What a run ran on: software, hardware and settings, recorded with every result.

:func:`capture_environment` gathers what ``measurement.md`` asks to be kept beside each
number (d5 and plugin versions, framework facts, Python, OS and kernel, CPU model, cores
and flags, memory, thread settings, the allocator policy, GPUs, hostname, command line,
seeds, recipe hash, git commit, time). Every section is gathered on its own: a failure
becomes an ``{"error": ...}`` entry in that section and never stops the run.

:func:`environment_fingerprint` hashes the part that decides whether two results may be
compared (CPU, cores, OS/kernel, Python, package and framework versions, thread
settings, allocator policy, GPU models); :func:`environment_differences` says what differs.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.allocator import allocator_settings
from d5core.errors import one_line

if TYPE_CHECKING:
    from d5core.plugins import PluginManager

__all__ = [
    "AFFINITY_PREFIXES",
    "RUN_SPECIFIC_KEYS",
    "THREAD_VARS",
    "capture_environment",
    "comparable_subset",
    "environment_differences",
    "environment_fingerprint",
    "read_cpuinfo",
]

#: Environment variables that set the size of common thread pools.
THREAD_VARS: tuple[str, ...] = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
#: Prefixes of further variables that place or bind threads (``KMP_AFFINITY``,
#: ``GOMP_CPU_AFFINITY``, ``OMP_PROC_BIND``, ``OMP_PLACES``, ...); recorded when set.
AFFINITY_PREFIXES: tuple[str, ...] = ("KMP_", "GOMP_", "OMP_")
#: Keys that change from run to run on the same machine; the store keeps them with the
#: run, and the rest once per distinct environment.
RUN_SPECIFIC_KEYS: tuple[str, ...] = ("argv", "seeds", "recipe_hash", "timestamp")

_SUBPROCESS_TIMEOUT_S = 3.0


def _section(fn: Callable[[], Any]) -> Any:
    """``fn()``, or ``{"error": ...}`` when it raises: capture never fails."""
    try:
        return fn()
    except Exception as exc:
        return {"error": one_line(exc)}


def _json_safe(value: Any) -> Any:
    """``value`` reduced to plain JSON types (unknown objects become strings)."""
    return json.loads(json.dumps(value, default=str))


def _run(cmd: Sequence[str], cwd: str | None = None) -> str | None:
    """The standard output of ``cmd``, or ``None`` if it is missing, fails or hangs."""
    try:
        done = subprocess.run(
            list(cmd),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_SUBPROCESS_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


# -- software ------------------------------------------------------------


def _plugins(manager: PluginManager) -> tuple[list[dict[str, Any]], dict[str, str]]:
    plugins = [
        {
            "name": r.name,
            "group": r.group,
            "distribution": r.distribution,
            "version": r.version,
            "status": r.status.value,
        }
        for r in manager.records
    ]
    packages = {"d5core": __version__}
    for r in manager.records:
        packages.setdefault(r.distribution, r.version)
    return plugins, dict(sorted(packages.items()))


def _frameworks(manager: PluginManager) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for out in manager.call_each("d5_environment_info"):
        if out.error is not None:
            facts[out.plugin] = {"error": one_line(out.error)}
        elif out.result is None:
            continue
        elif isinstance(out.result, Mapping):
            facts[out.plugin] = _json_safe(dict(out.result))
        else:
            facts[out.plugin] = {
                "error": f"d5_environment_info returned {type(out.result).__name__}, not a mapping"
            }
    return dict(sorted(facts.items()))


def _python() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "compiler": platform.python_compiler(),
    }


def _git(cwd: str) -> dict[str, Any] | None:
    commit = _run(["git", "rev-parse", "HEAD"], cwd=cwd)
    if not commit:
        return None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd)
    return {
        "commit": commit.strip(),
        "dirty": None if status is None else bool(status.strip()),
        "directory": cwd,
    }


# -- hardware ------------------------------------------------------------


def read_cpuinfo() -> dict[str, str]:
    """``/proc/cpuinfo`` fields (first occurrence of each), or ``{}`` where there is none."""
    path = Path("/proc/cpuinfo")
    if not path.exists():
        return {}
    fields: dict[str, str] = {}
    for line in path.read_text(errors="replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    return fields


def _cpu() -> dict[str, Any]:
    import psutil

    info = read_cpuinfo()
    model = (
        info.get("model name")
        or info.get("hardware")
        or info.get("cpu model")
        or platform.processor()
        or platform.machine()
    )
    flags = info.get("flags") or info.get("features") or ""
    usable: int | None = None
    if hasattr(os, "sched_getaffinity"):
        usable = len(os.sched_getaffinity(0))
    max_mhz: float | None = None
    try:
        freq = psutil.cpu_freq()
        max_mhz = float(freq.max) if freq is not None and freq.max else None
    except Exception:
        max_mhz = None
    return {
        "model": model,
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cores": usable,
        "max_mhz": max_mhz,
        "flags": sorted(set(flags.split())),
    }


def _memory() -> dict[str, Any]:
    import psutil

    return {"total_bytes": int(psutil.virtual_memory().total)}


def _os() -> dict[str, Any]:
    u = platform.uname()
    return {
        "system": u.system,
        "release": u.release,
        "version": u.version,
        "machine": u.machine,
        "platform": platform.platform(),
    }


def _threads(environ: Mapping[str, str]) -> dict[str, str | None]:
    threads: dict[str, str | None] = {var: environ.get(var) for var in THREAD_VARS}
    for key in sorted(environ):
        if key.startswith(AFFINITY_PREFIXES) and key not in threads:
            threads[key] = environ[key]
    return threads


_GPU_FIELDS = ("index", "name", "driver_version", "memory.total", "uuid")


def _gpus() -> list[dict[str, Any]]:
    """GPUs as ``nvidia-smi`` reports them; an empty list without it or if it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    out = _run([exe, f"--query-gpu={','.join(_GPU_FIELDS)}", "--format=csv,noheader,nounits"])
    gpus: list[dict[str, Any]] = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(_GPU_FIELDS):
            continue
        index, name, driver, memory, uuid = parts
        gpus.append(
            {
                "index": int(index) if index.isdigit() else index,
                "name": name,
                "driver_version": driver,
                "memory_total_mib": int(memory) if memory.isdigit() else None,
                "uuid": uuid,
            }
        )
    return gpus


# -- the whole -------------------------------------------------------------


def capture_environment(
    *,
    argv: Sequence[str] | None = None,
    seeds: Mapping[str, Any] | int | None = None,
    recipe_hash: str | None = None,
    manager: PluginManager | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Record the environment of the current process as a JSON-serialisable dict.

    :param argv: the command line; ``sys.argv`` by default.
    :param seeds: the seed (or named seeds) the run uses.
    :param recipe_hash: the content hash of the recipe the run follows.
    :param manager: the plugin manager whose records and ``d5_environment_info`` hooks
        are read; the process-wide one by default. Listing plugins reads metadata only;
        each plugin's hook may import its framework.
    :param environ: the process environment to read thread settings from;
        ``os.environ`` by default.
    :return: a dict with the keys ``d5``, ``plugins``, ``packages``, ``frameworks``,
        ``python``, ``os``, ``cpu``, ``memory``, ``threads``, ``allocator``
        (:func:`~d5core.allocator.allocator_settings`), ``gpus``, ``hostname``,
        ``git``, ``argv``, ``seeds``, ``recipe_hash`` and ``timestamp`` (UTC, ISO 8601).
    """
    if manager is None:
        from d5core.plugins import get_plugin_manager

        manager = get_plugin_manager()
    env_vars = os.environ if environ is None else environ
    plugin_info = _section(lambda: _plugins(manager))
    if isinstance(plugin_info, tuple):
        plugins, packages = plugin_info
    else:
        plugins, packages = plugin_info, {"d5core": __version__}
    return {
        "d5": {"version": __version__, "plugin_api": PLUGIN_API_VERSION},
        "plugins": plugins,
        "packages": packages,
        "frameworks": _section(lambda: _frameworks(manager)),
        "python": _section(_python),
        "os": _section(_os),
        "cpu": _section(_cpu),
        "memory": _section(_memory),
        "threads": _section(lambda: _threads(env_vars)),
        "allocator": _section(allocator_settings),
        "gpus": _section(_gpus),
        "hostname": _section(socket.gethostname),
        "git": _section(lambda: _git(os.getcwd())),
        "argv": list(sys.argv if argv is None else argv),
        "seeds": _json_safe(seeds),
        "recipe_hash": recipe_hash,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
    }


def _get(env: Mapping[str, Any], section: str) -> Mapping[str, Any]:
    value = env.get(section)
    return value if isinstance(value, Mapping) else {}


def comparable_subset(env: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of ``env`` that decide whether two results may be compared.

    Hostname, command line, seeds, git commit and time are left out: two runs of
    different code on the same machine and software are meant to be compared.
    """
    cpu, os_, py = _get(env, "cpu"), _get(env, "os"), _get(env, "python")
    frameworks = {
        name: ("<error>" if isinstance(facts, Mapping) and set(facts) == {"error"} else facts)
        for name, facts in _get(env, "frameworks").items()
    }
    gpus = env.get("gpus")
    return {
        "cpu_model": cpu.get("model"),
        "logical_cores": cpu.get("logical_cores"),
        "physical_cores": cpu.get("physical_cores"),
        "usable_cores": cpu.get("usable_cores"),
        "os": {k: os_.get(k) for k in ("system", "release", "machine")},
        "python": {k: py.get(k) for k in ("version", "implementation")},
        "packages": dict(_get(env, "packages")),
        "frameworks": frameworks,
        "threads": dict(_get(env, "threads")),
        "allocator": {k: v for k, v in _get(env, "allocator").items() if k != "applied"},
        "gpus": [g.get("name") for g in gpus if isinstance(g, Mapping)]
        if isinstance(gpus, list)
        else [],
    }


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def environment_fingerprint(env: Mapping[str, Any]) -> str:
    """A short hash of :func:`comparable_subset`: equal for comparable environments."""
    return hashlib.sha256(_canonical(comparable_subset(env)).encode()).hexdigest()[:16]


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def environment_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two environments' comparable facts, one line each.

    Lines look like ``"packages.torch: '2.12.0' vs '2.13.0'"``; a key missing on one side
    shows as ``None``. Empty when the fingerprints agree.
    """
    fa: dict[str, Any] = {}
    fb: dict[str, Any] = {}
    _flatten(comparable_subset(a), "", fa)
    _flatten(comparable_subset(b), "", fb)
    return [
        f"{key}: {fa.get(key)!r} vs {fb.get(key)!r}"
        for key in sorted(set(fa) | set(fb))
        if _canonical(fa.get(key)) != _canonical(fb.get(key))
    ]
