"""The hook contract: every hook d5 specifies is called somewhere a real flow reaches.

A spy plugin is generated with one implementation of EVERY hook specification (read from
the hookspec modules, so a new hook joins by itself) and installed as a distribution on
``PYTHONPATH``, where ``d5`` and its bench worker processes and ranks find it like any
plugin. It writes a line per call to a log. A flow like ``make demo``'s then runs with
tiny sizes, and the test asserts that each hook fired, naming those that did not.

The merged hooks are also called by ``d5 list-plugins --check``; that step does not
count for them, so each must also fire where it is used. One hook has no ``d5``
command that reaches it yet and is called from Python: ``d5_graph_passes``
(:func:`~d5core.lv1.passes.apply_pass`). The memory hooks fire in a run that
selects the ``peak_memory`` metric (``d5 run --metric peak_memory``).
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from d5core.hookspecs import MERGED_HOOKS, PROJECT, SPEC_MODULES, distributed
from d5core.testing import make_distribution

D5 = Path(sys.executable).with_name("d5")
#: A C++ custom operator of the repository (``d5 op build`` asks every plugin for glue).
CUSTOM_OP = Path(__file__).resolve().parents[2] / "examples" / "custom_ops" / "bias_gelu.cpp"
CHECK = "list-plugins --check"

SPY_PRELUDE = '''
import os

import click
import numpy as np

from d5core.hookspecs import hookimpl
from d5core.levels.operators import Operator

d5_plugin_api = ">=1.0"


def _record(hook):
    with open(os.environ["D5_SPY_LOG"], "a") as log:
        log.write(f"{os.environ.get('D5_SPY_STEP', '?')}\\t{hook}\\t{os.getpid()}\\n")


class SpyRelu(Operator):
    """Relu on a device of its own, so that timing it asks d5_synchronize."""

    op_type = "Relu"
    device = "spy:0"

    def forward(self, inputs):
        return [np.maximum(inputs[0], 0)]

    def backward(self, grad_outputs, inputs, outputs):
        return [grad_outputs[0] * (inputs[0] > 0)]


def _spy_mlp(**options):
    from d5core.lv1.zoo import mlp

    return mlp(**options)


@click.command("spy-hello")
def _hello():
    click.echo("hello from the spy")


def _subscribe(bus):
    bus.subscribe("validation", lambda event: _record(f"bus:validation:{event.level}"))


ANSWERS = {
    "d5_plugin_check": lambda args: [],
    "d5_custom_operators": lambda args: {"Relu": SpyRelu},
    "d5_operator_shape_suites": lambda args: {
        "spy-suite": [{"op": "Relu", "shapes": [[8, 8]], "name": "spy-relu"}]
    },
    "d5_model_zoo": lambda args: {"spy-mlp": _spy_mlp},
    "d5_graph_passes": lambda args: {"spy-pass": lambda model, **options: model},
    "d5_lr_schedules": lambda args: {"spy-constant": lambda lr=0.1, **kw: (lambda step: lr)},
    "d5_environment_info": lambda args: {"spy": True},
    "d5_memory_peak": lambda args: {"spy": 1},
    "d5_cli_commands": lambda args: [_hello],
    "d5_bus_subscribe": lambda args: _subscribe(args["bus"]),
}


def _answer(hook, args):
    _record(hook)
    answer = ANSWERS.get(hook)
    return None if answer is None else answer(args)
'''

RECIPE = """
[fixed]
model = "spy-mlp"
model_options = { hidden = [8] }
dataset = "synthetic_classification"
dataset_options = { samples = 64, features = 8, classes = 3 }
epochs = 1
eval_batch_size = 64

