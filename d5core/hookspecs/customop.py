"""Level 0 hooks for C++ custom operators: the glue that builds one into a framework.

A user writes one C++ file against the header d5 ships (``d5_op.h``); ``d5 op build``
compiles it into every framework whose plugin implements :func:`d5_custom_op_glue`, so
that the core knows no framework.
"""

from __future__ import annotations

from typing import Any

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_custom_op_glue"]


@hookspec
def d5_custom_op_glue() -> Any:
    """Offer the glue that builds C++ custom operators into one framework.

    The glue is an object with (see :class:`d5core.lv0.customop.glue.CustomOpGlue`):

    - ``name``: the framework's name (``"torch"``), also the backend name under which
      ``d5 validate op --custom`` and ``d5 bench op --custom`` report it;
    - ``available() -> bool``: whether the framework can be imported here (without
      importing it); a glue that is not available is skipped with a one-line note;
    - ``version() -> str``: the framework's version, part of the cache key (cheap: read
      the distribution's metadata, do not import the framework);
    - ``build(request, workdir) -> Path``: generate the glue source in ``workdir``,
      compile it with ``request.compile(sources, output, flags)`` (which raises d5's
      ``UsageError`` with the compiler's first error lines) and return the artifact;
      ``request`` carries ``spec`` (the operator's declaration), ``source`` (the user's
      file, to ``#include``), ``include_dir`` (d5's header) and ``unique`` (an
      identifier unique to this source and framework);
    - ``load(artifact, spec) -> kernels``: load the built artifact into this process and
      return its kernels (:class:`d5core.lv0.customop.glue.Kernels`): ``forward``,
      ``backward`` (through the framework's own differentiation), ``prepare_forward``
      and ``prepare_backward`` on numpy arrays and resolved attributes. d5 wraps them
      into a level-0 ``Operator`` and checks the inputs before calling.

    :return: the glue object, or ``None``.

    Not firstresult: every plugin may offer glue for its framework; a second glue of
    the same ``name`` is left out with a warning.

    .. versionadded:: 1.3
    """
