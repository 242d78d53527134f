"""Level 3 hooks: how ranks are started, found and diagnosed, and which schemes exist.

Communicators and distributed optimizers are selected by name through the
``d5.communication`` and ``d5.optimizers`` entry-point groups. A communication plugin
(MPI, ``torch.distributed``, ...) makes ``d5 run --ranks N`` work by implementing the
hooks below; d5core itself knows no launcher, communicator or scheme by name.

The order of a run on several ranks: the parent asks :func:`d5_distribution_schemes`
and :func:`d5_rank_launcher` while it checks the options, starts the ranks with the
launcher's command and watches them; each rank asks :func:`d5_detect_launcher` for its
rank and size; when a rank ends without an exit status the parent asks
:func:`d5_diagnose_rank_failure` what the launcher's output says about it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from d5core.hookspecs._markers import hookspec, propagates

if TYPE_CHECKING:
    from d5core.levels.distributed import RankLauncher

__all__ = [
    "d5_detect_launcher",
    "d5_diagnose_rank_failure",
    "d5_distribution_schemes",
    "d5_rank_launcher",
]


# -------------------------------------------------------------------------
# Launch
# -------------------------------------------------------------------------


@propagates
@hookspec(firstresult=True)
def d5_rank_launcher(communicator: str | None) -> RankLauncher | None:
    """Offer the launcher that starts ``d5 run --ranks N`` on N ranks.

    Called once by the parent of a run on several ranks (and of ``d5 bench comm``),
    while it checks the options and before anything is stored; the launcher it returns
    starts every rank. The ranks themselves never call it.

    :param communicator: the ``d5.communication`` entry the ranks are to use
        (``d5 run --communicator NAME``, ``d5 bench comm --communicator NAME``), or
        ``None`` when the user named none. A plugin returns a launcher only for a
        communicator its launcher starts, and for ``None`` only when its launcher
        should be the default (d5-plugin-mpi's ``mpiexec`` is); otherwise it returns
        ``None`` so that another plugin can answer. d5 refuses a launcher whose
        ``communicator`` is not the one asked for.

    The launcher is any object with the attributes of
    :class:`~d5core.lv3.launch.RankLauncher`:

    - ``name``: what the launcher is called in messages (``"mpiexec"``);
    - ``communicator``: the ``d5.communication`` entry the ranks it starts use;
    - ``command(ranks, argv)``: the command line that runs ``argv`` (a Python
      interpreter and its arguments) on ``ranks`` ranks;
    - ``hides(line)``: whether a line of the launcher's output is the launcher's own
      noise (a termination banner) rather than a rank's, so that d5 does not echo it.

    :return: the launcher, or ``None`` when the plugin offers none. A plugin that offers
        a launcher which cannot run here (its executable is missing) raises
        :class:`~d5core.errors.UsageError` with one line saying what to install.

    Raising ends the call and reaches the user: the run is refused with that line
    before anything is stored.

    firstresult: stops at the first non-``None`` result.

    .. versionadded:: 1.1
    .. versionchanged:: 1.9
       The ``communicator`` argument.
    """


@hookspec(firstresult=True)
def d5_detect_launcher(environ: Mapping[str, str]) -> Mapping[str, int | str] | None:
    """Tell whether this process was started by a parallel launcher.

    Called when ``d5 run`` starts: a process that runs under a launcher (``mpiexec``,
    ``srun``, or the parent's own launch) is one rank and trains in place instead of
    launching ranks itself. Plugins that know a launcher recognise it here from the
    environment variables it sets.

    :param environ: the process environment.
    :return: ``{"launcher": name, "rank": r, "size": n}`` when this process is one of
        ``n`` ranks started by ``name``, or ``None`` when the plugin does not recognise
        one. The mapping may add ``"communicator"``: the ``d5.communication`` entry the
        ranks should use (without it, the parent's choice or the one installed
        communicator is used).

    firstresult: stops at the first non-``None`` result.

    .. versionadded:: 1.0
    """


@hookspec(firstresult=True)
def d5_diagnose_rank_failure(launcher: str, rank: int, pid: int | None, output: str) -> str | None:
    """Say, in one line, how a rank ended when it left no exit status behind.

    Called by the parent after a job ended, once per rank that wrote no exit status
    (killed by a signal, crashed in native code), until an implementation recognises
    one. Launchers report such deaths in their own words; the plugin that knows the
    launcher reads them here. Without a diagnosis d5 says the rank died without an exit
    status.

    :param launcher: the ``name`` of the :func:`d5_rank_launcher` launcher that ran the
        job; implementations return ``None`` for launchers they do not know.
    :param rank: the rank that left no exit status.
    :param pid: that rank's process id, or ``None`` when it never started.
    :param output: everything the launcher and the ranks wrote to stdout and stderr.
    :return: one line naming the rank and what happened, for example
        ``"rank 1 exited with signal 9"``, or ``None`` when the output says nothing
        about this rank.

    firstresult: stops at the first non-``None`` result.

    .. versionadded:: 1.1
    """


# -------------------------------------------------------------------------
# Distribution schemes
# -------------------------------------------------------------------------


@hookspec
def d5_distribution_schemes() -> Sequence[str] | None:
    """Name the distribution schemes that a plugin's communicators run.

    A distribution scheme is a ``d5.optimizers`` entry that wraps a local optimizer and
    a communicator (a :class:`~d5core.levels.distributed.DistributedOptimizer`). Called
    when ``--scheme`` is checked and when an unknown scheme must be reported with the
    choices, so that d5 lists schemes without importing every optimizer. ``d5 run``
    uses the scheme named ``allreduce`` (plain gradient averaging) unless ``--scheme``
    says otherwise, so a communication plugin should offer one by that name.

    :return: the names of the plugin's schemes, each registered in ``d5.optimizers``
        (names not registered there are ignored), or ``None``.

    Not firstresult: the schemes of every plugin are offered together, each name once.

    .. versionadded:: 1.1
    """
