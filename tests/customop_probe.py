"""A framework of the tests' own for C++ custom operators: the operator's source compiled
alone into a shared library and loaded with ctypes.

It lives in a module of its own, importing nothing of d5, because d5 loads every new
build once in a child process, which imports the glue's module: a test module would
bring pytest and d5's test kit into every such child.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

__all__ = ["ProbeGlue"]


class ProbeGlue:
    """The ``probe`` framework: about a second per build, no framework's headers."""

    name = "probe"

    def available(self) -> bool:
        return True

    def version(self) -> str:
        return "probe 1"

    def build(self, request: Any, workdir: Path) -> Path:
        artifact = workdir / f"d5op_{request.unique}_probe.so"
        request.compile([request.source], artifact, [])
        return artifact

    def load(self, artifact: Path, spec: Any) -> Any:
        return ctypes.CDLL(str(artifact))
