"""Find d5's entry points from installed metadata, without importing any plugin."""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from d5core.plugins.groups import GROUPS
from d5core.plugins.records import PluginRecord, listing_order

__all__ = ["Catalog", "discover", "installed_versions", "unmet_requirement"]


@dataclass
class Catalog:
    """Every d5 entry point found in the installed distributions."""

    records: list[PluginRecord]
    #: Distribution name -> its metadata, for requirement checks.
    distributions: dict[str, md.Distribution]
    #: The entry point behind each record, keyed by ``id(record)``.
    entry_points: dict[int, md.EntryPoint]


def discover(groups: Iterable[str] = GROUPS) -> Catalog:
    """Read the entry points of ``groups`` from every installed distribution.

    Only metadata is read. A distribution found twice on ``sys.path`` (an editable
    install shadowing a regular one) is reported once, from the first path entry, which
    is the copy Python would import.
    """
    wanted = set(groups)
    records: list[PluginRecord] = []
    dists: dict[str, md.Distribution] = {}
    eps: dict[int, md.EntryPoint] = {}
    for dist in md.distributions():
        raw_name = dist.metadata["Name"]
        if not raw_name:
            continue
        key = canonicalize_name(raw_name)
        if key in dists:
            continue
        dists[key] = dist
        for ep in dist.entry_points:
            if ep.group in wanted:
                rec = PluginRecord(
                    name=ep.name,
                    group=ep.group,
                    distribution=raw_name,
                    version=dist.version,
                    value=ep.value,
                )
                records.append(rec)
                eps[id(rec)] = ep
    records.sort(key=listing_order)
    return Catalog(records=records, distributions=dists, entry_points=eps)


def _own_requirements(dist: md.Distribution) -> Iterator[Requirement]:
    """``dist``'s requirements that apply here; those behind an extra (``; extra ==
    "..."``) are optional and left out, and so are lines that do not parse."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
            yield req


def unmet_requirement(dist: md.Distribution) -> str | None:
    """Return a one-line problem if one of ``dist``'s own requirements is not installed.

    Optional requirements are not checked. The check reads metadata only, so a framework
    is never imported to find out.
    """
    for req in _own_requirements(dist):
        try:
            found = md.version(req.name)
        except md.PackageNotFoundError:
            return f"needs {req}, which is not installed: pip install '{req}'"
        if req.specifier and not req.specifier.contains(found, prereleases=True):
            return f"needs {req} but {req.name} {found} is installed: pip install '{req}'"
    return None


def installed_versions(distribution: str) -> dict[str, str]:
    """The installed versions of ``distribution`` and of its own (non-optional)
    requirements, by name: what a result produced through that plugin depends on.

    Read from metadata only; a requirement that is not installed is left out.
    """
    try:
        dist = md.distribution(distribution)
    except md.PackageNotFoundError:
        return {}
    versions = {distribution: dist.version}
    for req in _own_requirements(dist):
        try:
            versions[req.name] = md.version(req.name)
        except md.PackageNotFoundError:
            continue
    return dict(sorted(versions.items()))
