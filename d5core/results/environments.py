"""Which environment each stored run came from, for tables that mix several.

Runs made in different virtualenvs (MXNet's, which needs numpy 1.23, beside the one with
torch and TensorFlow) meet in one results store. A table that puts them side by side
names each distinct environment (``E1``, ``E2``, ... in order of first appearance),
tags every value with its environment, and says what differs between them among the
facts that move timings: numpy and its BLAS, the thread variables, the allocator policy,
the Python build and the framework versions. The comparison is never refused: the
differences are shown, and the reader decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from d5core.results.store import ResultsStore, RunRecord

__all__ = ["EnvironmentLegend", "environment_facts", "environment_legend"]

#: Framework facts (from the plugins' ``d5_environment_info``) shown per environment.
_FRAMEWORK_VERSIONS = ("torch", "tensorflow", "onnxruntime", "mxnet", "mpi4py")


def _section(env: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = env.get(key)
    return value if isinstance(value, Mapping) else {}


def environment_facts(env: Mapping[str, Any]) -> dict[str, str]:
    """The facts of a stored environment that matter when timings are set side by side,
    as ``name -> text`` (a fact that was not recorded is left out)."""
    facts: dict[str, str] = {}
    frameworks = _section(env, "frameworks")
    for plugin, info in frameworks.items():
        if not isinstance(info, Mapping):
            continue
        if plugin.endswith(":core") and info.get("numpy"):
            facts["numpy"] = str(info["numpy"])
        blas = info.get("blas")
        if isinstance(blas, Mapping) and blas.get("name"):
            facts["BLAS"] = " ".join(str(blas[k]) for k in ("name", "version") if blas.get(k))
        for name in _FRAMEWORK_VERSIONS:
            if info.get(name) and isinstance(info[name], str):
                facts[name] = info[name]
    # Only the variables that size thread pools: libraries set others (KMP_*) while they
    # import, so the same environment would otherwise look different before and after.
    threads = {k: v for k, v in _section(env, "threads").items() if "THREADS" in k}
    facts["thread variables"] = (
        ", ".join(f"{k}={v}" for k, v in sorted(threads.items()) if v is not None) or "none set"
    )
    allocator = _section(env, "allocator")
    if allocator.get("policy"):
        facts["allocator"] = str(allocator["policy"])
    python = _section(env, "python")
    if python.get("version"):
        facts["python"] = f"{python.get('implementation', '')} {python['version']}".strip()
    if python.get("executable"):
        facts["interpreter"] = str(python["executable"])
    cpu = _section(env, "cpu")
    if cpu.get("model"):
        facts["cpu"] = f"{cpu['model']} ({cpu.get('usable_cores', '?')} usable cores)"
    return facts


@dataclass
class EnvironmentLegend:
    """The environments of a set of runs: a tag per run, the facts per tag."""

    #: ``run id -> tag``.
    tags: dict[str, str] = field(default_factory=dict)
    #: ``tag -> facts`` (:func:`environment_facts`), in tag order.
    facts: dict[str, dict[str, str]] = field(default_factory=dict)

    def tag_of(self, run_id: str) -> str:
        """The tag of ``run_id``'s environment (``"?"`` for a run not in the legend)."""
        return self.tags.get(run_id, "?")

    def differences(self) -> list[str]:
        """One line per fact whose value is not the same in every environment, such as
        ``"numpy: E1 2.4.6, E2 1.23.5"``; empty for a single environment."""
        if len(self.facts) < 2:
            return []
        names = sorted({name for facts in self.facts.values() for name in facts})
        lines = []
        for name in names:
            values = {tag: facts.get(name, "-") for tag, facts in self.facts.items()}
            if len(set(values.values())) > 1:
                lines.append(f"{name}: " + ", ".join(f"{t} {v}" for t, v in values.items()))
        return lines

    def warning(self) -> str | None:
        """A one-line warning when the runs come from more than one environment."""
        if len(self.facts) < 2:
            return None
        shown = "; ".join(self.differences()) or "their fingerprints differ"
        return (
            f"values from {len(self.facts)} environments ({', '.join(self.facts)}) side by "
            f"side; they differ in {shown}"
        )

    def row_json(self, tags: Iterable[str]) -> dict[str, Any]:
        """What a table row's JSON says of environments: the tags of its values
        (``environments``), every environment of the table with its facts
        (``environment_facts``) and what differs between them
        (``environment_differences``)."""
        return {
            "environments": sorted(set(tags)),
            "environment_facts": self.facts,
            "environment_differences": self.differences(),
        }


def environment_legend(store: ResultsStore, runs: Iterable[RunRecord]) -> EnvironmentLegend:
    """Tag the environments of ``runs`` (``E1`` for the first run's, and so on).

    Two runs share a tag when their :func:`environment_facts` are the same (the full
    fingerprint also holds what a process happened to import, which is no difference
    between environments)."""
    import json

    legend = EnvironmentLegend()
    by_facts: dict[str, str] = {}
    for run in runs:
        facts = environment_facts(store.environment(run.id))
        key = json.dumps(facts, sort_keys=True)
        tag = by_facts.get(key)
        if tag is None:
            tag = f"E{len(by_facts) + 1}"
            by_facts[key] = tag
            legend.facts[tag] = facts
        legend.tags[run.id] = tag
    return legend
