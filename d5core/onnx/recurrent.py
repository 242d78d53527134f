"""The framework-independent part of ONNX's recurrent layers, LSTM and GRU.

Which activations a recurrent layer may use, the defaults ONNX gives their ``alpha`` and
``beta``, how many directions a ``direction`` attribute means and how the
``activations``, ``activation_alpha`` and ``activation_beta`` attributes are spread
over the directions do not depend on the framework that runs the layer. Every backend
reads them here (through :mod:`d5core.api`, with :func:`recurrent_attributes`) and
only computes the activations itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from d5core.errors import UsageError
from d5core.onnx.signatures import onnx_signature

__all__ = [
    "RECURRENT_ACTIVATIONS",
    "RECURRENT_DEFAULT_ACTIVATIONS",
    "RECURRENT_GATES",
    "ActivationDefaults",
    "RecurrentActivationSpec",
    "RecurrentAttributes",
    "recurrent_attributes",
]


@dataclass(frozen=True)
class ActivationDefaults:
    """Which parameters an activation takes, and the values ONNX's operator of the
    same name uses when none is given."""

    uses_alpha: bool = False
    uses_beta: bool = False
    alpha: float = 0.0
    beta: float = 0.0


#: The activations ONNX lists for recurrent layers, by canonical name.
RECURRENT_ACTIVATIONS: Mapping[str, ActivationDefaults] = MappingProxyType(
    {
        "Sigmoid": ActivationDefaults(),
        "Tanh": ActivationDefaults(),
        "Relu": ActivationDefaults(),
        "HardSigmoid": ActivationDefaults(True, True, 0.2, 0.5),
        "LeakyRelu": ActivationDefaults(True, False, 0.01),
        "ThresholdedRelu": ActivationDefaults(True, False, 1.0),
        "ScaledTanh": ActivationDefaults(True, True, 1.0, 1.0),
        "Affine": ActivationDefaults(True, True, 1.0, 0.0),
        "Elu": ActivationDefaults(True, False, 1.0),
        "Softsign": ActivationDefaults(),
        "Softplus": ActivationDefaults(),
    }
)
#: The activations of one direction when the ``activations`` attribute is absent.
RECURRENT_DEFAULT_ACTIVATIONS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}
)
#: Gates per direction: LSTM's input, output, forget, cell; GRU's update, reset, hidden.
RECURRENT_GATES: Mapping[str, int] = MappingProxyType({"LSTM": 4, "GRU": 3})

_CANONICAL = {name.lower(): name for name in RECURRENT_ACTIVATIONS}
_DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


@dataclass(frozen=True)
class RecurrentActivationSpec:
    """One activation of a recurrent layer: its canonical ONNX name and parameters."""

    name: str
    alpha: float = 0.0
    beta: float = 0.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _prefix(where: str | None) -> str:
    return f"{where}: " if where else ""


def _directions(direction: Any, where: str | None = None) -> int:
    """The number of directions (1 or 2) that a ``direction`` attribute (``str`` or
    ``bytes``) means; a one-line :class:`UsageError`, starting with ``where``, for
    anything but forward, reverse and bidirectional."""
    text = _text(direction)
    count = _DIRECTIONS.get(text)
    if count is None:
        raise UsageError(
            f"{_prefix(where)}direction must be forward, reverse or bidirectional, not {text!r}"
        )
    return count


def _activation_specs(
    op_type: str,
    attributes: Mapping[str, Any],
    directions: int,
    where: str | None = None,
) -> tuple[tuple[RecurrentActivationSpec, ...], ...]:
    """The activations of each direction of an ``op_type`` (LSTM or GRU) node, read from
    its ``activations``, ``activation_alpha`` and ``activation_beta`` attributes (absent
    or ``None``: the defaults). Names are matched without regard to case; the alpha and
    beta lists are consumed in order by the activations that take such a value, and an
    activation past the end of a list takes its ONNX default. A wrong number of names or
    an unknown one is a one-line :class:`UsageError` starting with ``where``."""
    defaults = RECURRENT_DEFAULT_ACTIVATIONS[op_type]
    per = len(defaults)
    names = attributes.get("activations")
    given = [_text(n) for n in names] if names is not None else list(defaults) * directions
    if len(given) != per * directions:
        raise UsageError(
            f"{_prefix(where)}activations has {len(given)} names but {per * directions} are "
            f"needed ({per} per direction, for {directions} direction(s))"
        )
    alphas = [float(v) for v in attributes.get("activation_alpha") or ()]
    betas = [float(v) for v in attributes.get("activation_beta") or ()]
    specs: list[RecurrentActivationSpec] = []
    for text in given:
        name = _CANONICAL.get(text.lower())
        if name is None:
            raise UsageError(
                f"{_prefix(where)}activation {text} is not supported; use one of "
                f"{', '.join(RECURRENT_ACTIVATIONS)}"
            )
        spec = RECURRENT_ACTIVATIONS[name]
        alpha = alphas.pop(0) if spec.uses_alpha and alphas else spec.alpha
        beta = betas.pop(0) if spec.uses_beta and betas else spec.beta
        specs.append(RecurrentActivationSpec(name, alpha, beta))
    return tuple(tuple(specs[d * per : (d + 1) * per]) for d in range(directions))


@dataclass(frozen=True)
class RecurrentAttributes:
    """The attributes of one LSTM or GRU node, with the ONNX defaults filled in, checked."""

    op_type: str
    #: ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
    direction: str
    #: 2 for ``"bidirectional"``, else 1.
    directions: int
    #: 0: time first; 1: batch first.
    layout: int
    hidden_size: int | None
    #: The bound on every activation's input, or ``None``.
    clip: float | None
    #: Per direction, the activations in the order ONNX lists them (``f, g, h`` or ``f, g``).
    activations: tuple[tuple[RecurrentActivationSpec, ...], ...]
    #: LSTM only (``False`` for GRU): the forget gate is ``1 - i``.
    input_forget: bool
    #: GRU only (``False`` for LSTM): the reset gate applies after the recurrent product.
    linear_before_reset: bool

    @property
    def gates(self) -> int:
        """Gates per direction: 4 for LSTM, 3 for GRU."""
        return RECURRENT_GATES[self.op_type]

    @property
    def default_activations(self) -> bool:
        """Whether every direction uses its layer's default activations (by name)."""
        defaults = RECURRENT_DEFAULT_ACTIVATIONS[self.op_type]
        return all(tuple(act.name for act in per) == defaults for per in self.activations)

    def check_shapes(
        self, shapes: Sequence[Sequence[int] | None], where: str | None = None
    ) -> None:
        """Check the input shapes (in ONNX order, ``None`` for an absent or missing
        input; ``X``, ``W`` and ``R`` required) against each other and the attributes:
        ``X`` of rank 3, ``R`` ``(D, G*H, H)``, then every other input the shape that
        ``X``, ``R`` and the layout give it. The first misfit is a one-line
        :class:`UsageError` starting with ``where``."""
        names = [slot.name for slot in onnx_signature(self.op_type).slots]
        x, r = shapes[0], shapes[2]
        if x is None or r is None or shapes[1] is None:
            raise UsageError(f"{_prefix(where)}X, W and R are required")
        x, r = tuple(x), tuple(r)
        if len(x) != 3:
            axes = "(seq_length, batch, input_size)" if self.layout == 0 else "(batch, seq, input)"
            raise UsageError(f"{_prefix(where)}X must have rank 3 {axes}, but has shape {x}")
        batch = x[1] if self.layout == 0 else x[0]
        d, g = self.directions, self.gates
        if len(r) != 3 or r[0] != d or r[1] != g * r[2]:
            raise UsageError(
                f"{_prefix(where)}R must have shape (num_directions={d}, {g}*hidden_size, "
                f"hidden_size), not {r}"
            )
        hidden = r[2]
        if self.hidden_size is not None and self.hidden_size != hidden:
            raise UsageError(
                f"{_prefix(where)}hidden_size is {self.hidden_size} but R of shape {r} has "
                f"hidden size {hidden}"
            )
        state = (d, batch, hidden) if self.layout == 0 else (batch, d, hidden)
        expected: dict[int, tuple[int, ...]] = {
            1: (d, g * hidden, x[2]),
            3: (d, 2 * g * hidden),
            4: (batch,),
            5: state,
        }
        if self.op_type == "LSTM":
            expected.update({6: state, 7: (d, 3 * hidden)})
        for i, want in expected.items():
            got = shapes[i] if i < len(shapes) else None
            if got is not None and tuple(got) != want:
                raise UsageError(
                    f"{_prefix(where)}input {names[i]} must have shape {want} for X {x}, "
                    f"R {r} and direction {self.direction}, not {tuple(got)}"
                )


