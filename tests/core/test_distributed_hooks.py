"""Level 3 goes through the communication plugin's hooks: a plugin that is not MPI can
launch the ranks, name their communicator, explain a dead rank and offer the schemes,
and without one ``--ranks`` is refused in one line."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.hookspecs import hookimpl
from d5core.lv3.launch import (
    COMMUNICATOR_ENV,
    NO_COMMUNICATION_PLUGIN,
    RankContext,
    detect_launcher,
    distribution_schemes,
    launch,
    rank_launcher,
    scheme_class,
)
from d5core.plugins import PluginManager, reset_plugin_manager
from d5core.testing import FakeSite

#: A whole "job": writes each rank's heartbeat and (except FAKE_LOSE_RANK's) its exit
#: status, as d5's ranks do, and prints what the ranks would see.
JOB = """
import json, os, sys
from pathlib import Path
directory, ranks = Path(os.environ["D5_DISTRIBUTED_DIR"]), int(sys.argv[1])
print("FAKE-BANNER: the launcher's own line", flush=True)
print("communicator=" + os.environ["D5_DISTRIBUTED_COMMUNICATOR"], "argv=" + sys.argv[2], flush=True)
lost = os.environ.get("FAKE_LOSE_RANK")
for rank in range(ranks):
    (directory / f"heartbeat.{rank}").write_text(str(os.getpid()))
    if str(rank) == lost:
        print(f"fake-launch: lost rank {rank}", flush=True)
    else:
        (directory / f"status.{rank}").write_text(json.dumps({"code": 0, "error": None}))
sys.exit(3 if lost else 0)
"""


@dataclass(frozen=True)
class FakeLauncher:
    name: str = "fake-launch"
    communicator: str = "fake-comm"

    def command(self, ranks: int, argv: Sequence[str]) -> list[str]:
        return [sys.executable, "-c", JOB, str(ranks), " ".join(argv[1:])]

    def hides(self, line: str) -> bool:
        return line.startswith("FAKE-BANNER")


class FakeCommunicationPlugin:
    """Implements the level 3 hooks the way a torch.distributed plugin could."""

    @hookimpl
    def d5_rank_launcher(self) -> FakeLauncher:
        return FakeLauncher()

    @hookimpl
    def d5_detect_launcher(self, environ: Mapping[str, str]) -> Mapping[str, Any] | None:
        if "FAKE_RANK" not in environ:
            return None
        return {"launcher": "fake-launch", "rank": environ["FAKE_RANK"], "size": "3",
                "communicator": "fake-comm"}  # fmt: skip

    @hookimpl
    def d5_diagnose_rank_failure(
        self, launcher: str, rank: int, pid: int | None, output: str
    ) -> str | None:
        if launcher == "fake-launch" and f"lost rank {rank}" in output:
            return f"rank {rank} was lost by\nthe fake launcher"
        return None


@pytest.fixture
def fake_comm(d5_plugin_manager: PluginManager) -> PluginManager:
    d5_plugin_manager.register(FakeCommunicationPlugin(), "fake-comm")
    return d5_plugin_manager


def test_without_a_communication_plugin_ranks_are_refused_in_one_line(
    d5_plugin_manager: PluginManager,
) -> None:
    for attempt in (rank_launcher, lambda: scheme_class("allreduce")):
        with pytest.raises(UsageError) as exc:
            attempt()
        assert str(exc.value) == NO_COMMUNICATION_PLUGIN
    assert "\n" not in NO_COMMUNICATION_PLUGIN and "install" in NO_COMMUNICATION_PLUGIN


def test_the_plugins_launcher_starts_the_job_and_hides_its_own_lines(
    fake_comm: PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    outcome = launch(2, ["run", "recipe.toml"], rank_timeout=10)
    assert (outcome.code, outcome.message, outcome.launcher) == (0, None, "fake-launch")
    out = capsys.readouterr().out
    assert "communicator=fake-comm argv=-m d5core run recipe.toml" in out
    assert "FAKE-BANNER" not in out


def test_a_rank_without_exit_status_is_explained_by_the_plugins_diagnosis(
    fake_comm: PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    failures: list[str] = []
    outcome = launch(3, ["run", "r.toml"], rank_timeout=10, env={"FAKE_LOSE_RANK": "1"},
                     on_failure=lambda _rid, line: failures.append(line))  # fmt: skip
    assert outcome.code == 1
    assert outcome.message == "rank 1 was lost by the fake launcher"
    assert failures == [outcome.message]


def test_without_a_diagnosis_a_lost_rank_is_said_to_have_died(
    d5_plugin_manager: PluginManager, capsys: pytest.CaptureFixture[str]
) -> None:
    class LaunchOnly:
        @hookimpl
        def d5_rank_launcher(self) -> FakeLauncher:
            return FakeLauncher(name="other-launch")

    d5_plugin_manager.register(LaunchOnly(), "launch-only")
    outcome = launch(2, ["run", "r.toml"], rank_timeout=10, env={"FAKE_LOSE_RANK": "0"})
    assert outcome.code == 1
    assert outcome.message == "rank 0 died without an exit status (killed by a signal?)"


def test_a_rank_takes_its_rank_size_and_communicator_from_the_detection(
    fake_comm: PluginManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert detect_launcher({"FAKE_RANK": "2"}) == {
        "launcher": "fake-launch", "rank": 2, "size": 3, "communicator": "fake-comm",
    }  # fmt: skip
    assert detect_launcher({}) is None
    monkeypatch.setenv("FAKE_RANK", "1")
    monkeypatch.delenv(COMMUNICATOR_ENV, raising=False)
    ctx = RankContext.from_environment()
    assert ctx is not None
    assert (ctx.rank, ctx.size, ctx.communicator_name) == (1, 3, "fake-comm")
    monkeypatch.setenv(COMMUNICATOR_ENV, "chosen")
    ctx = RankContext.from_environment()
    assert ctx is not None and ctx.communicator_name == "chosen"


PLUGIN = """
from d5core.hookspecs import hookimpl
from d5core.levels.distributed import DistributedOptimizer
from d5core.lv3.single_process import SingleProcessCommunicator
from d5core.levels.training import Optimizer

