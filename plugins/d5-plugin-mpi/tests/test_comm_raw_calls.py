"""``MPICommunicator.raw_collective``: mpi4py's own calls, the baseline of
``d5 bench comm``, give d5's results on 2 ranks and leave d5's counters alone; the
local reduction the ping-pong job times as ``R`` adds with MPI's own kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from d5_plugin_mpi import launch

WORKER = """
import json, sys
import numpy as np
from d5_plugin_mpi.comm import MPICommunicator

comm = MPICommunicator()
r, n = comm.rank, comm.size
x = np.arange(6, dtype=np.float32) + 10 * r
raw = {name: comm.raw_collective(name) for name in ("allreduce", "broadcast", "allgather")}
summed = x.copy(); raw["allreduce"](summed)
d5_summed = x.copy(); comm.allreduce_inplace(d5_summed)
counted = comm.counters()["bytes_sent"]
sent = x.copy(); raw["broadcast"](sent)
gathered = raw["allgather"](x)
before = comm.counters()
raw["allreduce"](x.copy())
after = comm.counters()
out = {
    "summed": summed.tolist(), "d5_summed": d5_summed.tolist(), "sent": sent.tolist(),
    "gathered": np.asarray(gathered).tolist(),
    "d5_gathered": [a.tolist() for a in comm.allgather(np.arange(6, dtype=np.float32) + 10 * r)],
    "counters_unchanged": before == after and counted == before["bytes_sent"],
    "other": comm.raw_collective("alltoallw") is None,
}
reduce_local = comm.raw_collective("reduce_local")
before_reduce = comm.counters()
reduce_local(x)
out["reduced_twice"] = reduce_local(x).tolist()
out["reduce_uncounted"] = comm.counters() == before_reduce
if r == 0:
    print(json.dumps(out))
"""


def test_raw_calls_match_d5s_and_are_not_counted() -> None:
    try:
        cmd = launch.build_command(2, [sys.executable, "-c", WORKER])
    except Exception as exc:  # no mpiexec in this environment
        pytest.skip(str(exc))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    expected_sum = [float(2 * i + 10) for i in range(6)]
    assert got["summed"] == expected_sum == got["d5_summed"]
    assert got["sent"] == [float(i) for i in range(6)]  # rank 0's buffer
    assert got["gathered"] == got["d5_gathered"]
    assert got["counters_unchanged"] is True
    assert got["other"] is True
    assert got["reduced_twice"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # rank 0's x, added twice
    assert got["reduce_uncounted"] is True
