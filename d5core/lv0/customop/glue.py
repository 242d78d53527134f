"""The glue of one framework, as the ``d5_custom_op_glue`` hook offers it, and what a
glue's ``build`` is handed.

The core never imports a framework: each framework plugin implements the hook and
returns an object of the :class:`CustomOpGlue` shape. Plugins import d5 through
``d5core.api`` only, so they use what they are given (:class:`BuildRequest`) by its
attributes and never import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from d5core.lv0.customop.compiler import compile_shared
from d5core.lv0.customop.spec import OpSpec
from d5core.plugins import PluginManager, get_plugin_manager

__all__ = ["BuildRequest", "CustomOpGlue", "Kernels", "available_glues"]

#: A prepared call: the only code inside a timed region.
Prepared = Callable[[], object]


@runtime_checkable
class Kernels(Protocol):
    """A loaded custom operator in one framework, on numpy arrays.

    d5 checks the inputs (count, a shared float32 or float64 dtype, C-contiguous) and
    resolves every attribute before calling; the kernels convert to the framework's
    tensors, call the operator through the framework (its autograd for ``backward``)
    and convert back.
    """

    def forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> list[np.ndarray]:
        """The outputs."""

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> list[np.ndarray]:
        """The gradient of every input, through the framework's own differentiation."""

    def prepare_forward(
        self, inputs: Sequence[np.ndarray], attributes: Mapping[str, float | int]
    ) -> Prepared:
        """Convert once; return the call that runs only the framework's forward."""

    def prepare_backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        attributes: Mapping[str, float | int],
    ) -> Prepared:
        """Convert and run the forward once; return the call that runs only the backward."""


@runtime_checkable
class CustomOpGlue(Protocol):
    """Builds and loads C++ custom operators for one framework."""

    name: str

    def available(self) -> bool:
        """Whether the framework can be imported here (without importing it)."""

    def version(self) -> str:
        """The framework's version, part of the cache key."""

    def build(self, request: BuildRequest, workdir: Path) -> Path:
        """Generate and compile the glue in ``workdir``; return the artifact."""

    def load(self, artifact: Path, spec: OpSpec) -> Kernels:
        """Load ``artifact`` into this process; return its kernels."""


@dataclass(frozen=True)
class BuildRequest:
    """What a glue's ``build`` needs: the operator and d5's header, and the compiler."""

    spec: OpSpec
    #: The user's source, as compiled (a copy whose ``#line`` names the user's file).
    source: Path
    #: The folder holding ``d5_op.h``.
    include_dir: Path
    #: An identifier (``[a-z0-9_]``) unique to this source, header and framework.
    unique: str
    framework: str

    def compile(self, sources: Sequence[Path], output: Path, flags: Sequence[str]) -> None:
        """Compile ``sources`` into the shared library ``output`` with ``flags`` (the
        framework's), adding d5's include folder.

        :raises UsageError: with the compiler's first error lines.
        """
        compile_shared(sources, output, [f"-I{self.include_dir}", *flags],
                       what=f"{self.spec.name} for {self.framework}")  # fmt: skip


def available_glues(
    manager: PluginManager | None = None, on_note: Callable[[str], None] | None = None
) -> dict[str, CustomOpGlue]:
    """Every framework's glue, by name, from the ``d5_custom_op_glue`` hook.

    :param on_note: told one line for a glue offered twice or one that is not a glue.
    """
    manager = manager or get_plugin_manager()
    found: dict[str, CustomOpGlue] = {}
    for outcome in manager.call_each("d5_custom_op_glue"):
        glue = outcome.result
        if glue is None:
            continue
        if not isinstance(glue, CustomOpGlue):
            if on_note is not None:
                on_note(f"plugin {outcome.plugin} offers custom operator glue that is not one")
            continue
        if glue.name in found:
            if on_note is not None:
                on_note(f"plugin {outcome.plugin} offers a second {glue.name} glue; left out")
            continue
        found[glue.name] = glue
    return found