def recurrent_attributes(
    op_type: str, attributes: Mapping[str, Any], where: str | None = None
) -> RecurrentAttributes:
    """Read the attributes of an ``op_type`` (``"LSTM"`` or ``"GRU"``) node: an absent
    attribute or one given as ``None`` takes its ONNX default, strings may be ``bytes``.
    A direction other than forward, reverse and bidirectional, a layout other than 0 and
    1, a ``clip`` that is not positive, or activations of the wrong number or an unknown
    name are a one-line :class:`UsageError`, starting with ``where`` when it is given.
    Names this function does not know are ignored: the caller checks them."""
    if op_type not in RECURRENT_GATES:
        raise UsageError(
            f"{_prefix(where)}{op_type!r} is not a recurrent layer; use one of "
            f"{', '.join(RECURRENT_GATES)}"
        )
    given = {k: v for k, v in attributes.items() if v is not None}
    attrs = {**onnx_signature(op_type).attribute_defaults, **given}
    direction = _text(attrs["direction"])
    directions = _directions(direction, where)
    layout = int(attrs["layout"])
    if layout not in (0, 1):
        raise UsageError(f"{_prefix(where)}layout must be 0 or 1, not {layout}")
    clip = attrs["clip"]
    if clip is not None and not float(clip) > 0:
        raise UsageError(f"{_prefix(where)}clip must be positive, not {clip}")
    hidden = attrs["hidden_size"]
    return RecurrentAttributes(
        op_type=op_type,
        direction=direction,
        directions=directions,
        layout=layout,
        hidden_size=None if hidden is None else int(hidden),
        clip=None if clip is None else float(clip),
        activations=_activation_specs(op_type, attrs, directions, where),
        input_forget=bool(int(attrs.get("input_forget", 0))),
        linear_before_reset=bool(int(attrs.get("linear_before_reset", 0))),
    )
