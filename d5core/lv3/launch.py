"""``d5 run --ranks N``: launching a training run on several ranks and running one rank.

Two halves:

- the **parent** (:func:`launch`) re-launches ``d5 run`` on N ranks with the launcher a
  communication plugin offers (:func:`rank_launcher`) and watches the job: each rank
  writes a heartbeat file every second and, when it ends, its exit status; the whole job
  is killed when a rank stops responding or fails while the others still run, and one
  line names the rank;
- a **rank** (:class:`RankContext`) runs in place under a launcher: the rank and size
  come from the launcher (``d5_detect_launcher``), the communicator is the
  ``d5.communication`` entry the launcher names, the recipe's sampler becomes this rank's
  partition and the optimizer is wrapped by a distribution scheme.

d5core knows no launcher, communicator or scheme by name: each comes through the level 3
hooks (:mod:`d5core.hookspecs.distributed`), all called here.

The ranks never outlive the parent. SIGINT, SIGTERM and SIGHUP to the parent
(:class:`StopSignals`) stop the job cleanly: the launcher and every rank are killed
before the parent ends with :class:`RunInterrupted`. When the parent dies without a
chance to clean up (SIGKILL), the launcher gets SIGTERM from the kernel
(``PR_SET_PDEATHSIG`` on Linux) and tears the job down, and every rank watches the
parent's process (:data:`PARENT_PID_ENV`) and exits within a second of its end.

Test hook: with ``D5_TEST_KILL_RANK=R`` and ``D5_TEST_KILL_AFTER_STEPS=K`` in the
environment, rank ``R`` sends itself ``SIGKILL`` after its ``K``-th training step (used
by the tests of the watchdog; never set it otherwise).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, NamedTuple

import numpy as np
import psutil

from d5core.errors import EXIT_FAILED, D5Error, UsageError
from d5core.levels.distributed import DistributedOptimizer, RankLauncher
from d5core.lv3.single_process import SingleProcessCommunicator
from d5core.worker_protocol import die_with_parent

__all__ = [
    "COMMUNICATOR_ENV",
    "DEFAULT_SCHEME",
    "DIR_ENV",
    "KILL_AFTER_ENV",
    "KILL_RANK_ENV",
    "NO_COMMUNICATION_PLUGIN",
    "PARENT_ENV",
    "PARENT_PID_ENV",
    "RANKS_PER_CPU",
    "RANK_MEMORY_BYTES",
    "RANK_METRICS",
    "RUN_ID_ENV",
    "LaunchOutcome",
    "RankContext",
    "RankFailed",
    "RankLauncher",
    "RunInterrupted",
    "StopSignals",
    "check_communicator_name",
    "check_rank_count",
    "check_rank_options",
    "chosen_communicator",
    "detect_launcher",
    "distribution_schemes",
    "installed_communicators",
    "launch",
    "parse_scheme_options",
    "partitioned_sampler",
    "rank_launcher",
    "scheme_class",
]

#: Set (to ``1``) by the parent in the environment of the ranks it launches.
PARENT_ENV = "D5_DISTRIBUTED_PARENT"
#: The directory where ranks write heartbeats, exit statuses and the run id.
DIR_ENV = "D5_DISTRIBUTED_DIR"
#: The run the parent began, which rank 0 fills in.
RUN_ID_ENV = "D5_DISTRIBUTED_RUN_ID"
#: ``PID@HOST`` of the parent: the ranks on that host exit when that process ends.
PARENT_PID_ENV = "D5_DISTRIBUTED_PARENT_PID"
#: The ``d5.communication`` entry the ranks use: set by the parent from its launcher;
#: under an outside launcher, set it to choose among several installed communicators.
COMMUNICATOR_ENV = "D5_DISTRIBUTED_COMMUNICATOR"
#: Test hook: the rank that kills itself ...
KILL_RANK_ENV = "D5_TEST_KILL_RANK"
#: ... after this many training steps.
KILL_AFTER_ENV = "D5_TEST_KILL_AFTER_STEPS"

#: The scheme used when ``--scheme`` is not given: decentralized gradient averaging.
#: Communication plugins offer a scheme by this name (``d5_distribution_schemes``).
DEFAULT_SCHEME = "allreduce"
#: The one line when no installed plugin can run ranks.
NO_COMMUNICATION_PLUGIN = (
    "training on several ranks needs a communication plugin (one that implements the "
    "d5_rank_launcher hook and registers a d5.communication entry), and none is "
    "installed; docs/distributed.md says which to install"
)
#: The per-rank metrics gathered to rank 0, in order.
RANK_METRICS: tuple[str, ...] = (
    "rank_steps",
    "rank_samples",
    "rank_bytes_sent",
    "rank_bytes_received",
    "rank_comm_time",
    "rank_final_loss",
    "rank_wall_time",
)

_HEARTBEAT_S = 1.0
_POLL_S = 0.2
#: Extra time a rank has to write its first heartbeat (interpreter and imports).
_START_GRACE_S = 60.0
#: How long a job may go on after a rank reported a non-zero exit.
_EXIT_GRACE_S = 2.0
#: How often a rank checks that its parent is still there.
_PARENT_POLL_S = 0.5
#: Name prefix of the parent's watch directories (in the temporary directory).
_DIR_PREFIX = "d5-ranks-"


class RankFailed(D5Error):
    """A rank of a distributed run died, hung or failed; the message names it."""

    exit_code = EXIT_FAILED


class RunInterrupted(D5Error):
    """The parent of a distributed run was asked to stop (Ctrl-C, SIGTERM, SIGHUP) and
    stopped the job; exits ``128 + signal`` like a process that signal ended."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