[mutable]
executor = "numpy"
optimizer = "sgd"
lr = 0.1
batch_size = 8
schedule = { name = "spy-constant", lr = 0.1 }
"""


def _specified_hooks() -> dict[str, list[str]]:
    """Every hook specification: its name and its argument names."""
    marker = f"{PROJECT}_spec"
    return {
        name: list(inspect.signature(func).parameters)
        for module in SPEC_MODULES
        for name, func in vars(module).items()
        if inspect.isfunction(func) and hasattr(func, marker)
    }


def _spy_source(hooks: dict[str, list[str]]) -> str:
    impls = [
        f"@hookimpl(tryfirst=True)\ndef {name}({', '.join(args)}):\n"
        f"    return _answer({name!r}, dict(locals()))\n"
        for name, args in hooks.items()
    ]
    return SPY_PRELUDE + "\n\n" + "\n\n".join(impls)


#: The hooks only a run on several ranks reaches (it needs ``mpiexec``).
LEVEL_3 = set(distributed.__all__)


def _mpi_ready() -> bool:
    mpiexec = Path(sys.executable).with_name("mpiexec")
    return mpiexec.is_file() or shutil.which("mpiexec") is not None


def test_every_hook_fires_in_a_demo_like_flow(tmp_path, monkeypatch) -> None:
    hooks = _specified_hooks()
    site, log, db = tmp_path / "site", tmp_path / "spy.log", tmp_path / "r.sqlite"
    make_distribution(
        site,
        "d5-plugin-spy",
        entry_points={"d5.hooks": {"spy": "d5_spy_plugin"}},
        modules={"d5_spy_plugin.py": _spy_source(hooks)},
    )
    recipe = tmp_path / "spy.toml"
    recipe.write_text(RECIPE)
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_", "D5_SPY"))
    }
    environ.update(PYTHONPATH=str(site), D5_SPY_LOG=str(log), D5_NOISE_FLOOR="0.03")
    tiny = ["--processes", "1", "--time-budget", "0.02", "--min-samples", "6", "--warmup", "1"]

    def d5(*args: str, code: int = 0, env: dict[str, str] | None = None) -> str:
        step = " ".join(args[:2]) if args[0] != "list-plugins" else CHECK
        proc = subprocess.run(
            [str(D5), *args], capture_output=True, text=True, timeout=120,
            env={**environ, "D5_SPY_STEP": step, **(env or {})},
        )  # fmt: skip
        assert proc.returncode == code, f"d5 {' '.join(args)}: {proc.stderr}"
        return proc.stdout

    d5("list-plugins", "--check")
    d5("validate", "op", "Relu", "--backend", "custom", "--shape", "6x5", "--db", str(db))
    d5("bench", "op", "Relu", "--backends", "custom", "--suite", "spy-suite", *tiny,
       "--db", str(db))  # fmt: skip
    # traced: the framework profiler hook is asked for the executor
    d5("bench", "net", "spy-mlp", "--executors", "numpy", "--batch", "4", *tiny, "--db", str(db),
       "--trace", "framework")  # fmt: skip
    d5("validate", "net", "spy-mlp", "--executor", "numpy", "--db", str(db))
    d5("run", str(recipe), "--metric", "peak_memory", "--db", str(db))  # the memory hooks
    d5("report", "--last", "3", "--formats", "none", "--db", str(db),
       "-o", str(tmp_path / "report.html"))  # the figure hook  # fmt: skip
    # the custom-operator glue hook: asked for every framework's glue, even when the one
    # named has none (nothing is compiled, and the unknown name is refused)
    d5("results", "table", "--last", "1", "--kind", "op", "--db", str(db))  # the tables
    # a store named by a URL nobody opens: every plugin is asked, the spy among them
    d5("results", "list", "--db", "spy-store://nowhere/d5", code=2)
    d5("op", "build", str(CUSTOM_OP), "--frameworks", "spy-framework", code=2)
    assert d5("spy-hello") == "hello from the spy\n"
    if _mpi_ready():  # a rank killed without an exit status is what the parent diagnoses
        d5("run", str(recipe), "--ranks", "2", "--rank-timeout", "10", "--db", str(db), code=1,
           env={"D5_TEST_KILL_RANK": "1", "D5_TEST_KILL_AFTER_STEPS": "1"})  # fmt: skip
        d5("run", str(recipe), "--ranks", "2", "--scheme", "nope", "--db", str(db), code=2)

    # In this process: what no command reaches yet.
    from d5core.lv1.passes import apply_pass
    from d5core.lv1.zoo import build
    from d5core.plugins import reset_plugin_manager

    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("D5_SPY_LOG", str(log))
    monkeypatch.setenv("D5_SPY_STEP", "python")
    reset_plugin_manager(None)
    assert apply_pass(build("mlp"), "spy-pass").name == "mlp"

    calls = [line.split("\t") for line in log.read_text().splitlines()]
    fired = Counter(hook for _, hook, _ in calls)
    outside_check = {hook for step, hook, _ in calls if step != CHECK}
    expected = hooks if _mpi_ready() else {h: a for h, a in hooks.items() if h not in LEVEL_3}
    not_fired = sorted(
        h for h in expected if h not in (outside_check if h in MERGED_HOOKS else fired)
    )
    assert not_fired == [], f"hooks no flow reached: {not_fired}; calls: {dict(fired)}"
    assert {step for step, hook, _ in calls if hook == "bus:validation:0"} == {"validate op"}
    assert {step for step, hook, _ in calls if hook == "bus:validation:1"} == {"validate net"}
    assert set(MERGED_HOOKS) <= {hook for step, hook, _ in calls if step == CHECK}
    bench = [(hook, pid) for step, hook, pid in calls if step == "bench op"]
    parent = {pid for hook, pid in bench if hook == "d5_operator_shape_suites"}
    timing = {pid for hook, pid in bench if hook == "d5_synchronize"}
    assert timing and not timing & parent, "the bench worker, not the parent, synchronizes"
    print("hook calls:", dict(sorted(fired.items())))
