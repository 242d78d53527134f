"""Bad input, by class, across d5's commands (issue 28, section 3): every path argument
(a directory, a path under a regular file, a device, a file of another format), every
number (negative, zero, NaN, infinite, absurdly large), every name (unknown, with shell
metacharacters) and every file (binary, empty, truncated: recipes, ONNX models, stores).

Each case must end the way bad input ends: exit 2, one line ``d5: error: ...`` on
standard error, no traceback. The commands run in this process (``d5_cli``); every case
is refused before any measurement starts, so the sweep stays quick.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from d5core.results.store import ResultsStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = str(REPO / "recipes" / "digits-mlp.toml")


#: A training recipe on an ``.npz`` dataset: ``{path}`` and ``{mmap}`` filled in.
_NPZ_RECIPE = """
[fixed]
model = "mlp"
model_options = {{ hidden = [4] }}
dataset = "npz"
dataset_options = {{ path = "{path}", num_classes = 2, mmap = {mmap} }}
epochs = 1
[mutable]
executor = "numpy"
optimizer = "sgd"
lr = 0.1
batch_size = 4
[metrics]
final_test_accuracy = {{ min = 0.0 }}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The bad files and folders the cases name, by key."""
    root = tmp_path_factory.mktemp("bad-input")
    made: dict[str, str] = {"root": str(root)}

    def write(name: str, data: bytes) -> None:
        (root / name).write_bytes(data)
        made[name] = str(root / name)

    binary = bytes(range(256)) * 8
    write("afile", b"x\n")
    write("text.sqlite", b"not a database\n")
    write("binary.sqlite", binary)
    write("empty.toml", b"")
    write("binary.toml", b"\xdd\xff" + binary)
    write("truncated.toml", Path(RECIPE).read_bytes()[:200])
    write("empty.py", b"")
    write("empty.onnx", b"")
    write("binary.onnx", binary)
    string_input = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "strings",
            [helper.make_tensor_value_info("x", TensorProto.STRING, [None, 3])],
            [helper.make_tensor_value_info("y", TensorProto.STRING, [None, 3])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    write("string.onnx", string_input.SerializeToString())
    write("truncated.onnx", string_input.SerializeToString()[:40])
    for folder in ("folder", "folder.onnx", "folder.toml", "folder.html"):
        (root / folder).mkdir()
        made[folder] = str(root / folder)
    arrays = root / "good.npz"
    np.savez(arrays, x=np.zeros((8, 4), dtype=np.float32), y=np.arange(8) % 2)
    write("empty.npz", b"")
    write("binary.npz", binary)
    write("truncated.npz", arrays.read_bytes()[: arrays.stat().st_size // 2])
    for kind in ("empty", "binary", "truncated"):
        for mmap in ("false", "true"):
            recipe = _NPZ_RECIPE.format(path=made[f"{kind}.npz"], mmap=mmap)
            write(f"{kind}-{mmap}.toml", recipe.encode())
    good = root / "good.sqlite"
    with ResultsStore.open(good) as store:
        made["run"] = store.record_measurement_run("kept", {"time": [1.0, 2.0, 3.0]})
    made["good.sqlite"] = str(good)
    data = good.read_bytes()
    write("truncated.sqlite", data[: len(data) // 3])
    return made


RUN = ("run", RECIPE)
NET = ("bench", "net", "--executors", "numpy", "--processes", "1")
OP = ("bench", "op", "Relu", "--backends", "numpy", "--shape", "4x4")

#: id -> (arguments, environment); ``{key}`` is replaced by ``files[key]``.
CASES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    # paths: the results database
    "db-is-a-folder": (("results", "list", "--db", "{folder}"), {}),
    "db-under-a-file": (("results", "list", "--db", "{afile}/x.sqlite"), {}),
    "db-is-a-device": (("results", "list", "--db", "/dev/null"), {}),
    "db-is-text": (("results", "list", "--db", "{text.sqlite}"), {}),
    "db-is-binary": (("results", "list", "--db", "{binary.sqlite}"), {}),
    "db-is-truncated": (("results", "list", "--db", "{truncated.sqlite}"), {}),
    "run-db-under-a-file": ((*RUN, "--db", "{afile}/x.sqlite"), {}),
    "run-db-is-a-device": ((*RUN, "--db", "/dev/null"), {}),
    "env-db-is-a-device": (("results", "list"), {"D5_DB": "/dev/null"}),
    "calibrate-db-is-a-device": (("calibrate", "--db", "/dev/null"), {}),
    "calibrate-db-is-binary": (("calibrate", "--db", "{binary.sqlite}"), {}),
    "env-db-is-a-folder": (("results", "list"), {"D5_DB": "{folder}"}),
    # paths: what d5 writes
    "report-to-a-folder": (("report", "--db", "{good.sqlite}", "-o", "{folder.html}"), {}),
    "report-under-a-file": (("report", "--db", "{good.sqlite}", "-o", "{afile}/r.html"), {}),
    "report-to-a-device": (("report", "--db", "{good.sqlite}", "-o", "/dev/null"), {}),
    "export-to-a-folder": (
        ("results", "export", "--db", "{good.sqlite}", "-o", "{folder}", "{run}"),
        {},
    ),
    "export-under-a-file": (
        ("results", "export", "--db", "{good.sqlite}", "-o", "{afile}/x.json", "{run}"),
        {},
    ),
    # files: recipes
    "recipe-is-a-folder": (("run", "{folder.toml}"), {}),
    "recipe-is-empty": (("run", "{empty.toml}"), {}),
    "recipe-is-binary": (("run", "{binary.toml}"), {}),
    "recipe-is-truncated": (("run", "{truncated.toml}"), {}),
    "recipe-is-a-device": (("run", "/dev/null"), {}),
    "recipe-py-is-empty": (("run", "{empty.py}"), {}),
    "recipe-is-missing": (("run", "{root}/nowhere.toml"), {}),
    # files: datasets (read, and memory-mapped)
    "npz-is-empty": (("run", "{empty-false.toml}"), {}),
    "npz-is-binary": (("run", "{binary-false.toml}"), {}),
    "npz-is-truncated": (("run", "{truncated-false.toml}"), {}),
    "npz-mapped-is-empty": (("run", "{empty-true.toml}"), {}),
    "npz-mapped-is-binary": (("run", "{binary-true.toml}"), {}),
    "npz-mapped-is-truncated": (("run", "{truncated-true.toml}"), {}),
    # files: models
    "model-is-empty": ((*NET, "{empty.onnx}"), {}),
    "model-is-binary": ((*NET, "{binary.onnx}"), {}),
    "model-is-truncated": ((*NET, "{truncated.onnx}"), {}),
    "model-is-a-folder": ((*NET, "{folder.onnx}"), {}),
    "model-takes-strings": (
        ("bench", "net", "--executors", "onnxruntime", "--processes", "1", "{string.onnx}"),
        {},
    ),
    # numbers: d5 run
    "lr-nan": ((*RUN, "--set", "lr=nan"), {}),
    "lr-inf": ((*RUN, "--set", "lr=inf"), {}),
    "lr-negative": ((*RUN, "--set", "lr=-0.1"), {}),
    "batch-zero": ((*RUN, "--set", "batch_size=0"), {}),
    "batch-absurd": ((*RUN, "--set", "batch_size=1000000000000"), {}),
    "eval-batch-negative": ((*RUN, "--set", "eval_batch_size=-1"), {}),
    "repeat-zero": ((*RUN, "--repeat", "0"), {}),
    "seed-negative": ((*RUN, "--seed", "-1"), {}),
    "ranks-zero": ((*RUN, "--ranks", "0"), {}),
    "rank-timeout-nan": ((*RUN, "--ranks", "2", "--rank-timeout", "nan"), {}),
    "rank-timeout-inf": ((*RUN, "--ranks", "2", "--rank-timeout", "inf"), {}),
    "optimizer-option-nan": ((*RUN, "--set", "optimizer_options={momentum=nan}"), {}),
    "optimizer-option-negative": ((*RUN, "--set", "optimizer_options={momentum=-1}"), {}),
    "schedule-negative": ((*RUN, "--set", 'schedule={name="cosine", lr=-0.1}'), {}),
    "schedule-nan": ((*RUN, "--set", 'schedule={name="step", lr=0.1, step_size=1, gamma=nan}'), {}),
    "schedule-fractional-step": (
        (*RUN, "--set", 'schedule={name="step", lr=0.1, step_size=0.5}'),
        {},
    ),
    "warmup-negative-factor": (
        (*RUN, "--set", 'schedule={name="warmup", schedule=0.1, warmup_steps=10, start_factor=-1}'),
        {},
    ),
    "modifier-negative": ((*RUN, "--set", 'modifiers=[{name="clip_norm", max_norm=-1}]'), {}),
    "modifier-nan": ((*RUN, "--set", 'modifiers=[{name="clip_norm", max_norm=nan}]'), {}),
    # names: d5 run
    "executor-unknown": ((*RUN, "--set", "executor=bogus"), {}),
    "executor-shell": ((*RUN, "--set", "executor=numpy;rm -rf x"), {}),
    "optimizer-unknown": ((*RUN, "--set", "optimizer=bogus"), {}),
    "transform-unknown": ((*RUN, "--set", 'transforms=[{name="bogus"}]'), {}),
    "metric-unknown": ((*RUN, "--metric", "bogus"), {}),
    "set-key-shell": ((*RUN, "--set", "$(id)=1"), {}),
    "tag-newline": ((*RUN, "--tag", "a\nb"), {}),
    # environment variables
    "data-dir-is-a-device": (RUN, {"D5_DATA_DIR": "/dev/null"}),
    "data-dir-is-a-file": (RUN, {"D5_DATA_DIR": "{afile}"}),
    "data-dir-is-missing": (RUN, {"D5_DATA_DIR": "{root}/nowhere"}),
    "communicator-unknown": (RUN, {"D5_DISTRIBUTED_COMMUNICATOR": "bogus"}),
    # names and numbers: reading the store
    "run-unknown": (("results", "show", "--db", "{good.sqlite}", "nope"), {}),
    "run-id-sql": (("results", "show", "--db", "{good.sqlite}", "'; DROP TABLE runs; --"), {}),
    "list-limit-zero": (("results", "list", "--db", "{good.sqlite}", "-n", "0"), {}),
    "compare-alpha-2": (
        ("results", "compare", "--db", "{good.sqlite}", "--alpha", "2", "a", "b"),
        {},
    ),
    "table-by-unknown": (
        ("results", "table", "--db", "{good.sqlite}", "--last", "1", "--by", "bogus"),
        {},
    ),
    "report-last-zero": (("report", "--db", "{good.sqlite}", "--last", "0"), {}),
    "report-formats-unknown": (("report", "--db", "{good.sqlite}", "--formats", "gif"), {}),
    "report-kind-unknown": (("report", "--db", "{good.sqlite}", "--kind", "bogus"), {}),
    "model-unknown": ((*NET, "nope"), {}),
    "model-shell": ((*NET, "mlp;id"), {}),
    "net-batch-zero": ((*NET, "--batch", "0", "mlp"), {}),
    "net-batch-absurd": ((*NET, "--batch", "1000000000000", "mlp"), {}),
    "validate-net-batch-zero": (
        ("validate", "net", "mlp", "--executor", "numpy", "--batch", "0"),
        {},
    ),
    "net-threads-zero-without-scenario": ((*NET, "--threads", "0", "mlp"), {}),
    # numbers: the measurement options of bench
    "op-time-budget-absurd": ((*OP, "--time-budget", "1e300"), {}),
    "op-time-budget-nan": ((*OP, "--time-budget", "nan"), {}),
    "op-warmup-absurd": ((*OP, "--warmup", "1000000000000"), {}),
    "op-max-samples-absurd": ((*OP, "--max-samples", "1000000000000"), {}),
    "op-processes-absurd": ((*OP, "--processes", "100000000"), {}),
    "repeat-absurd": ((*RUN, "--repeat", "1000000000000"), {}),
}


def _fill(text: str, files: dict[str, str]) -> str:
    for key, value in files.items():
        text = text.replace("{" + key + "}", value)
    return text


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(case: str, files, d5_cli, monkeypatch, tmp_path):
    args, env = CASES[case]
    uses_dev_null = "/dev/null" in args or "/dev/null" in env.values()
    if uses_dev_null and not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null here")
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    for key, value in env.items():
        monkeypatch.setenv(key, _fill(value, files))
    monkeypatch.chdir(tmp_path)
    result = d5_cli(*(_fill(a, files) for a in args))
    errors = [line for line in result.stderr.splitlines() if not line.startswith("d5: warning")]
    assert result.exit_code == 2, result.stderr or result.stdout[-800:]
    assert len(errors) == 1 and errors[0].startswith("d5: error: "), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_output_to_a_full_device_is_one_line_and_exit_2(files, tmp_path):
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "d5core", "results", "list", "--db", files["good.sqlite"]],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], done.stderr
    assert "internal error" not in done.stderr and "Exception ignored" not in done.stderr


def test_the_sweep_models_are_what_they_claim(files) -> None:
    with pytest.raises(Exception):  # noqa: B017 (any parse error: the file is damaged)
        onnx.load_from_string(Path(files["truncated.onnx"]).read_bytes())
    model = onnx.load(files["string.onnx"])
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.STRING
