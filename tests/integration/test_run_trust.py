"""`d5 run` end to end: FIXED cannot be bypassed, the data read is hashed, time to
accuracy starts at the data, runs are stored while they go, and bad input is exit 2
(issue 11, items 13, 14, 16 and 18)."""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.results.store import FINAL_STATUSES, ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"
DIGITS = RECIPE.read_text()


def _recipe(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(d5_cli: Any, db: Path, recipe: Path, *args: str) -> tuple[Any, dict[str, Any] | None]:
    """The command's outcome and its one run's JSON (``None`` when nothing was printed)."""
    result = d5_cli("run", str(recipe), "--db", str(db), "--json", *args)
    if not result.stdout.strip():
        return result, None
    (doc,) = read_json(result.stdout, "run")["runs"]
    return result, doc


def _runs(db: Path) -> list[Any]:
    if not db.exists():
        return []
    with ResultsStore.open(db) as store:
        return store.list_runs()


def _idx(array: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(root: Path, seed: int, n: int = 32, gz: bool = False) -> None:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for prefix in ("train", "t10k"):
        for kind, data in (
            ("images-idx3", rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)),
            ("labels-idx1", rng.integers(0, 10, size=n, dtype=np.uint8)),
        ):
            raw = _idx(data)
            name = f"{prefix}-{kind}-ubyte"
            if gz:
                (root / f"{name}.gz").write_bytes(gzip.compress(raw))
            else:
                (root / name).write_bytes(raw)


MNIST = """
[fixed]
model = "mlp"
model_options = { hidden = [8] }
dataset = "mnist"
dataset_options = { flatten = true }
epochs = 1

[mutable]
executor = "numpy"
optimizer = "sgd"
lr = 0.01
batch_size = 16

[metrics]
steps = { min = 1 }
"""


# -- item 13: FIXED cannot be bypassed -------------------------------------------------


def test_seed_option_cannot_change_a_seed_frozen_in_fixed(d5_cli, tmp_path):
    frozen = _recipe(tmp_path, DIGITS.replace("epochs = 30", "epochs = 30\nseed = 3"))
    db = tmp_path / "r.sqlite"
    result, _ = _run(d5_cli, db, frozen, "--seed", "5")
    assert result.exit_code == 2
    assert "seed is FIXED in recipe r" in result.stderr and result.stderr.count("\n") == 1
    assert _runs(db) == []


def test_repeat_keeps_a_seed_frozen_in_fixed(d5_cli, tmp_path):
    frozen = _recipe(tmp_path, DIGITS.replace("epochs = 30", "epochs = 30\nseed = 3"))
    db = tmp_path / "r.sqlite"
    result = d5_cli("run", str(frozen), "--db", str(db), "--json", "--repeat", "2")
    assert result.exit_code == 0, result.stderr
    assert [r["seed"] for r in read_json(result.stdout, "run")["runs"]] == [3, 3]


def test_the_stored_hash_follows_overrides_but_not_the_seed(d5_cli, tmp_path):
    db = tmp_path / "r.sqlite"
    plain = _run(d5_cli, db, RECIPE)[1]
    other_seed = _run(d5_cli, db, RECIPE, "--seed", "1")[1]
    other_lr = _run(d5_cli, db, RECIPE, "--set", "lr=0.1")[1]
    assert plain and other_seed and other_lr
    assert plain["recipe_hash"] == other_seed["recipe_hash"] != other_lr["recipe_hash"]
    stored = {r.id: r.recipe_hash for r in _runs(db)}
    assert stored[other_lr["run_id"]] == other_lr["recipe_hash"]


def test_a_monkeypatching_python_recipe_cannot_smuggle_a_fixed_override(d5_cli, tmp_path):
    recipe = _recipe(
        tmp_path,
        "import d5core.lv2.recipes as r\n"
        "r.Recipe.with_overrides = lambda self, sets: self\n"
        "r.Recipe.settable = lambda self: ['epochs']\n"
        "FIXED = dict(model='mlp', model_options={'hidden': [64]}, dataset='digits',\n"
        "             sampler='shuffle', epochs=30, loss='cross_entropy', test_every='epoch',\n"
        "             target_accuracy=0.9)\n"
        "MUTABLE = dict(executor='numpy', optimizer='momentum', lr=0.05, batch_size=32)\n"
        "METRICS = {'final_test_accuracy': {'min': 0.9}, 'time_to_accuracy': {'max': 60}}\n",
        "patching.py",
    )
    db = tmp_path / "r.sqlite"
    smuggled, _ = _run(d5_cli, db, recipe, "--set", "epochs=1")
    assert smuggled.exit_code == 2 and "epochs is FIXED in recipe patching" in smuggled.stderr
    assert _runs(db) == []
    patched = _run(d5_cli, db, recipe)[1]
    genuine = _run(d5_cli, db, RECIPE)[1]
    assert patched and genuine and patched["recipe_hash"] == genuine["recipe_hash"]


def test_other_data_behind_d5_data_dir_gets_another_hash_and_is_recorded(
    d5_cli, tmp_path, monkeypatch
):
    recipe = _recipe(tmp_path, MNIST)
    db = tmp_path / "r.sqlite"
    docs = []
    for folder, seed in (("one", 1), ("two", 2)):
        _write_mnist(tmp_path / folder / "mnist", seed)
        monkeypatch.setenv("D5_DATA_DIR", str(tmp_path / folder))
        result, doc = _run(d5_cli, db, recipe)
        assert result.exit_code == 0, result.stderr
        docs.append(doc)
    assert docs[0]["recipe_hash"] != docs[1]["recipe_hash"]
    with ResultsStore.open(db) as store:
        data = store.get_run(docs[1]["run_id"]).config["data"]
    assert data["train"]["data_dir"] == str(tmp_path / "two")
    assert data["train"]["files"][0]["path"] == str(
        tmp_path / "two" / "mnist" / "train-images-idx3-ubyte"
    )
    assert len(data["test"]["sha256"]) == 64


# -- item 14: time to accuracy starts at the first touch of data --------------------------


def test_time_to_accuracy_counts_the_dataset_loading(monkeypatch):
    import time

    from d5core.lv2.assembly import prepare
    from d5core.lv2.datasets import digits

    original = digits.load_digits_dataset

    def slow(split: str, **options: Any) -> Any:
        time.sleep(0.4)
        return original(split, **options)

    monkeypatch.setattr(digits, "load_digits_dataset", slow)
    result = prepare(RECIPE, [], 0).trainer.run()
    assert result.time_to_accuracy is not None
    assert result.time_to_accuracy >= 0.8  # two splits loaded, 0.4 s each
    assert result.wall_s >= result.time_to_accuracy


def test_time_to_accuracy_never_exceeds_the_wall_time_when_run_start_is_slow_to_deliver():
    import time

    from d5core.hookspecs import hookimpl
    from d5core.lv2.assembly import prepare
    from d5core.lv2.trainer import RUN_START
    from d5core.plugins import get_plugin_manager

    class SlowListener:
        """Subscribes to ``run.start`` a callback that takes 0.2 s."""

        @hookimpl
        def d5_bus_subscribe(self, bus: Any) -> None:
            bus.subscribe(RUN_START, lambda _event: time.sleep(0.2))

    manager = get_plugin_manager()
    listener = SlowListener()
    manager.pluggy_manager.register(listener, "slow-listener")
    try:
        result = prepare(RECIPE, [], 0).trainer.run()
    finally:
        manager.pluggy_manager.unregister(listener)
    assert result.time_to_accuracy is not None
    assert result.wall_s >= result.time_to_accuracy


# -- item 16: runs are stored while they go, the store is checked first ---------------------


def _watch_second_test_pass(monkeypatch: pytest.MonkeyPatch, db: Path, then: Any) -> list[Any]:
    """Read the store from outside at the trainer's second test pass, then call ``then``."""
    from d5core.lv2.trainer import Trainer

    seen: list[Any] = []
    original = Trainer.evaluate

    def evaluate(self: Trainer, step: int, epoch: int) -> dict[str, Any]:
        if epoch == 1:
            with ResultsStore.open(db) as store:
                (run,) = store.list_runs()
                seen.append((run, {m.metric: m.n for m in store.measurements(run.id)}))
            then()
        return original(self, step, epoch)

    monkeypatch.setattr(Trainer, "evaluate", evaluate)
    return seen


def test_the_run_is_running_in_the_store_with_its_samples_during_training(
    d5_cli, tmp_path, monkeypatch
):
    db = tmp_path / "r.sqlite"
    seen = _watch_second_test_pass(monkeypatch, db, lambda: None)
    result, doc = _run(d5_cli, db, RECIPE, "--set", "lr=1e-9")  # never reaches the target
    assert result.exit_code == 1 and doc is not None  # its threshold fails, as meant
    run, counts = seen[0]
    assert run.status == "running" and run.id == doc["run_id"]
    assert counts == {"loss": 45, "step_time": 45, "throughput": 45, "test_accuracy": 1}
    assert _runs(db)[0].status == "complete"


def test_ctrl_c_during_training_keeps_the_run_with_its_samples(d5_cli, tmp_path, monkeypatch):
    def interrupt() -> None:
        raise KeyboardInterrupt

    db = tmp_path / "r.sqlite"
    _watch_second_test_pass(monkeypatch, db, interrupt)
    result, _ = _run(d5_cli, db, RECIPE, "--set", "lr=1e-9")
    assert result.exit_code == 130 and result.stderr.strip() == "d5: interrupted"
    (run,) = _runs(db)
    assert run.status == ("interrupted" if "interrupted" in FINAL_STATUSES else "incomplete")
    assert "Ctrl-C" in (run.error or "")
    with ResultsStore.open(db) as store:
        assert {m.metric: m.n for m in store.measurements(run.id)}["loss"] == 90


def test_a_read_only_database_fails_at_once_with_exit_2(d5_cli, tmp_path, monkeypatch):
    from d5core.lv2.datasets import digits

    db = tmp_path / "ro.sqlite"
    with ResultsStore.open(db):
        pass
    db.chmod(0o444)
    immutable = os.geteuid() == 0
    if immutable:
        chattr = shutil.which("chattr")
        if chattr is None or subprocess.run([chattr, "+i", str(db)]).returncode:
            pytest.skip("cannot make a file read-only for root here (no chattr +i)")
    loads: list[str] = []
    original = digits.load_digits_dataset
    monkeypatch.setattr(digits, "load_digits_dataset",
                        lambda split, **kw: loads.append(split) or original(split, **kw))  # fmt: skip
    try:
        result, _ = _run(d5_cli, db, RECIPE)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(db)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "is not writable" in result.stderr and loads == []


# -- item 18: bad input is a one-line exit 2 -----------------------------------------------


def test_a_truncated_gz_data_file_is_exit_2_not_aborted(d5_cli, tmp_path, monkeypatch):
    _write_mnist(tmp_path / "mnist", seed=1, gz=True)
    images = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    images.write_bytes(images.read_bytes()[:-40])
    monkeypatch.setenv("D5_DATA_DIR", str(tmp_path))
    db = tmp_path / "r.sqlite"
    recipe = _recipe(tmp_path, MNIST)
    result, _ = _run(d5_cli, db, recipe)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "is truncated or corrupt" in result.stderr and "aborted" not in result.stderr
    with pytest.raises(UsageError, match="is truncated or corrupt"):
        d5_cli("--debug", "run", str(recipe), "--db", str(db))
    assert _runs(db) == []


def test_negative_hidden_sizes_are_exit_2_before_anything_is_stored(d5_cli, tmp_path):
    recipe = _recipe(tmp_path, DIGITS.replace("hidden = [64]", "hidden = [-5]"))
    db = tmp_path / "r.sqlite"
    result, _ = _run(d5_cli, db, recipe)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "hidden must be a list of positive layer sizes" in result.stderr
    assert _runs(db) == []


def test_a_python_recipe_calling_sys_exit_does_not_set_d5s_exit_code(d5_cli, tmp_path):
    recipe = _recipe(tmp_path, "import sys\nsys.exit(7)\n", "exits.py")
    result, _ = _run(d5_cli, tmp_path / "r.sqlite", recipe)
    assert result.exit_code == 2 and "called sys.exit(7) while loading" in result.stderr


def test_a_latin1_recipe_and_an_accuracy_target_of_7_are_exit_2(d5_cli, tmp_path):
    latin = tmp_path / "latin.toml"
    latin.write_bytes(DIGITS.replace('"mlp"', '"mlp" # café').encode("latin-1"))
    seven = _recipe(tmp_path, DIGITS.replace("target_accuracy = 0.9", "target_accuracy = 7"))
    for recipe, message in ((latin, "is not UTF-8 text"), (seven, "in (0, 1], got 7")):
        result, _ = _run(d5_cli, tmp_path / "r.sqlite", recipe)
        assert result.exit_code == 2 and message in result.stderr
        assert result.stderr.count("\n") == 1


def test_a_negative_seed_is_exit_2(d5_cli, tmp_path):
    result, _ = _run(d5_cli, tmp_path / "r.sqlite", RECIPE, "--seed", "-1")
    assert result.exit_code == 2 and "--seed" in result.stderr
