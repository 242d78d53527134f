"""Hooks about a plugin itself: its deep self-check.

These hooks are called by ``d5 list-plugins --check`` and by nothing on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_plugin_check"]


# -------------------------------------------------------------------------
# Self-check
# -------------------------------------------------------------------------


@hookspec
def d5_plugin_check() -> Sequence[str] | None:
    """Check that the plugin can do its work on this machine.

    Listing plugins never imports frameworks; this hook is where a plugin may import
    its framework, query a device or run a tiny computation to prove that it works. It
    is called once per plugin by ``d5 list-plugins --check``, each implementation on its
    own, so that one failing check never hides another.

    :return: a sequence of one-line problems, each naming what is wrong and how to fix
        it (for example ``"torch 2.13.0 cannot see a GPU: install a CUDA build"``); an
        empty sequence or ``None`` when everything works. Raising counts as a problem.

    Not firstresult: every plugin's check runs.

    .. versionadded:: 1.0
    """