class StopSignals:
    """While active (``with``, in the main thread), SIGINT, SIGTERM and SIGHUP are noted
    in :attr:`received` instead of ending the process, so the parent can stop its job
    and record the run before it ends. Signals the process ignores (``nohup``) stay
    ignored; outside the main thread nothing is installed."""

    NAMES: tuple[str, ...] = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        #: The first stop signal received, or ``None``.
        self.received: int | None = None
        self._old: dict[int, Any] = {}

    @property
    def name(self) -> str:
        """The received signal's name (``SIGINT``), or ``""``."""
        return "" if self.received is None else signal.Signals(self.received).name

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in self.NAMES:
            sig = getattr(signal, name, None)
            if sig is None or signal.getsignal(sig) is signal.SIG_IGN:
                continue
            self._old[sig] = signal.signal(sig, self._note)
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


# -- the communication plugin's hooks -------------------------------------------------


def chosen_communicator(name: str | None = None) -> str | None:
    """The communicator the ranks launched now are to use: ``name`` (``--communicator``),
    else :data:`COMMUNICATOR_ENV` of this process, else ``None`` (the default
    launcher's)."""
    return name or os.environ.get(COMMUNICATOR_ENV) or None


def installed_communicators() -> list[str]:
    """The installed ``d5.communication`` entries, sorted."""
    from d5core.plugins import get_plugin_manager

    return sorted(get_plugin_manager().names("d5.communication"))


def check_communicator_name(name: str, option: str = "--communicator") -> str:
    """``name`` when it is an installed ``d5.communication`` entry.

    :raises UsageError: one line naming ``option`` and the installed communicators.
    """
    installed = installed_communicators()
    if name not in installed:
        raise UsageError(
            f"{option} {name!r} is not an installed communicator; choose one of "
            f"{', '.join(installed) or 'none (install a communication plugin)'}"
        )
    return name


def rank_launcher(communicator: str | None = None) -> RankLauncher:
    """The launcher of the first plugin that offers one (``d5_rank_launcher``) for
    ``communicator`` (``None``: the default launcher).

    :raises UsageError: one line, when no plugin offers a launcher (for that
        communicator), when the launcher offered starts another communicator, or from
        the plugin when its launcher cannot run here.
    """
    from d5core.plugins import get_plugin_manager

    launcher = get_plugin_manager().hook.d5_rank_launcher(communicator=communicator)
    if launcher is None and communicator is None:
        installed = installed_communicators()
        if len(installed) == 1:  # no default launcher, but one communicator: its own
            launcher = get_plugin_manager().hook.d5_rank_launcher(communicator=installed[0])
        if launcher is None:
            raise UsageError(NO_COMMUNICATION_PLUGIN)
        return launcher  # type: ignore[no-any-return]
    if launcher is None:
        raise UsageError(
            f"no installed plugin launches ranks for the {communicator!r} communicator; "
            "install the plugin that provides it, or choose another with --communicator"
        )
    if communicator is not None and launcher.communicator != communicator:
        raise UsageError(
            f"the {launcher.name!r} launcher was offered for the {communicator!r} communicator "
            f"but starts ranks with {launcher.communicator!r}; update the plugin that offers it"
        )
    return launcher  # type: ignore[no-any-return]


