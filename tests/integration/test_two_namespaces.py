"""Two "nodes" on one machine: ranks in two Linux network namespaces joined by a veth
pair (10.55.0.1/24 and 10.55.0.2/24), so that every byte between them crosses a network
interface, never the loopback.

``d5 run recipes/digits-mlp.toml`` on 2 ranks, one per namespace, must pass, and the
veth's transmit counters must have grown by at least the bytes d5's communicator
counted for the rank on that side. Once with gloo (each rank started by hand with
``RANK``/``WORLD_SIZE``/``MASTER_ADDR``, as a cluster's own launcher would), once with
MPI (MPICH's Hydra in the first namespace, reaching the second through a stand-in for
ssh that runs the proxy with ``ip netns exec``).

Creating namespaces needs root (CAP_NET_ADMIN): the tests skip, saying so, for any other
user; CI runs as root and so runs them. The namespaces are removed even when a test fails.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="network namespaces are Linux's"
)

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
ADDRESSES = ("10.55.0.1", "10.55.0.2")
_SERIAL = itertools.count()
#: Variables of an enclosing launcher or test hook that would mislead the ranks.
_FOREIGN = ("PMI_", "SLURM_", "OMPI_", "D5_TEST_", "D5_DISTRIBUTED_", "HYDI_", "TORCHELASTIC_")
_TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


@dataclass(frozen=True)
class Namespaces:
    """Two network namespaces, ``names[i]`` holding veth end ``veths[i]`` with address
    :data:`ADDRESSES` ``[i]``."""

    names: tuple[str, str]
    veths: tuple[str, str]

    def run_in(self, side: int, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside namespace ``side``."""
        return ["ip", "netns", "exec", self.names[side], *argv]

    def tx_bytes(self, side: int) -> int:
        """The bytes veth end ``side`` has transmitted so far."""
        counter = f"/sys/class/net/{self.veths[side]}/statistics/tx_bytes"
        done = subprocess.run(self.run_in(side, ["cat", counter]), capture_output=True,
                              text=True, timeout=30, check=True)  # fmt: skip
        return int(done.stdout)


@pytest.fixture
def namespaces() -> Iterator[Namespaces]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CAP_NET_ADMIN)")
    if shutil.which("ip") is None:
        pytest.fail("the ip command (iproute2) is missing: apt-get install iproute2")
    tag = f"{os.getpid()}{next(_SERIAL)}"
    ns = Namespaces((f"d5a{tag}", f"d5b{tag}"), (f"d5va{tag}", f"d5vb{tag}"))
    try:
        for name in ns.names:
            _ip("netns", "add", name)
        _ip("link", "add", ns.veths[0], "type", "veth", "peer", "name", ns.veths[1])
        for side in (0, 1):
            name, veth = ns.names[side], ns.veths[side]
            _ip("link", "set", veth, "netns", name)
            _ip("-n", name, "addr", "add", f"{ADDRESSES[side]}/24", "dev", veth)
            _ip("-n", name, "link", "set", veth, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        yield ns
    finally:
        for name in ns.names:  # removing a namespace removes the veth end inside it
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", ns.veths[0]], capture_output=True, timeout=30)


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_FOREIGN) and k not in _TORCH_VARS}  # fmt: skip
    return {**env, **extra}


def _d5_run(db: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "d5core", "run", str(RECIPE), "--db", str(db), *more]


def _check_run(stdout: str, sent_over: Sequence[int]) -> dict[str, Any]:
    """The run rank 0 printed passed, and each veth end sent at least what d5 counted
    for the rank on its side."""
    document = json.loads(stdout)["data"]
    run = document["runs"][0]
    assert document["passed"] and run["status"] == "complete"
    rows = run["distributed"]["per_rank"]
    assert [row["rank"] for row in rows] == [0, 1]
    for side, row in enumerate(rows):
        assert row["rank_bytes_sent"] > 0
        assert sent_over[side] >= row["rank_bytes_sent"], (side, sent_over, rows)
    return dict(run)


def test_gloo_ranks_in_two_namespaces_train_over_the_veth(
    namespaces: Namespaces, tmp_path: Path
) -> None:
    pytest.importorskip("d5_plugin_torchdist")
    db = tmp_path / "runs.db"
    common = {"WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": ADDRESSES[0],
              "MASTER_PORT": "29500", "D5_DISTRIBUTED_COMMUNICATOR": "gloo"}  # fmt: skip
    # gloo binds to the address its host name resolves to (often 127.0.1.1), which the
    # other namespace cannot reach: name the interface.
    envs = [_environment(**common, RANK=str(side), GLOO_SOCKET_IFNAME=namespaces.veths[side])
            for side in (0, 1)]  # fmt: skip
    before = [namespaces.tx_bytes(side) for side in (0, 1)]
    other = subprocess.Popen(namespaces.run_in(1, _d5_run(db)), env=envs[1], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        first = subprocess.run(namespaces.run_in(0, _d5_run(db, "--json")), env=envs[0],
                               cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
        second_output, _ = other.communicate(timeout=120)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert first.returncode == 0, first.stderr[-2000:]
    assert other.returncode == 0, second_output[-2000:]
    sent = [namespaces.tx_bytes(side) - before[side] for side in (0, 1)]
    _check_run(first.stdout, sent)


def test_mpi_ranks_in_two_namespaces_train_over_the_veth(
    namespaces: Namespaces, tmp_path: Path, mpi_env: dict[str, str]
) -> None:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    exe = str(mpiexec) if mpiexec.is_file() else shutil.which("mpiexec")
    assert exe is not None
    # Hydra starts the proxy of a remote host with `<launcher-exec> -x HOST "COMMAND"`;
    # this stand-in for ssh runs COMMAND in the namespace that owns HOST's address.
    ssh = tmp_path / "netns-ssh"
    cases = "\n".join(
        f"    {a}) ns={n} ;;" for a, n in zip(ADDRESSES, namespaces.names, strict=True)
    )
    ssh.write_text(
        '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\nhost=$1; shift\n'
        f'case "$host" in\n{cases}\n    *) echo "netns-ssh: unknown host $host" >&2; exit 255 ;;\n'
        'esac\nexec ip netns exec "$ns" sh -c "$*"\n'
    )
    ssh.chmod(0o755)
    db = tmp_path / "runs.db"
    hydra = [exe, "-launcher", "ssh", "-launcher-exec", str(ssh), "-hosts", ",".join(ADDRESSES),
             "-n", "2"]  # fmt: skip
    # UCX sees one machine and would move the bytes through shared memory: TCP only.
    env = _environment(UCX_TLS="tcp,self")
    before = [namespaces.tx_bytes(side) for side in (0, 1)]
    done = subprocess.run(namespaces.run_in(0, [*hydra, *_d5_run(db, "--json")]), env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    sent = [namespaces.tx_bytes(side) - before[side] for side in (0, 1)]
    _check_run(done.stdout, sent)
