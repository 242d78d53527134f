"""Accuracy mode's checker (d5core.loadgen.accuracy, issue 19 item 3): the decoder of
LoadGen's mlperf_log_accuracy.json on hand-written logs, the per-sample comparison, while
check_accuracy end to end, which needs the numpy executor, is tested in the integration
lane (tests/integration/test_inference_accuracy_numpy.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.loadgen.accuracy import (
    ACCURACY_LOG,
    LoggedSample,
    compare_logged,
    decode_sample,
    read_accuracy_log,
    reference_outputs,
)


def _write(path: Path, entries: list[dict[str, object]]) -> Path:
    """An accuracy log laid out as LoadGen 6.0.17 writes it (one entry a line)."""
    lines = ",\n".join(
        f'{{ "seq_id" : {e["seq_id"]}, "qsl_idx" : {e["qsl_idx"]}, "data" : "{e["data"]}" }}'
        for e in entries
    )
    path.write_text(f"[\n{lines}\n]\n", encoding="utf-8")
    return path


def test_the_decoder_reads_a_hand_written_log(tmp_path):
    # 1.0f, 2.0f and 0.5f little-endian, upper-case hex as LoadGen writes it
    log = _write(
        tmp_path / ACCURACY_LOG,
        [
            {"seq_id": 0, "qsl_idx": 2, "data": "0000803F00000040"},
            {"seq_id": 1, "qsl_idx": 0, "data": "0000003F"},
            {"seq_id": 2, "qsl_idx": 7, "data": ""},
        ],
    )
    entries = read_accuracy_log(log)
    assert [(e.seq_id, e.qsl_idx) for e in entries] == [(0, 2), (1, 0), (2, 7)]
    assert np.frombuffer(entries[0].data, np.float32).tolist() == [1.0, 2.0]
    assert np.frombuffer(entries[1].data, np.float32).tolist() == [0.5]
    assert entries[2].data == b""


def test_an_empty_log_has_no_entries(tmp_path):
    log = tmp_path / ACCURACY_LOG
    log.write_text("[\n]\n")
    assert read_accuracy_log(log) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[\n{ "seq_id" : 0, "qsl_idx" : 1, "data" : "00"', "not valid JSON"),
        ('{"qsl_idx": 1}', "not a list"),
        ('[{ "seq_id" : 0, "qsl_idx" : -1, "data" : "00" }]', "qsl_idx -1"),
        ('[{ "seq_id" : 0, "qsl_idx" : "3", "data" : "00" }]', "qsl_idx '3'"),
        ('[{ "seq_id" : 0, "qsl_idx" : 1, "data" : "0G" }]', "not hexadecimal"),
        ('[{ "seq_id" : 0, "qsl_idx" : 1, "data" : 7 }]', "not a hex string"),
        ("[3]", "not an object"),
    ],
)
def test_a_broken_log_is_refused_in_one_line(tmp_path, text, expected):
    log = tmp_path / ACCURACY_LOG
    log.write_text(text)
    with pytest.raises(UsageError, match=expected) as info:
        read_accuracy_log(log)
    assert "\n" not in str(info.value)


def test_a_missing_log_says_how_to_make_one(tmp_path):
    with pytest.raises(UsageError, match="--accuracy"):
        read_accuracy_log(tmp_path / "nothing.json")


def test_decode_cuts_the_bytes_into_the_outputs_in_order():
    first = np.arange(6, dtype=np.float32).reshape(2, 3)
    second = np.array([7, -1], dtype=np.int64)
    arrays = decode_sample(first.tobytes() + second.tobytes(), [first * 0, second * 0])
    assert arrays[0].dtype == np.float32 and arrays[0].shape == (2, 3)
    np.testing.assert_array_equal(arrays[0], first)
    assert arrays[1].dtype == np.int64
    np.testing.assert_array_equal(arrays[1], second)


def test_decode_refuses_a_byte_count_that_does_not_fit():
    with pytest.raises(ValueError, match=r"8 bytes logged where 12 were expected \(float32\[3\]\)"):
        decode_sample(b"\0" * 8, [np.zeros(3, np.float32)])


def _logged(index: int, *arrays: np.ndarray, seq: int | None = None) -> LoggedSample:
    data = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
    return LoggedSample(seq_id=index if seq is None else seq, qsl_idx=index, data=data)


def test_compare_passes_outputs_within_tolerance_and_names_the_worst():
    expected = {i: [np.full(4, float(i + 1), np.float32)] for i in range(3)}
    logged = [_logged(i, expected[i][0] * np.float32(1 + 1e-6 * i)) for i in range(3)]
    verdict = compare_logged(logged, expected, ["prob"])
    assert verdict["passed"] and verdict["checked"] == 3 and verdict["failed"] == 0
    worst = verdict["worst"]
    assert worst["sample"] == 2 and worst["output"] == "prob"
    assert 0 < worst["tol_ratio"] <= 1


def test_compare_fails_a_perturbed_sample_and_names_it():
    expected = {i: [np.linspace(-1, 1, 10, dtype=np.float32)] for i in range(4)}
    logged = [_logged(i, expected[i][0]) for i in range(4)]
    logged[3] = _logged(3, expected[3][0] + np.float32(1e-2))
    verdict = compare_logged(logged, expected, ["logits"])
    assert not verdict["passed"] and verdict["failed"] == 1
    assert verdict["worst"]["sample"] == 3 and verdict["worst"]["metric"] == "tol_ratio"
    assert verdict["worst"]["max_abs"] == pytest.approx(1e-2, rel=1e-3)
    assert verdict["worst"]["tol_ratio"] > 100
    assert verdict["failures"][0].startswith("sample 3, output 'logits': tol_ratio: ")


def test_a_looser_tolerance_lets_the_same_sample_pass():
    expected = {0: [np.linspace(-1, 1, 10, dtype=np.float32)]}
    logged = [_logged(0, expected[0][0] + np.float32(1e-2))]
    loose = {"float32": {"rtol": 0.0, "atol": 2e-2}}
    assert compare_logged(logged, expected, ["y"], tolerances=loose)["passed"]


def test_wrong_bytes_and_unknown_samples_fail_as_the_worst():
    expected = {0: [np.zeros(3, np.float32)]}
    logged = [
        _logged(0, np.zeros(3, np.float32)),
        LoggedSample(seq_id=1, qsl_idx=0, data=b"\0" * 4),
        LoggedSample(seq_id=2, qsl_idx=9, data=b""),
    ]
    verdict = compare_logged(logged, expected, ["y"])
    assert verdict["failed"] == 2 and not verdict["passed"]
    assert verdict["worst"]["metric"] == "bytes" and verdict["worst"]["tol_ratio"] is None
    assert "4 bytes logged where 12 were expected" in verdict["failures"][0]
    assert "sample index 9 is not in the sample library" in verdict["failures"][1]
    json.dumps(verdict)  # JSON-ready: no infinity left in it


def test_an_output_logged_in_another_dtype_fails_on_dtype():
    expected = {0: [np.ones(3, np.float32)]}
    logged = [_logged(0, np.ones(3, np.float64))]
    by_reference = compare_logged(logged, expected, ["y"])
    assert by_reference["worst"]["metric"] == "bytes"
    by_layout = compare_logged(logged, expected, ["y"], layout=[np.empty(3, np.float64)])
    assert not by_layout["passed"] and by_layout["worst"]["metric"] == "dtype"
    assert "dtype float64 where float32 was expected" in by_layout["failures"][0]


def test_nothing_logged_does_not_pass():
    verdict = compare_logged([], {}, ["y"])
    assert verdict == {"passed": False, "checked": 0, "failed": 0, "worst": None, "failures": []}


class _Doubler:
    """An executor stand-in: y = 2x, and it records the batches it was given."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def inference(self, feeds):
        x = feeds["x"]
        self.batches.append(int(x.shape[0]))
        return {"y": 2 * x}