def detect_launcher(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"launcher", "rank", "size", "communicator"}`` when a launcher started this
    process (``d5_detect_launcher``); ``communicator`` is ``None`` when it names none."""
    from d5core.plugins import get_plugin_manager

    env = dict(os.environ if environ is None else environ)
    found = get_plugin_manager().hook.d5_detect_launcher(environ=env)
    if not found:
        return None
    return {"launcher": found.get("launcher"), "rank": int(found["rank"]),
            "size": int(found["size"]), "communicator": found.get("communicator")}  # fmt: skip


def distribution_schemes() -> list[str]:
    """The installed distribution schemes (``d5_distribution_schemes``), each once, in
    the order the plugins give them; names not in ``d5.optimizers`` are left out."""
    from d5core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    installed = set(manager.names("d5.optimizers"))
    found: list[str] = []
    for names in manager.hook.d5_distribution_schemes():
        for name in names or ():
            if name in installed and name not in found:
                found.append(name)
    return found


def _diagnosis(launcher: str, rank: int, pid: int | None, output: str) -> str | None:
    """What the launcher's output says about ``rank`` (``d5_diagnose_rank_failure``)."""
    from d5core.plugins import get_plugin_manager

    line = get_plugin_manager().hook.d5_diagnose_rank_failure(
        launcher=launcher, rank=rank, pid=pid, output=output
    )
    return " ".join(str(line).split()) if line else None


# -- schemes, options, samplers -----------------------------------------------------


def scheme_class(name: str) -> Any:
    """The distribution scheme ``name``: a ``d5.optimizers`` entry wrapping a local one.

    Any :class:`~d5core.levels.distributed.DistributedOptimizer` entry is accepted;
    the choices in messages are those of :func:`distribution_schemes`.

    :raises UsageError: one line, for a name that is not a distribution scheme, or
        :data:`NO_COMMUNICATION_PLUGIN` when no plugin offers schemes.
    """
    from d5core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    cls = manager.load("d5.optimizers", name) if name in manager.names("d5.optimizers") else None
    if isinstance(cls, type) and issubclass(cls, DistributedOptimizer):
        return cls
    known = distribution_schemes()
    if not known:
        raise UsageError(NO_COMMUNICATION_PLUGIN)
    if cls is None:
        raise UsageError(f"no distribution scheme named {name!r}; choose one of {', '.join(known)}")
    raise UsageError(
        f"{name!r} is a local optimizer, not a distribution scheme; choose one of "
        f"{', '.join(known)}"
    )


