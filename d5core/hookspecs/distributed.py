"""Level 3 hooks: how processes find each other and what crosses between them.

Communicators and distributed optimizers are selected by name through the
``d5.communication`` and ``d5.optimizers`` entry-point groups.
"""

from __future__ import annotations

from collections.abc import Mapping

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_detect_launcher"]


# -------------------------------------------------------------------------
# Launch
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def d5_detect_launcher(environ: Mapping[str, str]) -> Mapping[str, int | str] | None:
    """Tell whether this process was started by a parallel launcher.

    ``d5 run --ranks N`` starts ``mpiexec`` itself unless the process already runs under
    a launcher (``mpiexec``, ``srun``, ...); plugins that know a launcher recognise it here.

    :param environ: the process environment.
    :return: ``{"launcher": name, "rank": r, "size": n}`` when this process is one of
        ``n`` ranks started by ``name``, or ``None`` when the plugin does not recognise one.

    firstresult: stops at the first non-``None`` result.

    .. versionadded:: 1.0
    """
