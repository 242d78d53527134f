"""The plugin module of d5-plugin-mxnet: it loads without importing MXNet, every entry
checks out, and it reports MXNet's thread count and settings once MXNet is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

PROBE = """
import json, sys
from d5_plugin_mxnet import plugin
before = plugin.d5_thread_settings(), "mxnet" in sys.modules
from d5_plugin_mxnet._mx import mxnet
mxnet()
print(json.dumps({"before": before, "after": plugin.d5_thread_settings(),
                  "info": plugin.d5_environment_info()}))
"""


def _probe(**env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**environ, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_every_entry_of_the_plugin_checks_out(d5_cli: Any) -> None:
    result = d5_cli("list-plugins", "--check", "--json")
    assert result.exit_code == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["data"] if r["distribution"] == "d5-plugin-mxnet"]
    names = {(r["group"], r["name"]) for r in rows}
    assert ("d5.operators", "mxnet") in names and ("d5.frameworks", "mxnet") in names
    assert {n for g, n in names if g == "d5.optimizers"} == {
        "mx-sgd", "mx-momentum", "mx-nesterov", "mx-adam", "mx-adagrad", "mx-rmsprop",
    }  # fmt: skip
    assert all(r["status"] == "ok" for r in rows), rows


def test_loading_the_plugin_imports_no_mxnet_and_reports_no_threads() -> None:
    found = _probe()
    assert found["before"] == [None, False]


def test_the_thread_count_follows_omp_num_threads_else_the_usable_cores() -> None:
    assert _probe(OMP_NUM_THREADS="1")["after"]["mxnet.omp_threads"] == "1"
    unset = _probe()
    assert unset["after"]["mxnet.omp_threads"] == str(len(os.sched_getaffinity(0)))
    assert unset["info"]["omp_num_threads"].startswith("unset")
    assert unset["info"]["mxnet"] == "1.9.1" and "MKLDNN" in unset["info"]["features"]
