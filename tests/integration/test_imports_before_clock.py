"""``d5 run`` imports its own code before its clock starts, as a hand-written script does
at its top (issue 30): none of d5's modules is imported while time to accuracy runs.

Importing ``d5core.lv1.runner`` and ``d5core.lv2.samplers`` inside the clock cost 8-12 ms
of every run, 5% of a 0.2 s training. Each case runs in a fresh interpreter, so that
nothing another test imported hides a late import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

_LATE_IMPORTS = """
import sys
from pathlib import Path
from d5core.lv2 import assembly
from d5core.lv2.recipes import load_recipe
from d5core.lv2.trainer import RunClock

seen = {}
real = RunClock.start.__func__

def starting(cls, *args, **kwargs):
    seen["before"] = set(sys.modules)
    return real(cls, *args, **kwargs)

RunClock.start = classmethod(starting)
recipe = load_recipe(Path(sys.argv[1])).with_overrides(["executor=numpy", *sys.argv[2:]])
assembly.Prepared(recipe, 0).trainer.clock.stop()
late = sorted(m for m in set(sys.modules) - seen["before"] if m.startswith("d5core"))
print("assembled:", *late)
"""


@pytest.mark.parametrize(
    "sets",
    [
        [],
        [
            'schedule={name="cosine", lr=0.02}',
            'modifiers=[{name="clip_norm", max_norm=1.0}]',
            'transforms=[{name="normalize", mean=0.5, std=0.25}]',
        ],
    ],
    ids=["recipe", "with-schedule-modifiers-transforms"],
)
def test_no_module_of_d5_is_imported_after_the_run_clock_starts(sets: list[str]) -> None:
    path = Path(__file__).parents[2] / "recipes" / "synthetic-cnn.toml"
    done = subprocess.run([sys.executable, "-c", _LATE_IMPORTS, str(path), *sets],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["assembled:"]
