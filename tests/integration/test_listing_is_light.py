"""Listing plugins reads metadata and light plugin modules only: no framework is imported."""

from __future__ import annotations

import subprocess
import sys

from d5core.cli.output import read_json

HEAVY = ("torch", "tensorflow", "mxnet", "onnxruntime", "mpi4py", "numpy", "scipy")


def test_list_plugins_imports_no_framework():
    code = (
        "import sys, io, contextlib;"
        "from d5core.cli.app import run;"
        "buf = io.StringIO();"
        "ctx = contextlib.redirect_stdout(buf);"
        "ctx.__enter__(); code = run(['list-plugins', '--json']); ctx.__exit__(None, None, None);"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)); print(code)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, code = out.stdout.strip().splitlines()
    assert loaded == "[]", f"listing imported {loaded}"
    assert code == "0"


def test_every_plugin_of_the_environment_is_ok():
    d5 = [sys.executable, "-m", "d5core", "list-plugins", "--json"]
    rows = read_json(subprocess.run(d5, capture_output=True, text=True, check=True).stdout)
    bad = [(r["name"], r["status"], r["error"]) for r in rows if r["status"] != "ok"]
    assert not bad