class _Info:
    def __init__(self, name: str, shape: tuple[int | None, ...]) -> None:
        self.name, self.shape = name, shape


class _Net:
    def __init__(self, batch: int | None) -> None:
        self.inputs = [_Info("x", (batch, 3))]
        self.outputs = [_Info("y", (batch, 3))]


@pytest.mark.parametrize(("batch", "runs"), [(None, [32, 8]), (4, [4] * 10)])
def test_reference_outputs_batch_and_pad_as_the_model_allows(batch, runs):
    samples = [{"x": np.full(3, float(i), np.float32)} for i in range(40)]
    executor = _Doubler()
    outputs = reference_outputs(executor, _Net(batch), samples)  # type: ignore[arg-type]
    assert executor.batches == runs
    assert len(outputs) == 40
    np.testing.assert_array_equal(outputs[39][0], np.full(3, 78.0, np.float32))


def test_a_sample_of_several_rows_is_refused():
    with pytest.raises(UsageError, match="a sample is one row"):
        reference_outputs(_Doubler(), _Net(None), [{"x": np.zeros((2, 3))}])  # type: ignore[arg-type]


# -- the wrong-executor fixture (tests/fixtures/wrong-executor) ----------------------------
# (check_accuracy end to end and the fixture's outputs run the numpy executor: they are in
# tests/integration/test_inference_accuracy_numpy.py, since this lane has no plugin)

WRONGEXEC = Path(__file__).resolve().parents[1] / "fixtures" / "wrong-executor"


def test_the_wrong_executor_refuses_an_offset_that_is_not_a_number(monkeypatch):
    monkeypatch.syspath_prepend(str(WRONGEXEC / "d5-plugin-wrongexec"))
    monkeypatch.setenv("D5_WRONGEXEC_OFFSET", "nan")
    from d5_plugin_wrongexec.executor import offset

    with pytest.raises(UsageError, match="D5_WRONGEXEC_OFFSET must be a finite number"):
        offset()
