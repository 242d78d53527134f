"""What a custom operator's source declares: its name, inputs, outputs, attributes and
default shapes, read from the ``D5_OP_*`` lines of the file (see ``include/d5_op.h``).

The declarations are read from the text, not compiled, so that the glue of every
framework can be generated before the compiler runs and a cached build needs no compiler.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from d5core.errors import UsageError

__all__ = ["AttributeSpec", "OpSpec", "parse_spec", "read_spec"]

_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
_INPUT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_DECLARATION = re.compile(r"^\s*(D5_OP_[A-Z_]+)\s*\((.*)\)\s*;?\s*$")
_STRING = re.compile(r'"([^"\\]*)"')
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"


@dataclass(frozen=True)
class AttributeSpec:
    """One declared attribute: its name, ``kind`` (``"float"`` or ``"int"``), default
    and, when declared (``D5_OP_FLOAT_ATTR("scale", 1.0, 0.1, 10.0)``), the range of the
    values it takes, ``low`` to ``high`` inclusive."""

    name: str
    kind: str
    default: float | int
    low: float | int | None = None
    high: float | int | None = None

    @property
    def ranged(self) -> bool:
        """Whether the attribute declares the range of its values."""
        return self.low is not None and self.high is not None

    def draw(self, rng: Any) -> float | int:
        """A value drawn uniformly from the declared range with numpy generator ``rng``."""
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            return int(rng.integers(int(self.low), int(self.high) + 1))
        return float(rng.uniform(float(self.low), float(self.high)))

    def coerce(self, op: str, value: Any) -> float | int:
        """``value`` as this attribute's type.

        :raises UsageError: for a value of another type, naming the attribute.
        """
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(
                f"{op}: attribute {self.name!r} is a {self.kind}, not {value!r}; "
                f"give a number (for example --attr {self.name}={self.default})"
            )
        if self.kind == "int" and float(value) != int(value):
            raise UsageError(
                f"{op}: attribute {self.name!r} is an int, not {value!r}; give a whole number"
            )
        number = int(value) if self.kind == "int" else float(value)
        if self.ranged and not (self.low <= number <= self.high):  # type: ignore[operator]
            raise UsageError(
                f"{op}: attribute {self.name!r} takes values from {self.low} to {self.high} "
                f"(its declared range), not {value!r}"
            )
        return number


@dataclass(frozen=True)
class OpSpec:
    """A custom operator as its source declares it."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: tuple[AttributeSpec, ...] = ()
    #: Default input shapes for ``d5 validate op --custom`` and ``d5 bench op --custom``.
    shapes: tuple[tuple[int, ...], ...] = ()
    #: The source file it was read from.
    source: Path = field(default=Path(), compare=False)

    def resolve_attributes(self, given: Mapping[str, Any] | None) -> dict[str, float | int]:
        """Every declared attribute: ``given``'s value, else the default.

        :raises UsageError: for an attribute the operator does not declare, or a value
            of the wrong type.
        """
        given = dict(given or {})
        declared = {a.name: a for a in self.attributes}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            known = ", ".join(declared) or "none"
            raise UsageError(
                f"{self.name} has no attribute {unknown[0]!r}; its attributes: {known} "
                f"(declare more with D5_OP_FLOAT_ATTR or D5_OP_INT_ATTR)"
            )
        return {
            name: a.coerce(self.name, given[name]) if name in given else a.default
            for name, a in declared.items()
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "attributes": [
                {"name": a.name, "kind": a.kind, "default": a.default, "low": a.low, "high": a.high}
                for a in self.attributes
            ],
            "shapes": [list(s) for s in self.shapes],
        }


