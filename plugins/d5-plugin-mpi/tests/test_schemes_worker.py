"""Run by test_schemes.py under ``mpiexec -n N`` (not a test module): trains a tiny
linear least-squares model with every distributed optimizer and writes ``rank<r>.json``."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

BATCH, STEPS, LR = 4, 5, 0.1


def data(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s batch of step ``step``: inputs (BATCH, 3), targets (BATCH, 2)."""
    rng = np.random.default_rng([7, rank, step])
    return rng.standard_normal((BATCH, 3)), rng.standard_normal((BATCH, 2))


def init(offset: float = 0.0) -> dict[str, np.ndarray]:
    """The initial parameters (plus ``offset``)."""
    rng = np.random.default_rng(3)
    return {"w": rng.standard_normal((3, 2)) + offset, "b": rng.standard_normal(2) + offset}


def grads(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Gradients of ``0.5 * mean ||x w + b - y||^2``."""
    e = x @ params["w"] + params["b"] - y
    return {"w": x.T @ e / len(x), "b": e.mean(0)}


def digits_mlp(res: dict[str, Any], comm: Any, steps: int = 3) -> None:
    """The volume of the digits recipe's MLP (float32) under a plain and a top-k 1%
    allreduce, with random gradients: ``res["digits_<key>"]``."""
    from d5_plugin_mpi.schemes import make_distributed

    from d5core.api import get_plugin_manager
    from d5core.testing.executors import load_model

    mlp = load_model("mlp", hidden=[64], input_shape=(64,), classes=10, seed=0)
    sgd = get_plugin_manager().load("d5.optimizers", "sgd")
    for key, compression in (("plain", None), ("topk", {"name": "topk", "ratio": 0.01})):
        opt = make_distributed("allreduce", sgd(lr=0.01), comm, compression=compression)
        params = {k: np.array(v, copy=True) for k, v in mlp.parameters.items()}
        comm.barrier()
        comm.reset_counters()
        for t in range(steps):
            rng = np.random.default_rng([comm.rank, t])
            opt.step(params, {k: rng.standard_normal(v.shape).astype(v.dtype)
                              for k, v in params.items()})  # fmt: skip
        c = comm.counters()
        sizes = {k: int(v.size) for k, v in params.items()}
        res[f"digits_{key}"] = {
            "bytes": [c["bytes_sent"], c["bytes_received"]],
            "expected": list(opt.expected_bytes(sizes, steps)),
            "sizes": sizes,
            "steps": steps,
        }


def main(out_dir: str) -> None:
    from d5_plugin_mpi.comm import MPICommunicator
    from d5_plugin_mpi.schemes import make_distributed

    from d5core.api import get_plugin_manager

    comm = MPICommunicator()
    r, n = comm.rank, comm.size
    pm = get_plugin_manager()
    res: dict[str, Any] = {"rank": r, "size": n}
    sizes = {"w": 6, "b": 2}

    def run(
        key: str,
        scheme: str,
        local: str = "sgd",
        steps: int = STEPS,
        lr: float = LR,
        offset: float = 0.0,
        **options: Any,
    ) -> Any:
        opt = make_distributed(scheme, pm.load("d5.optimizers", local)(lr=lr), comm, **options)
        params = init(offset * r)
        sent_grads = {k: np.zeros_like(v) for k, v in params.items()}
        comm.barrier()
        comm.reset_counters()
        for t in range(steps):
            g = grads(params, *data(r, t))
            for k in g:
                sent_grads[k] += g[k]
            opt.step(params, g)
        c = comm.counters()
        res[key] = {
            "params": {k: v.tolist() for k, v in params.items()},
            "bytes": [c["bytes_sent"], c["bytes_received"]],
            "expected": list(opt.expected_bytes(sizes, steps)),
            "grad_sum": {k: v.tolist() for k, v in sent_grads.items()},
        }
        return opt, params

    run("allreduce_sgd", "allreduce")
    run("allreduce_adam", "allreduce", local="adam")
    run("ps_sgd", "parameter-server")
    run("ps_adam", "parameter-server", local="adam")
    run("ps1_sgd", "parameter-server", servers=1)
    run("ps3_momentum", "parameter-server", local="momentum", servers=min(3, n))
    run("ma1_sgd", "model-averaging", period=1)
    run("ma3_sgd", "model-averaging", steps=6, period=3)
    run("dpsgd_sgd", "dpsgd")
    run("dpsgd_gossip", "dpsgd", steps=40, lr=0.0, offset=1.0)
    run("topk", "allreduce", compression={"name": "topk", "ratio": 0.25})
    run("qsgd", "allreduce", compression={"name": "qsgd", "bits": 4, "seed": 1})
    run("sign", "allreduce", compression="sign")
    digits_mlp(res, comm)
    opt, params = run("async", "async-parameter-server")
    res["async"]["arrivals"] = getattr(opt, "arrivals", [])
    opt.synchronize(params)  # type: ignore[attr-defined]
    res["async"]["synced"] = {k: v.tolist() for k, v in params.items()}
    with open(f"{out_dir}/rank{r}.json", "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main(sys.argv[1])
