"""d5core.api.recurrent_attributes: the LSTM/GRU attributes every backend reads alike."""

from __future__ import annotations

from typing import Any

import pytest

from d5core.api import UsageError
from d5core.onnx import (
    RECURRENT_ACTIVATIONS,
    RECURRENT_DEFAULT_ACTIVATIONS,
    RECURRENT_GATES,
    RecurrentActivationSpec,
    onnx_signature,
    recurrent_attributes,
)


def _names(cfg: Any) -> list[list[str]]:
    return [[act.name for act in per] for per in cfg.activations]


def test_absent_attributes_take_the_onnx_defaults() -> None:
    cfg = recurrent_attributes("LSTM", {})
    assert (cfg.direction, cfg.directions, cfg.layout) == ("forward", 1, 0)
    assert cfg.hidden_size is None and cfg.clip is None
    assert not cfg.input_forget and not cfg.linear_before_reset
    assert _names(cfg) == [["Sigmoid", "Tanh", "Tanh"]]
    assert cfg.gates == 4 and cfg.default_activations


def test_none_values_count_as_absent_and_bytes_are_text() -> None:
    cfg = recurrent_attributes(
        "GRU",
        {"direction": b"bidirectional", "clip": None, "linear_before_reset": 1, "layout": 1},
    )
    assert (cfg.direction, cfg.directions, cfg.layout) == ("bidirectional", 2, 1)
    assert cfg.linear_before_reset and cfg.gates == 3
    assert _names(cfg) == [["Sigmoid", "Tanh"], ["Sigmoid", "Tanh"]]


def test_alpha_and_beta_go_in_order_to_the_activations_that_take_them() -> None:
    cfg = recurrent_attributes(
        "LSTM",
        {
            "direction": "bidirectional",
            "activations": [b"hardsigmoid", "Tanh", "LeakyRelu", "Affine", "elu", "ScaledTanh"],
            "activation_alpha": [0.3, 0.02, 2.0],
            "activation_beta": [0.4],
        },
    )
    assert cfg.activations == (
        (
            RecurrentActivationSpec("HardSigmoid", 0.3, 0.4),
            RecurrentActivationSpec("Tanh", 0.0, 0.0),
            RecurrentActivationSpec("LeakyRelu", 0.02, 0.0),
        ),
        (
            # the lists ran out: each takes its ONNX default
            RecurrentActivationSpec("Affine", 2.0, 0.0),
            RecurrentActivationSpec("Elu", 1.0, 0.0),
            RecurrentActivationSpec("ScaledTanh", 1.0, 1.0),
        ),
    )
    assert not cfg.default_activations


def test_the_tables_agree_with_the_signatures() -> None:
    assert set(RECURRENT_GATES) == set(RECURRENT_DEFAULT_ACTIVATIONS) == {"LSTM", "GRU"}
    for op, defaults in RECURRENT_DEFAULT_ACTIVATIONS.items():
        assert set(defaults) <= set(RECURRENT_ACTIVATIONS)
        assert "activations" in onnx_signature(op).attribute_defaults
    assert RECURRENT_ACTIVATIONS["HardSigmoid"].alpha == pytest.approx(0.2)
    assert not RECURRENT_ACTIVATIONS["Tanh"].uses_alpha


@pytest.mark.parametrize(
    ("op", "attributes", "pattern"),
    [
        ("LSTM", {"direction": "up"}, r"^LSTM: direction must be forward, reverse or bidir"),
        ("GRU", {"layout": 2}, r"^GRU: layout must be 0 or 1, not 2$"),
        ("GRU", {"clip": 0.0}, r"^GRU: clip must be positive, not 0.0$"),
        ("LSTM", {"activations": ["Tanh"]}, r"^LSTM: activations has 1 names but 3 are needed"),
        (
            "GRU",
            {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh"]},
            r"^GRU: activations has 2 names but 4 are needed \(2 per direction, for 2",
        ),
        ("GRU", {"activations": ["Swish", "Tanh"]}, r"^GRU: activation Swish is not supported"),
        ("RNN", {}, r"^RNN: 'RNN' is not a recurrent layer; use one of LSTM, GRU$"),
    ],
)
def test_bad_attributes_are_one_line_starting_with_where(
    op: str, attributes: dict[str, Any], pattern: str
) -> None:
    with pytest.raises(UsageError, match=pattern) as info:
        recurrent_attributes(op, attributes, op)
    assert "\n" not in str(info.value)


def test_without_where_the_message_is_bare() -> None:
    with pytest.raises(UsageError, match=r"^direction must be"):
        recurrent_attributes("LSTM", {"direction": "sideways"})


def test_fitting_shapes_pass_in_either_layout() -> None:
    # LSTM, bidirectional, hidden 2, input 3, batch 4, 5 steps
    time_first = recurrent_attributes("LSTM", {"direction": "bidirectional"})
    state = (2, 4, 2)
    time_first.check_shapes(
        [(5, 4, 3), (2, 8, 3), (2, 8, 2), (2, 16), (4,), state, state, (2, 6)], "LSTM"
    )
    batch_first = recurrent_attributes("GRU", {"layout": 1, "hidden_size": 2})
    batch_first.check_shapes([(4, 5, 3), (1, 6, 3), (1, 6, 2), None, None, (4, 1, 2)])


@pytest.mark.parametrize(
    ("shapes", "pattern"),
    [
        ([(5, 3), (1, 6, 3), (1, 6, 2)], r"^GRU: X must have rank 3 \(seq_length"),
        ([(5, 4, 3), (1, 6, 3), (1, 8, 2)], r"^GRU: R must have shape \(num_directions=1, 3\*"),
        ([(5, 4, 3), (1, 6, 3), (1, 9, 3)], r"^GRU: hidden_size is 2 but R of shape \(1, 9, 3\)"),
        ([(5, 4, 3), (1, 6, 4), (1, 6, 2)], r"^GRU: input W must have shape \(1, 6, 3\) for X"),
        (
            [(5, 4, 3), (1, 6, 3), (1, 6, 2), None, (5,)],
            r"^GRU: input sequence_lens must have shape \(4,\)",
        ),
        ([(5, 4, 3), None, (1, 6, 2)], r"^GRU: X, W and R are required$"),
    ],
)
def test_misfitting_shapes_are_one_line(shapes: list[Any], pattern: str) -> None:
    cfg = recurrent_attributes("GRU", {"hidden_size": 2})
    with pytest.raises(UsageError, match=pattern) as info:
        cfg.check_shapes(shapes, "GRU")
    assert "\n" not in str(info.value)