def _strip_comments(text: str) -> list[str]:
    """The lines of ``text`` with C++ comments blanked (line numbers kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    return [re.sub(r"//.*", "", line) for line in text.splitlines()]


def _strings(where: str, macro: str, args: str) -> list[str]:
    values = _STRING.findall(args)
    rest = _STRING.sub("", args).replace(",", "").strip()
    if not values or rest:
        raise UsageError(f'{where}: {macro} takes string literals only, as in {macro}("X")')
    return values


def _attribute(where: str, macro: str, args: str) -> AttributeSpec:
    kind = "float" if macro == "D5_OP_FLOAT_ATTR" else "int"
    rest = rf"\s*,\s*({_NUMBER})\s*"
    match = re.fullmatch(rf'\s*"([^"\\]*)"{rest}(?:{rest}{rest})?', args)
    if match is None:
        raise UsageError(
            f'{where}: write {macro}("name", default) or {macro}("name", default, low, '
            "high) with literal numbers"
        )
    name, *raws = match.groups()
    if not _INPUT.fullmatch(name):
        raise UsageError(f"{where}: attribute name {name!r} is not an identifier")
    numbers: list[float | int] = []
    for raw in [r for r in raws if r is not None]:
        if kind == "int" and not re.fullmatch(r"[-+]?\d+", raw):
            raise UsageError(f"{where}: {raw} in int attribute {name!r} must be a whole number")
        numbers.append(int(raw) if kind == "int" else float(raw))
    if len(numbers) == 1:
        return AttributeSpec(name, kind, numbers[0])
    default, low, high = numbers
    if not low <= default <= high or low == high:
        raise UsageError(
            f"{where}: the range of {name!r} must run from low to high (low < high) and hold "
            f"its default, not {low} to {high} with default {default}"
        )
    return AttributeSpec(name, kind, default, low, high)


def _shape(where: str, text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        dims = ()
    if not dims or any(d <= 0 for d in dims):
        raise UsageError(f'{where}: shape {text!r} is not positive sizes joined by x ("64x256")')
    return dims


def parse_spec(text: str, source: Path | str = "<source>") -> OpSpec:
    """The :class:`OpSpec` declared in C++ ``text``.

    :raises UsageError: for a missing, repeated or malformed declaration, naming the
        line and what to write instead.
    """
    path = Path(source)
    found: dict[str, Any] = {}
    attributes: list[AttributeSpec] = []
    for number, line in enumerate(_strip_comments(text), start=1):
        match = _DECLARATION.match(line)
        if match is None:
            continue
        macro, args = match.groups()
        where = f"{path}:{number}"
        if macro in ("D5_OP_FLOAT_ATTR", "D5_OP_INT_ATTR"):
            attribute = _attribute(where, macro, args)
            if any(a.name == attribute.name for a in attributes):
                raise UsageError(f"{where}: attribute {attribute.name!r} is declared twice")
            attributes.append(attribute)
            continue
        if macro not in ("D5_OP_NAME", "D5_OP_INPUTS", "D5_OP_OUTPUTS", "D5_OP_SHAPES"):
            raise UsageError(f"{where}: {macro} is not a d5 declaration (see d5_op.h)")
        if macro in found:
            raise UsageError(f"{where}: {macro} is declared twice; declare it once")
        found[macro] = (where, _strings(where, macro, args))
    for required in ("D5_OP_NAME", "D5_OP_INPUTS", "D5_OP_OUTPUTS"):
        if required not in found:
            raise UsageError(
                f"{path}: no {required}(...) line; declare the operator as d5_op.h shows "
                f'(D5_OP_NAME("my_op"); D5_OP_INPUTS("X"); D5_OP_OUTPUTS("Y");)'
            )
    where, names = found["D5_OP_NAME"]
    if len(names) != 1 or not _NAME.fullmatch(names[0]):
        raise UsageError(f"{where}: the operator name must be one [a-z][a-z0-9_]* string")
    spec_io = {}
    for macro in ("D5_OP_INPUTS", "D5_OP_OUTPUTS"):
        at, values = found[macro]
        bad = [v for v in values if not _INPUT.fullmatch(v)]
        if bad or len(set(values)) != len(values):
            raise UsageError(f"{at}: {macro} needs distinct identifiers, not {values}")
        spec_io[macro] = tuple(values)
    shapes: tuple[tuple[int, ...], ...] = ()
    if "D5_OP_SHAPES" in found:
        at, values = found["D5_OP_SHAPES"]
        if len(values) != len(spec_io["D5_OP_INPUTS"]):
            raise UsageError(
                f"{at}: D5_OP_SHAPES gives {len(values)} shapes for "
                f"{len(spec_io['D5_OP_INPUTS'])} inputs; give one per input"
            )
        shapes = tuple(_shape(at, v) for v in values)
    clash = set(spec_io["D5_OP_INPUTS"]) & {a.name for a in attributes}
    if clash:
        raise UsageError(f"{path}: {sorted(clash)[0]!r} names both an input and an attribute")
    return OpSpec(names[0], spec_io["D5_OP_INPUTS"], spec_io["D5_OP_OUTPUTS"],
                  tuple(attributes), shapes, path)  # fmt: skip


def read_spec(path: Path | str) -> OpSpec:
    """The :class:`OpSpec` of the source file ``path``.

    :raises UsageError: for a file that cannot be read or declares no operator.
    """
    source = Path(path)
    try:
        text = source.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read custom operator source {source}: {exc.strerror}") from None
    return parse_spec(text, source)


def shapes_text(shapes: Sequence[Sequence[int]]) -> str:
    """``[(64, 256), (256,)]`` as ``64x256,256``."""
    return ",".join("x".join(str(d) for d in s) for s in shapes)
