"""Sum the JUnit reports of every test session into one closing line, and refuse skips
that hide a test from the session that could run it.

Prints ``total: N passed, N failed, N skipped`` and exits 1 when a test failed, when no
test ran at all (an empty run must not pass for a green one), or when a session skipped a
test for want of a module that the session has installed.

That last check reads two files per session in the reports folder: ``<name>.xml``, the
JUnit report, and ``<name>.modules.txt``, the top-level modules importable in the
session's virtualenv (written by ``lane_modules.py``). A skip names a module when its
reason reads like ``pytest.importorskip``'s (``could not import 'X'``) or quotes an
``ImportError`` (``No module named 'X'``). Such a skip is legitimate only where the
session lacks the module's top-level package; where the session has it, the import
failed for another reason (a broken plugin, a missing dependency of it), or the test
sits in a lane whose skip can never be lifted, and either way the test cannot fail where
it runs. Skips for other reasons (no CUDA device, not Linux) are not judged.

Usage: ``python .ci/junit_summary.py [REPORTS_FOLDER]`` (``.reports`` by default).
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Lane",
    "Skip",
    "installed_modules",
    "main",
    "misplaced_skips",
    "read_lane",
    "skipped_modules",
]

#: How a skip reason names the module it is missing.
_MODULE_IN_REASON = re.compile(r"(?:could not import|No module named) '([A-Za-z_][\w.]*)'")


@dataclass(frozen=True)
class Skip:
    """One skipped test of a session's report, with the reason pytest gave."""

    test: str
    reason: str


@dataclass
class Lane:
    """What one session's JUnit report says."""

    name: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    skips: list[Skip] = field(default_factory=list)


def _test_id(case: ET.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    return f"{classname}::{name}" if classname else name


def read_lane(report: Path) -> Lane:
    """Count a JUnit report's tests and collect its skips with their reasons."""
    root = ET.parse(report).getroot()
    lane = Lane(report.stem)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    for suite in suites:
        tests = int(suite.get("tests", 0))
        bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skip = int(suite.get("skipped", 0))
        lane.passed += tests - bad - skip
        lane.failed += bad
        lane.skipped += skip
        for case in suite.iter("testcase"):
            for skipped in case.iter("skipped"):
                # A test skipped in its body has the reason as the message; a module
                # skipped while collecting has "collection skipped" there and the
                # reason in the text.
                reason = f"{skipped.get('message', '')} {skipped.text or ''}".strip()
                lane.skips.append(Skip(_test_id(case), reason))
    return lane


def skipped_modules(reason: str) -> list[str]:
    """The modules a skip reason says were missing, as written in it."""
    return _MODULE_IN_REASON.findall(reason)


def installed_modules(folder: Path, lane: str) -> set[str] | None:
    """The top-level modules a session recorded as importable, or ``None`` when it
    recorded nothing."""
    listing = folder / f"{lane}.modules.txt"
    if not listing.is_file():
        return None
    return {line.strip() for line in listing.read_text().splitlines() if line.strip()}


def misplaced_skips(lane: Lane, installed: set[str] | None) -> list[str]:
    """One line per skip of ``lane`` for a module the lane has installed.

    Without a record of the lane's modules (``installed`` is ``None``), a skip that names
    a module cannot be judged, and that is reported too.
    """
    problems = []
    for skip in lane.skips:
        modules = skipped_modules(skip.reason)
        if not modules:
            continue
        if installed is None:
            problems.append(
                f"{lane.name}: {skip.test} skipped for want of {modules[0]!r}, and the "
                f"session recorded no {lane.name}.modules.txt to tell whether it has it; "
                f"run .ci/lane_modules.py in the session"
            )
            continue
        present = [m for m in modules if m.split(".")[0] in installed]
        if present:
            module, package = present[0], present[0].split(".")[0]
            problems.append(
                f"{lane.name}: {skip.test} skipped for want of {module!r}, but this session "
                f"has {package!r} installed; import it plainly, or move the test to a "
                f"session that lacks {package!r} on purpose"
            )
    return problems


def main(folder: str) -> int:
    reports = Path(folder)
    passed = failed = skipped = 0
    problems: list[str] = []
    for report in sorted(reports.glob("*.xml")):
        lane = read_lane(report)
        print(f"{lane.name}: {lane.passed} passed, {lane.failed} failed, {lane.skipped} skipped")
        passed, failed, skipped = passed + lane.passed, failed + lane.failed, skipped + lane.skipped
        problems += misplaced_skips(lane, installed_modules(reports, lane.name))
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} skip(s) counted as failures: the session has the module")
    return 1 if failed or not passed or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".reports"))
