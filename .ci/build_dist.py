"""Build the wheels of d5core, of every plugin under ``plugins/`` and of the native kernels
(``kernels/``) into one folder.

Each project (the repository root, whose ``pyproject.toml`` is d5core's, and each
``plugins/*/`` with a ``pyproject.toml``) is built with ``python -m pip wheel --no-deps``:
pip is always there, and it builds in an isolated environment with the build backend
the project declares (hatchling, from the package registry). Dependencies are not
built: they come from the registry when the wheels are installed.

Prints one line per wheel written (its path). Wheels already in the folder are
replaced by the new build of the same name; others are left alone.

Usage: ``python .ci/build_dist.py [--out dist/] [DISTRIBUTION ...]``, where the optional
names (``d5core``, ``d5-plugin-numpy``, ...) restrict the build to those projects.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ROOT", "build_wheels", "main", "projects"]

ROOT = Path(__file__).resolve().parents[1]
#: The distribution the repository root builds.
CORE = "d5core"
#: The native kernels' distribution and its folder (built with scikit-build-core, C++).
KERNELS, KERNELS_DIR = "d5-kernels", "kernels"


def projects(root: Path = ROOT) -> dict[str, Path]:
    """Every project that builds a wheel, by distribution name: d5core first, then the
    plugins in name order (a plugin's distribution is named like its folder), then
    d5-kernels."""
    found = {CORE: root}
    for pyproject in sorted((root / "plugins").glob("*/pyproject.toml")):
        found[pyproject.parent.name] = pyproject.parent
    if (root / KERNELS_DIR / "pyproject.toml").is_file():
        found[KERNELS] = root / KERNELS_DIR
    return found


def build_wheels(sources: list[Path], out: Path) -> list[Path]:
    """Build one wheel per project in ``sources`` with pip (no dependencies) and move
    them into ``out``; return the wheels' paths there, sorted.

    :raises subprocess.CalledProcessError: when pip fails; its output names the project.
    """
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="d5-wheels-") as scratch:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                "--disable-pip-version-check", "--wheel-dir", scratch,
                *map(str, sources),
            ],
            check=True,
        )  # fmt: skip
        built = sorted(Path(scratch).glob("*.whl"))
        if len(built) != len(sources):
            names = ", ".join(p.name for p in built) or "none"
            raise RuntimeError(
                f"pip built {len(built)} wheels for {len(sources)} projects: {names}"
            )
        wheels = []
        for wheel in built:
            target = out / wheel.name
            target.unlink(missing_ok=True)
            shutil.move(str(wheel), target)
            wheels.append(target)
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "dist", help="folder for the wheels (dist/)"
    )
    parser.add_argument("names", nargs="*", metavar="DISTRIBUTION", help="build only these")
    args = parser.parse_args(argv)
    available = projects()
    unknown = [name for name in args.names if name not in available]
    if unknown:
        known = ", ".join(available)
        parser.error(f"no project builds {', '.join(unknown)} (known: {known})")
    chosen = [available[name] for name in (args.names or available)]
    try:
        wheels = build_wheels(chosen, args.out)
    except (subprocess.CalledProcessError, RuntimeError) as exc:
        print(f"build_dist: {exc}", file=sys.stderr)
        return 1
    for wheel in wheels:
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
