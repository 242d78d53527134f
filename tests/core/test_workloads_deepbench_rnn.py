"""DeepBench's recurrent layers as LSTM and GRU problems, their suites and FLOP counts."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from d5core.errors import UsageError
from d5core.lv0.jobs import problem_from_json, problem_to_json
from d5core.lv0.workloads.deepbench import RNN_INFERENCE_DEVICE, RNN_INFERENCE_SERVER, RNN_TRAINING
from d5core.lv0.workloads.problems import (
    DEFAULT_PROBLEMS,
    SUITES,
    count_flops,
    rnn_problem,
    suite,
)


def test_deepbench_rnn_sets_are_complete():
    assert Counter(cell for *_, cell in RNN_TRAINING) == {"vanilla": 12, "lstm": 22, "gru": 18}
    assert Counter(cell for *_, cell in RNN_INFERENCE_SERVER) == {"lstm": 15, "gru": 54}
    assert len(RNN_INFERENCE_DEVICE) == 3
    assert len(set(RNN_TRAINING)) == len(RNN_TRAINING)
    assert len(set(RNN_INFERENCE_SERVER)) == len(RNN_INFERENCE_SERVER)


def test_rnn_suites_hold_every_lstm_and_gru_and_no_vanilla_cell():
    train, inference = SUITES["deepbench-rnn-train"], SUITES["deepbench-rnn-inference"]
    assert Counter(p.op for p in train) == {"LSTM": 22, "GRU": 18}
    assert Counter(p.op for p in inference) == {"LSTM": 15, "GRU": 54}
    assert SUITES["deepbench-rnn"] == train + inference
    labels = [p.label for p in SUITES["deepbench-rnn"]]
    assert len(set(labels)) == len(labels)
    assert [p.op for p in suite("deepbench-rnn-train", "GRU")] == ["GRU"] * 18
    assert {p.op for p in SUITES["cpu-small-rnn"]} == {"LSTM", "GRU"}
    # the existing mixed suites keep only operators every backend has
    assert {p.op for p in SUITES["cpu-small"]} == {"Gemm", "Conv"}


def test_rnn_problem_follows_deepbench_and_onnx_layouts():
    p = rnn_problem(8, 2, 5, "lstm")
    assert p.op == "LSTM" and p.label == "lstm h=8 n=2 t=5"
    assert [s.shape for s in p.inputs] == [(5, 2, 8), (1, 32, 8), (1, 32, 8), (1, 64)]
    assert p.inputs[3].optional and p.attributes == {"hidden_size": 8}
    # W and R products at every step: 2 * T * N * 4H * (I + H)
    assert p.flops == 2 * 5 * 2 * 32 * 16
    g = rnn_problem(8, 2, 5, "gru")
    assert [s.shape for s in g.inputs][1:] == [(1, 24, 8), (1, 24, 8), (1, 48)]
    assert g.flops == 2 * 5 * 2 * 24 * 16
    assert g.with_shapes([(5, 2, 8), (1, 24, 8), (1, 24, 8)]).inputs[-1].name == "R"


def test_rnn_problem_refuses_a_cell_without_an_onnx_operator():
    with pytest.raises(UsageError, match=r"no ONNX operator for DeepBench cell 'vanilla'"):
        rnn_problem(8, 2, 5, "vanilla")


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_recurrent_flops_count_both_directions_and_either_layout(op):
    gates = 4 if op == "LSTM" else 3
    t, n, i, h = 6, 3, 5, 4
    one = count_flops(op, [(t, n, i), (1, gates * h, i), (1, gates * h, h)], {})
    assert one == 2 * t * n * gates * h * (i + h)
    two = count_flops(op, [(t, n, i), (2, gates * h, i), (2, gates * h, h)], {})
    assert two == 2 * one
    batch_first = count_flops(op, [(n, t, i), (1, gates * h, i), (1, gates * h, h)], {"layout": 1})
    assert batch_first == one
    assert count_flops(op, [(t, n), (1, gates * h, i), (1, gates * h, h)], {}) == 0


def test_default_recurrent_problems_and_suites_survive_the_trip_to_a_worker():
    problems = [DEFAULT_PROBLEMS["LSTM"], DEFAULT_PROBLEMS["GRU"], *SUITES["cpu-small-rnn"]]
    for problem in problems:
        data = json.loads(json.dumps(problem_to_json(problem)))
        assert problem_from_json(data) == problem
    lstm = DEFAULT_PROBLEMS["LSTM"]
    assert lstm.flops > 0 and lstm.nbytes() > 0
    arrays = DEFAULT_PROBLEMS["GRU"].make_inputs("float32")
    assert arrays[4].dtype.kind == "i" and arrays[4].tolist() == [4, 2]