def parse_scheme_options(items: Iterable[str]) -> dict[str, Any]:
    """``["k=v", ...]`` to a dict; values parse as JSON (numbers, booleans), else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--scheme-option takes KEY=VALUE, not {item!r}")
        try:
            out[key.strip()] = json.loads(text)
        except ValueError:
            out[key.strip()] = text
    return out


def partitioned_sampler(
    name: str,
    size: int,
    batch_size: int,
    *,
    rank: int,
    world_size: int,
    seed: int,
    options: Mapping[str, Any],
) -> Any:
    """The recipe's sampler made this rank's partition of every epoch.

    ``shuffle`` becomes a shuffled :class:`~d5core.lv2.samplers.PartitionedSampler`,
    ``sequential`` an unshuffled one, ``partitioned`` gets the rank and size; other
    samplers cannot be partitioned.
    """
    from d5core.lv2.samplers import make_sampler

    opts = dict(options)
    if name == "partitioned":
        opts.pop("rank", None)
        opts.pop("world_size", None)
    elif name in ("shuffle", "sequential"):
        opts["shuffle"] = name == "shuffle"
    else:
        raise UsageError(
            f"sampler {name!r} cannot be split across ranks; use shuffle, sequential or partitioned"
        )
    return make_sampler("partitioned", size, batch_size, seed=seed, rank=rank,
                        world_size=world_size, **opts)  # fmt: skip


class _PlannedRanks(SingleProcessCommunicator):
    """Rank 0 of ``size`` ranks, in the launching process: a scheme is built on it to
    check its options, and never steps (the parent does not train)."""

    name = "planned"

    def __init__(self, size: int) -> None:
        super().__init__()
        self._planned = size

    @property
    def size(self) -> int:
        return self._planned


#: Ranks one CPU may carry before a local launch is refused as a mistake.
RANKS_PER_CPU = 32
#: The least memory one rank needs (a Python process with numpy and a framework).
RANK_MEMORY_BYTES = 200 * 2**20


def check_rank_count(ranks: int) -> None:
    """Refuse a rank count this machine cannot hold: more than :data:`RANKS_PER_CPU` per
    logical CPU, or more than the available memory at :data:`RANK_MEMORY_BYTES` each.

    :raises UsageError: one line with the figures.
    """
    cpus = os.cpu_count() or 1
    fit = min(RANKS_PER_CPU * cpus, max(1, psutil.virtual_memory().available // RANK_MEMORY_BYTES))
    if ranks > fit:
        raise UsageError(
            f"--ranks {ranks} would start {ranks} processes on this machine of {cpus} CPUs; at "
            f"most {fit} fit ({RANKS_PER_CPU} per CPU, {RANK_MEMORY_BYTES // 2**20} MiB of "
            "available memory each): use fewer ranks"
        )


def check_rank_options(
    settings: Mapping[str, Any],
    train_size: int,
    ranks: int,
    *,
    local: Any,
    scheme: str,
    scheme_options: Mapping[str, Any],
    global_batch: bool,
    communicator: str | None = None,
) -> None:
    """Refuse, in the launching process, what the launch or every rank would refuse
    before training: no launcher for the communicator (``communicator``, see
    :func:`chosen_communicator`), ``--global-batch`` with a batch that
    does not split, a sampler that cannot be partitioned, an unknown scheme or bad
    scheme options. Bad options thus end the command with exit 2 before a run is stored.

    :param settings: the recipe's settings; :param train_size: examples in the
        training set; :param local: the local optimizer the scheme would wrap.
    :raises UsageError: one line, naming the option.
    """
    check_rank_count(ranks)
    rank_launcher(chosen_communicator(communicator))
    batch = int(settings["batch_size"])
    if global_batch:
        if batch % ranks:
            raise UsageError(
                f"--global-batch: batch_size {batch} is not a multiple of {ranks} ranks"
            )
        batch //= ranks
    partitioned_sampler(
        str(settings["sampler"]), train_size, batch, rank=0, world_size=ranks,
        seed=int(settings.get("seed") or 0), options=settings.get("sampler_options") or {},
    )  # fmt: skip
    planner = RankContext(0, ranks, None)
    planner.comm = _PlannedRanks(ranks)
    planner.wrap_optimizer(scheme, local, scheme_options)


# -- a rank --------------------------------------------------------------------------


def _only_communicator(installed: Sequence[str]) -> str:
    """The one installed communicator, for ranks whose launcher names none."""
    if len(installed) == 1:
        return installed[0]
    if not installed:
        raise UsageError(NO_COMMUNICATION_PLUGIN)
    raise UsageError(
        f"several communicators are installed ({', '.join(installed)}) and the launcher "
        f"does not say which to use; set {COMMUNICATOR_ENV} to one of them"
    )


class RankContext:
    """One rank of a distributed run: communicator, heartbeat, status file, test hook.

    :param rank: this rank; :param size: the number of ranks.
    :param directory: the parent's watch directory, or ``None`` under an outside launcher.
    :param communicator: the ``d5.communication`` entry to use, or ``None`` for the one
        installed communicator.
    """

    def __init__(
        self, rank: int, size: int, directory: Path | None, communicator: str | None = None
    ) -> None:
        self.rank, self.size, self.directory = rank, size, directory
        self.communicator_name = communicator
        self.comm: Any = None
        self.steps = 0
        #: Bumped whenever the rank makes progress (a step, a test pass, an epoch): the
        #: heartbeat is written only after progress, so a rank that is alive but stuck
        #: (a deadlock in a collective, say) stops beating like a dead one.
        self._progress = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._kill_after: int | None = None
        if os.environ.get(KILL_RANK_ENV, "") == str(rank):
            self._kill_after = int(os.environ.get(KILL_AFTER_ENV, "1") or 1)

    @classmethod
    def from_environment(cls) -> RankContext | None:
        """The context of this process when a launcher started it with several ranks.

        The communicator is :data:`COMMUNICATOR_ENV`'s, else the one the launcher's
        detection names, else the one installed."""
        found = detect_launcher()
        if found is None or (found["size"] < 2 and not os.environ.get(PARENT_ENV)):
            return None
        directory = os.environ.get(DIR_ENV)
        communicator = os.environ.get(COMMUNICATOR_ENV) or found["communicator"] or None
        return cls(found["rank"], found["size"], Path(directory) if directory else None,
                   communicator)  # fmt: skip

    # heartbeat and status ---------------------------------------------------------

    def start(self) -> None:
        """Start the heartbeat when a parent watches: the file is touched at most once a
        second, and only after the rank made progress since the last touch. Also start
        watching the parent (:meth:`watch_parent`)."""
        self.watch_parent(os.environ.get(PARENT_PID_ENV, ""))
        if self.directory is None:
            return
        path = self.directory / f"heartbeat.{self.rank}"
        path.write_text(str(os.getpid()))

        def beat() -> None:
            seen = self._progress
            while not self._stop.wait(_HEARTBEAT_S):
                if self._progress == seen:
                    continue  # no progress since the last beat: let the heartbeat age
                seen = self._progress
                try:
                    os.utime(path)
                except OSError:
                    return

        self._thread = threading.Thread(target=beat, name="d5-heartbeat", daemon=True)
        self._thread.start()

    def watch_parent(self, spec: str) -> None:
        """Exit this rank (status 1, one line on stderr) within :data:`_PARENT_POLL_S`
        seconds of the end of the process ``spec`` (``PID@HOST``, this host only)."""
        pid_text, _, host = spec.partition("@")
        if not pid_text.isdigit() or host != socket.gethostname():
            return
        pid = int(pid_text)
        started = _process_start(pid)

        def watch() -> None:
            while started is not None and _process_start(pid) == started:
                if self._stop.wait(_PARENT_POLL_S):
                    return
            sys.stderr.write(
                f"d5: rank {self.rank}: the d5 process that launched this job (pid {pid}) "
                "has ended; stopping this rank\n"
            )
            sys.stderr.flush()
            os._exit(EXIT_FAILED)

        threading.Thread(target=watch, name="d5-parent-watch", daemon=True).start()

    def finish(self, code: int, error: str | None = None) -> None:
        """Stop the heartbeat and write this rank's exit status for the parent."""
        self._stop.set()
        if self.directory is None:
            return
        tmp = self.directory / f".status.{self.rank}"
        tmp.write_text(json.dumps({"code": code, "error": error}))
        tmp.replace(self.directory / f"status.{self.rank}")

    def write_run_id(self, run_id: str) -> None:
        """Tell the parent which run rank 0 is filling in."""
        if self.directory is not None:
            (self.directory / "run_id").write_text(run_id)

    # components ---------------------------------------------------------------------

    def communicator(self) -> Any:
        """This rank's communicator: the ``d5.communication`` entry
        :attr:`communicator_name`, or the only one installed when that is ``None``."""
        if self.comm is None:
            from d5core.plugins import get_plugin_manager

            manager = get_plugin_manager()
            name = self.communicator_name or _only_communicator(manager.names("d5.communication"))
            inner = manager.load("d5.communication", name)()
            if int(inner.size) != self.size or int(inner.rank) != self.rank:
                raise UsageError(
                    f"the launcher says rank {self.rank} of {self.size} but the {name!r} "
                    f"communicator says rank {inner.rank} of {inner.size}; is its library "
                    "built for this launcher?"
                )
            self.comm = inner
        return self.comm

    def wrap_optimizer(self, scheme: str, local: Any, options: Mapping[str, Any]) -> Any:
        """``local`` wrapped by the distribution scheme ``scheme``."""
        cls = scheme_class(scheme)
        try:
            return cls(local, self.communicator(), **dict(options))
        except TypeError as exc:
            raise UsageError(f"scheme {scheme}: bad options: {exc}") from None

    #: Reasons to stop, in increasing precedence, as exchanged by :meth:`agree`.
    STOP_REASONS: tuple[str | None, ...] = (
        None, "target_accuracy", "target_perplexity", "plateau", "max_steps", "time_budget",
        "diverged",
    )  # fmt: skip

    def agree(self, reason: str | None) -> str | None:
        """The reason to stop that every rank acts on: the one of highest precedence
        among the ranks' own (one 8-byte allreduce per call, counted as traffic)."""
        codes = self.STOP_REASONS
        local = np.array([codes.index(reason) if reason in codes else len(codes) - 1])
        agreed = int(np.asarray(self.communicator().allreduce(local, "max"))[0])
        return codes[min(agreed, len(codes) - 1)]

    def mark_progress(self, _event: Any = None) -> None:
        """Bus callback for events that show progress (``test.pass.end``, ...)."""
        self._progress += 1

    def on_step(self, _event: Any) -> None:
        """Bus callback for ``train.step.end``: counts steps; runs the kill test hook."""
        self.steps += 1
        self._progress += 1
        if self._kill_after is not None and self.steps >= self._kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    def gather(self, values: Sequence[float]) -> np.ndarray:
        """Every rank's ``values`` as rows of a ``(size, len(values))`` array, on all ranks."""
        table = np.zeros((self.size, len(values)), dtype=np.float64)
        table[self.rank] = np.asarray(values, dtype=np.float64)
        return np.asarray(self.communicator().allreduce(table, "sum"), dtype=np.float64)

    def rank_values(self, result: Any) -> list[float]:
        """This rank's entries of :data:`RANK_METRICS`."""
        counters = dict(self.communicator().counters())
        final = result.losses[-1] if result.losses else float("nan")
        return [float(result.steps), float(result.samples),
                float(counters.get("bytes_sent", 0)), float(counters.get("bytes_received", 0)),
                float(counters.get("seconds", 0.0)), float(final),
                float(result.wall_s)]  # fmt: skip