d5_plugin_api = ">=1.0"


class Ring(DistributedOptimizer):
    name = "ring"


class Plain(Optimizer):
    name = "plain"


class Solo(SingleProcessCommunicator):
    name = "solo"


@hookimpl
def d5_distribution_schemes():
    return ["ring", "not-registered", "ring"]
"""


@pytest.fixture
def scheme_site(d5_site: FakeSite) -> Iterator[PluginManager]:
    d5_site.add(
        "d5-plugin-fakecomm",
        entry_points={
            "d5.hooks": {"fakecomm": "fakecomm"},
            "d5.optimizers": {"ring": "fakecomm:Ring", "plain": "fakecomm:Plain"},
            "d5.communication": {"solo": "fakecomm:Solo"},
        },
        modules={"fakecomm.py": PLUGIN},
    )
    manager = d5_site.manager({"D5_LOAD_PLUGINS": "d5-plugin-fakecomm"})
    reset_plugin_manager(manager)
    try:
        yield manager
    finally:
        reset_plugin_manager(None)


def test_schemes_are_those_the_plugins_offer_and_register(scheme_site: PluginManager) -> None:
    assert distribution_schemes() == ["ring"]
    assert scheme_class("ring").__name__ == "Ring"
    with pytest.raises(UsageError, match=r"^'plain' is a local optimizer, .*choose one of ring$"):
        scheme_class("plain")
    with pytest.raises(
        UsageError, match=r"^no distribution scheme named 'nope'; choose one of ring$"
    ):
        scheme_class("nope")


def test_a_rank_uses_the_one_installed_communicator_when_none_is_named(
    scheme_site: PluginManager,
) -> None:
    comm = RankContext(0, 1, None).communicator()
    assert type(comm).__name__ == "Solo"
    with pytest.raises(UsageError, match="launcher says rank 0 of 2 but the 'solo' communicator"):
        RankContext(0, 2, None, communicator="solo").communicator()


def test_scheme_choices_are_listed_without_the_launcher(scheme_site: PluginManager) -> None:
    """A plugin that offers schemes but no launcher cannot launch: one line says so."""
    with pytest.raises(UsageError) as exc:
        rank_launcher()
    assert str(exc.value) == NO_COMMUNICATION_PLUGIN
    assert distribution_schemes() == ["ring"]
