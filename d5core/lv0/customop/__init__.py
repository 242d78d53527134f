"""C++ custom operators: one source file, compiled at run time into every framework.

A user writes one ``.cpp`` file against the header d5 ships (``include/d5_op.h``):
the operator's declaration, a ``forward`` and a ``backward``. :func:`build` compiles it
with each installed framework's glue (offered by the framework's plugin through the
``d5_custom_op_glue`` hook), caching every build; each build then acts as a level-0
operator of its framework, validated against the numpy build and by central
differences, and benchmarked side by side (``d5 validate op --custom``, ``d5 bench op
--custom``).

    >>> from d5core.lv0.customop import build
    >>> result = build("examples/custom_ops/bias_gelu.cpp")          # doctest: +SKIP
    >>> op = result.builds["torch"].create({"scale": 0.5})          # doctest: +SKIP
"""

from __future__ import annotations

from d5core.lv0.customop.builder import (
    CACHE_ENV,
    BuildResult,
    FrameworkBuild,
    build,
    cache_dir,
    header_path,
    include_dir,
)
from d5core.lv0.customop.glue import BuildRequest, CustomOpGlue, Kernels, available_glues
from d5core.lv0.customop.operator import CustomOperator
from d5core.lv0.customop.spec import AttributeSpec, OpSpec, parse_spec, read_spec

__all__ = [
    "CACHE_ENV",
    "AttributeSpec",
    "BuildRequest",
    "BuildResult",
    "CustomOpGlue",
    "CustomOperator",
    "FrameworkBuild",
    "Kernels",
    "OpSpec",
    "available_glues",
    "build",
    "cache_dir",
    "header_path",
    "include_dir",
    "parse_spec",
    "read_spec",
]