# -- the parent ----------------------------------------------------------------------


class LaunchOutcome:
    """How a launched job ended: exit ``code`` and, on failure, a one-line ``message``;
    ``signum`` is the stop signal when the parent was interrupted; ``launcher`` is the
    launcher's name (for messages such as "mpiexec and its 2 ranks were stopped")."""

    def __init__(
        self,
        code: int,
        message: str | None,
        run_id: str | None,
        signum: int | None = None,
        launcher: str = "the launcher",
    ) -> None:
        self.code, self.message, self.run_id, self.signum = code, message, run_id, signum
        self.launcher = launcher


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started, or ``None`` when it is gone (or a zombie)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(proc.create_time())
    except psutil.Error:
        return None


def _die_with_parent() -> Callable[[], None] | None:
    """The launcher gets SIGTERM when this process ends, SIGKILL included (see
    :func:`d5core.worker_protocol.die_with_parent`)."""
    return die_with_parent(signal.SIGTERM)


def _pump(
    stream: IO[str],
    sink: list[str],
    forward: Callable[[str], None] | None,
    hides: Callable[[str], bool],
) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        if forward is not None and not hides(line):
            forward(line)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_status(directory: Path, rank: int) -> dict[str, Any] | None:
    path = directory / f"status.{rank}"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _pid(directory: Path, rank: int) -> int | None:
    try:
        return int((directory / f"heartbeat.{rank}").read_text().strip())
    except (OSError, ValueError):
        return None


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` now (the launcher's proxies and ranks, which may have
    process groups of their own); empty when it cannot be read."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _kill(proc: subprocess.Popen[str], directory: Path, ranks: int) -> None:
    """Kill the launcher's process group, every process below the launcher and every
    rank that wrote its heartbeat. The descendants are listed before any signal is sent:
    a rank still importing has written no heartbeat yet, may sit in a process group of
    its launcher's proxy, and once the launcher dies it is no longer below it."""
    heartbeats = [p for p in (_pid(directory, r) for r in range(ranks)) if p is not None]
    pids = list(dict.fromkeys([*_descendants(proc.pid), *heartbeats]))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        try:
            proc.wait(timeout=2.0)
            if not any(_alive(p) for p in pids):
                return
        except subprocess.TimeoutExpired:
            pass


def _heartbeat_age(directory: Path, rank: int) -> float:
    try:
        return time.time() - (directory / f"heartbeat.{rank}").stat().st_mtime
    except OSError:
        return -1.0


class _Diagnosis(NamedTuple):
    """How a job ended badly: exit code, one line, and whether the launcher said so."""

    code: int
    message: str
    by_launcher: bool = False


def _diagnose(directory: Path, ranks: int, output: str, launcher: str) -> _Diagnosis | None:
    """After the job ended: the rank that did not end well.

    A rank without an exit status died: the first one the launcher's output accounts for
    (``d5_diagnose_rank_failure``), or else the one whose heartbeat stopped first (the
    launcher kills the others after it).
    """
    missing = [r for r in range(ranks) if _read_status(directory, r) is None]
    for rank in missing:
        line = _diagnosis(launcher, rank, _pid(directory, rank), output)
        if line is not None:
            return _Diagnosis(EXIT_FAILED, line, by_launcher=True)
    if missing:
        rank = max(missing, key=lambda r: _heartbeat_age(directory, r))
        if _pid(directory, rank) is None:
            return _Diagnosis(EXIT_FAILED, f"rank {rank} never started")
        return _Diagnosis(
            EXIT_FAILED, f"rank {rank} died without an exit status (killed by a signal?)"
        )
    for rank in range(ranks):
        st = _read_status(directory, rank)
        assert st is not None
        if int(st["code"]) != 0:
            error = str(st.get("error") or f"exit status {st['code']}")
            return _Diagnosis(int(st["code"]), error if rank == 0 else f"rank {rank}: {error}")
    return None


def launch(
    ranks: int,
    argv: Sequence[str],
    *,
    rank_timeout: float,
    env: Mapping[str, str] | None = None,
    run_id: str | None = None,
    on_failure: Callable[[str | None, str], None] | None = None,
    stop: StopSignals | None = None,
    timeout: float | None = None,
    communicator: str | None = None,
) -> LaunchOutcome:
    """Run ``python -m d5core ARGV`` on ``ranks`` ranks with :func:`rank_launcher`'s
    launcher for ``communicator`` (``None``: :func:`chosen_communicator`) and watch it.

    Rank output on stdout is passed through (without the lines the launcher
    :meth:`~RankLauncher.hides`); stderr is kept and shown only when the job succeeds.
    The job is killed when a rank's heartbeat is older than ``rank_timeout`` seconds or
    a rank exited non-zero while the others still run; ``on_failure(run_id, line)`` is
    then called before the outcome is returned.
    A stop signal (``stop``'s, or one noted while this runs) kills the job too; the
    outcome then carries its ``signum`` and ``on_failure`` is not called.
    With ``timeout``, the job is killed when it runs longer than that many seconds in
    all, and fails with "timed out after N s".
    """
    with contextlib.ExitStack() as stack:
        signals = stop if stop is not None else stack.enter_context(StopSignals())
        launcher = rank_launcher(chosen_communicator(communicator))
        return _launch(launcher, ranks, argv, rank_timeout, env, run_id, on_failure, signals,
                       timeout)  # fmt: skip


def _sweep_watch_directories() -> None:
    """Remove the watch directories of parents that are gone (killed before cleaning up)."""
    for directory in Path(tempfile.gettempdir()).glob(f"{_DIR_PREFIX}*"):
        try:
            pid_text, started = (directory / "parent").read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if str(_process_start(pid)) != started:
            shutil.rmtree(directory, ignore_errors=True)


def _interrupted(stop: StopSignals, run_id: str | None, launcher: str) -> LaunchOutcome:
    assert stop.received is not None
    return LaunchOutcome(128 + stop.received, f"interrupted by {stop.name}", run_id,
                         signum=stop.received, launcher=launcher)  # fmt: skip


def _launch(
    launcher: RankLauncher,
    ranks: int,
    argv: Sequence[str],
    rank_timeout: float,
    env: Mapping[str, str] | None,
    run_id: str | None,
    on_failure: Callable[[str | None, str], None] | None,
    stop: StopSignals,
    timeout: float | None = None,
) -> LaunchOutcome:
    if stop.received is not None:
        return _interrupted(stop, run_id, launcher.name)
    _sweep_watch_directories()
    directory = Path(tempfile.mkdtemp(prefix=_DIR_PREFIX))
    try:
        (directory / "parent").write_text(f"{os.getpid()} {_process_start(os.getpid())}")
        environ = {**os.environ, **dict(env or {}), PARENT_ENV: "1", DIR_ENV: str(directory),
                   PARENT_PID_ENV: f"{os.getpid()}@{socket.gethostname()}",
                   COMMUNICATOR_ENV: launcher.communicator}  # fmt: skip
        if run_id is not None:
            environ[RUN_ID_ENV] = run_id
        cmd = list(launcher.command(ranks, [sys.executable, "-m", "d5core", *argv]))
        proc = subprocess.Popen(cmd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True,
                                preexec_fn=_die_with_parent())  # fmt: skip
        try:
            return _follow(proc, launcher, directory, ranks, rank_timeout, run_id, on_failure,
                           stop, timeout)  # fmt: skip
        except BaseException:
            _kill(proc, directory, ranks)
            raise
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _follow(
    proc: subprocess.Popen[str],
    launcher: RankLauncher,
    directory: Path,
    ranks: int,
    rank_timeout: float,
    run_id: str | None,
    on_failure: Callable[[str | None, str], None] | None,
    stop: StopSignals,
    timeout: float | None = None,
) -> LaunchOutcome:
    """Pass the job's output on, watch it to its end and say how it ended."""
    out: list[str] = []
    err: list[str] = []

    def echo(line: str) -> None:
        sys.stdout.write(line)
        sys.stdout.flush()

    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, out, echo, launcher.hides),
                         daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, err, None, launcher.hides),
                         daemon=True),
    ]  # fmt: skip
    for t in pumps:
        t.start()
    failure = _watch(proc, directory, ranks, rank_timeout, stop, timeout)
    if failure is not None:
        _kill(proc, directory, ranks)
    proc.wait()
    for t in pumps:
        t.join(timeout=2.0)
    if failure is not None and stop.received is not None:
        return _interrupted(stop, run_id or _read_run_id(directory), launcher.name)
    text = "".join(out) + "".join(err)
    diag = _diagnose(directory, ranks, text, launcher.name)
    found = diag
    if failure is not None:
        # The launcher's account of a death (its signal) says more than the watchdog's.
        better = diag is not None and diag.by_launcher and "died" in failure
        found = diag if better else _Diagnosis(EXIT_FAILED, failure)
    rid = run_id or _read_run_id(directory)
    if found is None and proc.returncode != 0:
        found = _Diagnosis(EXIT_FAILED, f"{launcher.name} exited with status {proc.returncode}")
    if found is None:
        sys.stderr.write("".join(line for line in err if not launcher.hides(line)))
        return LaunchOutcome(0, None, rid, launcher=launcher.name)
    code, message, _ = found
    if on_failure is not None:
        on_failure(rid, message)
    return LaunchOutcome(code, message, rid, launcher=launcher.name)


def _read_run_id(directory: Path) -> str | None:
    """The run id rank 0 wrote, if it did."""
    try:
        return (directory / "run_id").read_text().strip() or None
    except OSError:
        return None


def _watch(
    proc: subprocess.Popen[str],
    directory: Path,
    ranks: int,
    timeout: float,
    stop: StopSignals,
    limit: float | None = None,
) -> str | None:
    """Wait for the job; a one-line reason to kill it, or ``None`` once it ended.
    ``limit``: the seconds the whole job may run."""
    started = time.monotonic()
    failed_at: dict[int, float] = {}
    while proc.poll() is None:
        time.sleep(_POLL_S)
        if stop.received is not None:
            return f"interrupted by {stop.name}"
        now = time.monotonic()
        if limit is not None and now - started > limit:
            return f"the job on {ranks} ranks timed out after {limit:g} s"
        for rank in range(ranks):
            st = _read_status(directory, rank)
            hb = directory / f"heartbeat.{rank}"
            if st is not None:
                if int(st["code"]) != 0:
                    first = failed_at.setdefault(rank, now)
                    if now - first > _EXIT_GRACE_S and proc.poll() is None:
                        error = st.get("error") or f"exit status {st['code']}"
                        return f"rank {rank} exited with status {st['code']}: {error}"
                continue
            try:
                age = time.time() - hb.stat().st_mtime
            except OSError:
                if now - started > timeout + _START_GRACE_S:
                    return f"rank {rank} did not start within {timeout + _START_GRACE_S:.0f} s"
                continue
            pid = _pid(directory, rank)
            if pid is not None and not _alive(pid):
                time.sleep(_POLL_S)  # let a status written at exit land
                if _read_status(directory, rank) is None and proc.poll() is None:
                    return f"rank {rank} died without an exit status (killed by a signal?)"
            elif age > timeout:
                return f"rank {rank} stopped responding (no progress for {age:.0f} s)"
    return None
