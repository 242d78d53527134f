"""Sum the JUnit reports of every test session into one closing line.

Prints ``total: N passed, N failed, N skipped`` and exits 1 when a test failed or when no
test ran at all (an empty run must not pass for a green one).
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(folder: str) -> int:
    passed = failed = skipped = 0
    for report in sorted(Path(folder).glob("*.xml")):
        root = ET.parse(report).getroot()
        suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
        for suite in suites:
            tests = int(suite.get("tests", 0))
            bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skip = int(suite.get("skipped", 0))
            print(f"{report.stem}: {tests - bad - skip} passed, {bad} failed, {skip} skipped")
            passed, failed, skipped = passed + tests - bad - skip, failed + bad, skipped + skip
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".reports"))
