"""A checked, editable ONNX network: the unit of level 1.

:class:`Network` wraps an ``onnx.ModelProto``. Constructing one checks the model (opset,
dangling inputs, cycles, ``onnx.checker``) and turns every problem into a one-line
:class:`~d5core.errors.UsageError`; it then puts the nodes in topological order and names
the unnamed ones, so that executors and per-layer timings can rely on both.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from d5core.errors import UsageError

__all__ = [
    "D5_DOMAIN",
    "D5_IR_VERSION",
    "D5_OPSET",
    "LOSS_KINDS",
    "Network",
    "ValueInfo",
]

#: The IR version d5 writes: onnxruntime 1.31 loads up to 13, onnx 1.23 writes 14.
D5_IR_VERSION = 10
#: The default-domain opset of the models d5 builds.
D5_OPSET = 17
#: The domain of d5's own operators (``MeanSquaredError``).
D5_DOMAIN = "ai.d5"
#: The losses :meth:`Network.add_loss` can append.
LOSS_KINDS = ("cross_entropy", "mse")

_DEFAULT_DOMAINS = ("", "ai.onnx")
_FLOAT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
    }
)


@dataclass(frozen=True)
class ValueInfo:
    """A graph input or output: its name, shape (``None`` for an unknown or symbolic
    dimension) and numpy dtype name (``""`` when the model does not say)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(text).__name__


def _dtype_name(elem_type: int) -> str:
    if elem_type == onnx.TensorProto.UNDEFINED:
        return ""
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name)
    except (KeyError, TypeError, ValueError):
        return str(onnx.TensorProto.DataType.Name(elem_type)).lower()


def _value_info(proto: onnx.ValueInfoProto) -> ValueInfo:
    tensor = proto.type.tensor_type
    shape = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in tensor.shape.dim)
    return ValueInfo(proto.name, shape, _dtype_name(tensor.elem_type))


def _elem_type(dtype: str | np.dtype[Any] | type) -> int:
    try:
        return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except (KeyError, TypeError, ValueError):
        raise UsageError(
            f"dtype {dtype!r} has no ONNX tensor type; use a numpy dtype such as float32"
        ) from None


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs (If, Loop, Scan) read from enclosing scopes."""
    reads: set[str] = set()
    for attr in node.attribute:
        graphs = list(attr.graphs)
        if attr.HasField("g"):
            graphs.append(attr.g)
        for graph in graphs:
            defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
            for inner in graph.node:
                defined.update(inner.output)
            for inner in graph.node:
                reads.update(n for n in inner.input if n and n not in defined)
                reads.update(r for r in _subgraph_reads(inner) if r not in defined)
    return reads


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return int(entry.version)
    return 0


def _min_ir_version(model: onnx.ModelProto) -> int:
    """The lowest IR version that supports the model's default-domain opset."""
    opset = _default_opset(model)
    candidates = [ir for _, ir, ops, *_ in helper.VERSION_TABLE if ops >= opset]
    return min(candidates) if candidates else int(model.ir_version)


class Network:
    """An ONNX model, checked and ready to run or edit.

    :param model: the model; the network works on its own copy.
    :param check: check the model and raise a one-line :class:`UsageError` for a
        problem: an opset newer than onnx knows, a node input nothing produces, a
        cycle, or an ``onnx.checker`` failure. ``check=False`` takes the model as it is
        (and edits skip their checks too).
    :param source: what to call the model in error messages (a path, by default the
        graph's name).
    """

    def __init__(
        self, model: onnx.ModelProto, *, check: bool = True, source: str | None = None
    ) -> None:
        if not isinstance(model, onnx.ModelProto):
            raise UsageError(
                f"a Network is made from an onnx.ModelProto, not {type(model).__name__}"
            )
        self._model = onnx.ModelProto()
        self._model.CopyFrom(model)
        self._check = check
        self._source = source or f"model {self._model.graph.name or '(unnamed)'!r}"
        if check:
            self.validate()
        self._sort(strict=False)
        self._name_nodes()

    # -- loading and saving --------------------------------------------------------------

    @classmethod
    def load(cls, path: str | PathLike[str], *, check: bool = True) -> Network:
        """Read an ``.onnx`` file (with its external data, if any)."""
        file = Path(path)
        if not file.is_file():
            raise UsageError(f"{file}: no such model file; check the path")
        network = cls.from_bytes(file.read_bytes(), check=False, source=str(file))
        model = network._model
        try:
            from onnx.external_data_helper import (
                load_external_data_for_model,
                uses_external_data,
            )

            if any(uses_external_data(t) for t in model.graph.initializer):
                load_external_data_for_model(model, str(file.parent))
        except (OSError, ValueError) as err:
            raise UsageError(
                f"{file}: cannot read its external data ({_one_line(str(err))}); keep the "
                f"data files next to the model"
            ) from None
        return cls(model, check=check, source=str(file))

    @classmethod
    def from_bytes(cls, data: bytes, *, check: bool = True, source: str = "ONNX bytes") -> Network:
        """Parse a serialized ``ModelProto``."""
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:  # protobuf raises DecodeError and others
            model = None  # type: ignore[assignment]
        if model is None or not model.HasField("graph") or not model.opset_import:
            raise UsageError(
                f"{source}: not an ONNX model (truncated, or another format); export or "
                f"copy it again"
            )
        return cls(model, check=check, source=source)

    def _normalize_ir_version(self) -> None:
        current = int(self._model.ir_version) or D5_IR_VERSION
        self._model.ir_version = max(min(current, D5_IR_VERSION), _min_ir_version(self._model))

    def save(self, path: str | PathLike[str]) -> Path:
        """Write the model to ``path``.

        The IR version becomes ``min(current, D5_IR_VERSION)``, raised to the lowest one
        the model's opset needs, so that every executor (onnxruntime 1.31 included)
        loads the file. Returns the path.
        """
        file = Path(path)
        file.write_bytes(self.to_bytes())
        return file

    def to_bytes(self) -> bytes:
        """The serialized model, with the IR version set as :meth:`save` sets it."""
        self._normalize_ir_version()
        return bytes(self._model.SerializeToString())

    def copy(self) -> Network:
        """An independent copy (no checks are run again)."""
        twin = Network(self._model, check=False, source=self._source)
        twin._check = self._check
        return twin

    def as_float64(self) -> Network:
        """A copy computing in float64: float32 initializers, graph values, constants and
        casts become float64.

        Validation compares gradients this way, so that rounding through deep layers
        (batch statistics over a small batch, above all) neither hides nor fakes an error.
        """
        model = onnx.ModelProto()
        model.CopyFrom(self._model)
        graph = model.graph
        for i, tensor in enumerate(graph.initializer):
            array = numpy_helper.to_array(tensor)
            if array.dtype == np.float32:
                graph.initializer[i].CopyFrom(
                    numpy_helper.from_array(array.astype(np.float64), tensor.name)
                )
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
                value.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
        for node in graph.node:
            for attr in node.attribute:
                if (
                    attr.type == onnx.AttributeProto.TENSOR
                    and attr.t.data_type == onnx.TensorProto.FLOAT
                ):
                    array = numpy_helper.to_array(attr.t).astype(np.float64)
                    attr.t.CopyFrom(numpy_helper.from_array(array, attr.t.name))
                elif (
                    node.op_type == "Cast"
                    and attr.name == "to"
                    and attr.i == onnx.TensorProto.FLOAT
                ):
                    attr.i = onnx.TensorProto.DOUBLE
        twin = Network(model, check=False, source=self._source)
        twin._check = self._check
        return twin

    # -- checking ------------------------------------------------------------------------

    def validate(self) -> None:
        """Run the checks of the constructor again; raise a one-line UsageError."""
        model, src = self._model, self._source
        opset = _default_opset(model)
        newest = onnx.defs.onnx_opset_version()
        if opset > newest:
            raise UsageError(
                f"{src}: uses opset {opset} of the default domain; this onnx supports up "
                f"to {newest}: export it with an older opset or upgrade onnx"
            )
        available = {i.name for i in model.graph.input}
        available.update(i.name for i in model.graph.initializer)
        produced = {out for node in model.graph.node for out in node.output if out}
        for index, node in enumerate(model.graph.node):
            for name in node.input:
                if name and name not in available and name not in produced:
                    raise UsageError(
                        f"{src}: node {node.name or f'{node.op_type}_{index}'!r} "
                        f"({node.op_type}) reads {name!r}, which no node, initializer or "
                        f"graph input produces; add it as an input or initializer"
                    )
        self._sort(strict=True)
        try:
            onnx.checker.check_model(model)
        except (onnx.checker.ValidationError, ValueError) as err:
            raise UsageError(
                f"{src}: fails onnx.checker: {_one_line(str(err))}; fix the model or its exporter"
            ) from None

    def _sort(self, *, strict: bool) -> None:
        """Put the nodes in topological order, keeping the given order where possible.

        With ``strict``, a cycle raises a UsageError naming a node on it; otherwise the
        order is left as it is.
        """
        graph = self._model.graph
        nodes = list(graph.node)
        producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
        deps: list[set[int]] = []
        for i, node in enumerate(nodes):
            reads = set(node.input) | _subgraph_reads(node)
            deps.append({producer[n] for n in reads if n in producer and producer[n] != i})
        users: list[list[int]] = [[] for _ in nodes]
        for i, before in enumerate(deps):
            for j in before:
                users[j].append(i)
        waiting = [len(d) for d in deps]
        ready = [i for i, w in enumerate(waiting) if w == 0]
        order: list[int] = []
        heapq.heapify(ready)
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in users[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, j)
        selfloop = next(
            (i for i, node in enumerate(nodes) if set(node.input) & set(node.output) - {""}),
            None,
        )
        if len(order) < len(nodes) or selfloop is not None:
            if not strict:
                return
            if selfloop is None:
                # Walk back along unfinished dependencies until a node repeats.
                left = set(range(len(nodes))) - set(order)
                at, seen = min(left), []
                while at not in seen:
                    seen.append(at)
                    at = min(d for d in deps[at] if d in left)
                selfloop = at
            node = nodes[selfloop]
            raise UsageError(
                f"{self._source}: the graph has a cycle through node "
                f"{node.name or f'{node.op_type}_{selfloop}'!r} ({node.op_type}); an ONNX "
                f"graph must be acyclic: fix the model or its exporter"
            )
        if order != sorted(order):
            sorted_nodes = [nodes[i] for i in order]
            del graph.node[:]
            graph.node.extend(sorted_nodes)

    def _name_nodes(self) -> None:
        """Name unnamed nodes ``{op_type}_{index}`` and make duplicate names unique."""
        taken: set[str] = {n.name for n in self._model.graph.node if n.name}
        seen: set[str] = set()
        for index, node in enumerate(self._model.graph.node):
            if node.name and node.name not in seen:
                seen.add(node.name)
                continue
            base = node.name or f"{node.op_type}_{index}"
            name, k = base, 1
            while name in taken or name in seen:
                name, k = f"{base}_{k}", k + 1
            node.name = name
            taken.add(name)
            seen.add(name)

    # -- reading -------------------------------------------------------------------------

    @property
    def model(self) -> onnx.ModelProto:
        """The underlying ``ModelProto`` (live: edits to it bypass the checks)."""
        return self._model

    @property
    def name(self) -> str:
        """The graph's name."""
        return str(self._model.graph.name)

    @property
    def opset(self) -> int:
        """The default-domain opset version (0 when the model imports none)."""
        return _default_opset(self._model)

    @property
    def inputs(self) -> list[ValueInfo]:
        """Graph inputs that are not initializers: what a caller feeds."""
        inits = {i.name for i in self._model.graph.initializer}
        return [_value_info(i) for i in self._model.graph.input if i.name not in inits]

    @property
    def outputs(self) -> list[ValueInfo]:
        """Graph outputs."""
        return [_value_info(o) for o in self._model.graph.output]

    @property
    def parameters(self) -> dict[str, np.ndarray]:
        """Initializers by name, as numpy arrays (copies)."""
        return {
            t.name: np.array(numpy_helper.to_array(t), copy=True)
            for t in self._model.graph.initializer
        }

    @property
    def trainable(self) -> list[str]:
        """Names of the floating-point initializers (those that get gradients).

        BatchNormalization's running mean and variance are among them: in inference mode
        they are inputs of the computation like any weight.
        """
        return [t.name for t in self._model.graph.initializer if t.data_type in _FLOAT_TYPES]

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        """The nodes in topological order, each with a unique name."""
        return list(self._model.graph.node)

    def node(self, name: str) -> onnx.NodeProto:
        """The node called ``name``."""
        node: onnx.NodeProto = self._model.graph.node[self._index(name)]
        return node

    def _index(self, name: str) -> int:
        for index, node in enumerate(self._model.graph.node):
            if node.name == name:
                return index
        raise UsageError(
            f"{self._source} has no node named {name!r}; see Network.nodes for the names"
        )

    def value_infos(self) -> dict[str, ValueInfo]:
        """Shape and dtype of every tensor shape inference can type, by name."""
        inferred = self._inferred()
        graph = inferred.graph
        infos = {
            t.name: ValueInfo(t.name, tuple(int(d) for d in t.dims), _dtype_name(t.data_type))
            for t in graph.initializer
        }
        for proto in [*graph.input, *graph.value_info, *graph.output]:
            infos[proto.name] = _value_info(proto)
        return infos

    def _inferred(self, *, strict: bool = False) -> onnx.ModelProto:
        try:
            return onnx.shape_inference.infer_shapes(
                self._model, check_type=strict, strict_mode=strict, data_prop=True
            )
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
            raise UsageError(
                f"{self._source}: shape inference fails: {_one_line(str(err))}; fix the "
                f"model's shapes"
            ) from None

    def infer_shapes(self, *, strict: bool = False) -> Network:
        """A NEW network whose graph carries the inferred shapes (``value_info``).

        This network is not changed. ``strict`` makes inference errors fatal.
        """
        twin = Network(self._inferred(strict=strict), check=False, source=self._source)
        twin._check = self._check
        return twin

    # -- editing -------------------------------------------------------------------------

    def _after_edit(self) -> None:
        self._sort(strict=False)
        self._name_nodes()

    def _unique_name(self, node: onnx.NodeProto, index: int) -> None:
        if node.name:
            if any(n.name == node.name for n in self._model.graph.node):
                raise UsageError(f"{self._source} already has a node named {node.name!r}")
            return
        taken = {n.name for n in self._model.graph.node}
        name, k = f"{node.op_type}_{index}", 1
        while name in taken:
            name, k = f"{node.op_type}_{index}_{k}", k + 1
        node.name = name

    def add_node(self, node: onnx.NodeProto, *, before: str | None = None) -> str:
        """Insert ``node`` at the end, or before the node named ``before``, and return
        its name (``{op_type}_{index}`` when it has none). Nodes are put back in
        topological order; the graph is not checked until :meth:`validate`."""
        index = len(self._model.graph.node) if before is None else self._index(before)
        placed = onnx.NodeProto()
        placed.CopyFrom(node)
        self._unique_name(placed, index)
        self._model.graph.node.insert(index, placed)
        self._after_edit()
        return str(placed.name)

    def remove_node(self, name: str) -> onnx.NodeProto:
        """Remove the node called ``name`` and return it."""
        index = self._index(name)
        removed = onnx.NodeProto()
        removed.CopyFrom(self._model.graph.node[index])
        del self._model.graph.node[index]
        return removed

    def replace_node(self, name: str, *nodes: onnx.NodeProto) -> list[str]:
        """Replace the node called ``name`` by ``nodes``, in their order; returns their
        names. With no ``nodes`` this removes the node."""
        index = self._index(name)
        del self._model.graph.node[index]
        names = []
        for offset, node in enumerate(nodes):
            placed = onnx.NodeProto()
            placed.CopyFrom(node)
            self._unique_name(placed, index + offset)
            self._model.graph.node.insert(index + offset, placed)
            names.append(str(placed.name))
        self._after_edit()
        return names

    def add_output(
        self,
        tensor_name: str,
        dtype: str | np.dtype[Any] | type | None = None,
        shape: Sequence[int | str | None] | None = None,
    ) -> ValueInfo:
        """Make the tensor ``tensor_name`` (an intermediate, say) a graph output.

        The dtype and shape come from shape inference unless given.
        """
        graph = self._model.graph
        if any(o.name == tensor_name for o in graph.output):
            return next(o for o in self.outputs if o.name == tensor_name)
        known = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        known.update(out for node in graph.node for out in node.output)
        if tensor_name not in known:
            raise UsageError(
                f"{self._source} has no tensor {tensor_name!r} to output; name a node "
                f"output, input or initializer"
            )
        if dtype is None:
            inferred = self.value_infos().get(tensor_name)
            if inferred is None or not inferred.dtype:
                raise UsageError(
                    f"shape inference cannot type {tensor_name!r}; pass dtype= to add_output"
                )
            proto = next(
                (p for p in [*self._inferred().graph.value_info, *graph.input]
                 if p.name == tensor_name),
                None,
            )  # fmt: skip
            if proto is not None and shape is None:
                graph.output.append(proto)
                return _value_info(proto)
            elem = _elem_type(inferred.dtype)
            dims: Sequence[int | str | None] | None = shape if shape is not None else inferred.shape
        else:
            elem, dims = _elem_type(dtype), shape
        graph.output.append(helper.make_tensor_value_info(tensor_name, elem, dims))
        return _value_info(graph.output[-1])

    def add_input(
        self, name: str, shape: Sequence[int | str | None], dtype: str | np.dtype[Any] | type
    ) -> ValueInfo:
        """Add a graph input ``name`` (a feed). An initializer of that name stays as the
        input's default value; a name a node produces cannot be fed."""
        graph = self._model.graph
        if any(i.name == name for i in graph.input):
            raise UsageError(f"{self._source} already has an input named {name!r}")
        if any(name in node.output for node in graph.node):
            raise UsageError(
                f"{name!r} is computed by a node of {self._source}; feed another name or "
                f"remove the node first"
            )
        graph.input.append(helper.make_tensor_value_info(name, _elem_type(dtype), shape))
        return _value_info(graph.input[-1])

    def set_parameter(self, name: str, array: np.ndarray) -> None:
        """Set the initializer ``name`` to ``array`` (cast to its dtype; the shape must
        match), or add it when there is none."""
        graph = self._model.graph
        value = np.asarray(array)
        for index, tensor in enumerate(graph.initializer):
            if tensor.name != name:
                continue
            dims = tuple(int(d) for d in tensor.dims)
            if value.shape != dims:
                raise UsageError(
                    f"parameter {name!r} has shape {dims}, not {value.shape}; give an "
                    f"array of its shape"
                )
            dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
            graph.initializer[index].CopyFrom(
                numpy_helper.from_array(value.astype(dtype, copy=False), name)
            )
            return
        graph.initializer.append(numpy_helper.from_array(value, name))

    def _taken(self) -> set[str]:
        graph = self._model.graph
        names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        names.update(o.name for o in graph.output)
        names.update(out for node in graph.node for out in node.output)
        return names

    def add_loss(self, output: str, *, kind: str = "cross_entropy", labels: str = "labels") -> str:
        """Append a loss on the tensor ``output`` and return the loss output's name.

        ``cross_entropy``: ONNX ``SoftmaxCrossEntropyLoss`` (reduction ``mean``) on
        scores ``(N, C, d1, ...)`` with int64 labels ``(N, d1, ...)``. ``mse``: d5's
        ``MeanSquaredError`` (domain ``ai.d5``, reduction ``mean`` over all elements)
        with float labels of the output's shape. ``labels`` becomes a graph input and
        the scalar loss a graph output. A model below opset 13 is converted to
        :data:`D5_OPSET` first.
        """
        if kind not in LOSS_KINDS:
            raise UsageError(f"unknown loss kind {kind!r}; choose one of {', '.join(LOSS_KINDS)}")
        taken = self._taken()
        if output not in taken:
            raise UsageError(f"{self._source} has no tensor {output!r} to put a loss on")
        if labels in taken:
            raise UsageError(
                f"{labels!r} is already a tensor of {self._source}; pass another labels= name"
            )
        if kind == "cross_entropy" and self.opset < 13:
            self._convert_opset(D5_OPSET)
        info = self.value_infos().get(output)
        if info is None or not info.shape:
            raise UsageError(
                f"shape inference cannot find the shape of {output!r}; add_output it with "
                f"a shape first"
            )
        dims = self._dims(output) or list(info.shape)
        loss, k = f"{output}_loss", 1
        while loss in taken:
            loss, k = f"{output}_loss_{k}", k + 1
        graph = self._model.graph
        if kind == "cross_entropy":
            if len(dims) < 2:
                raise UsageError(
                    f"cross_entropy needs scores of shape (N, C, ...); {output!r} has "
                    f"shape {info.shape}"
                )
            graph.input.append(
                helper.make_tensor_value_info(labels, onnx.TensorProto.INT64, [dims[0], *dims[2:]])
            )
            node = helper.make_node(
                "SoftmaxCrossEntropyLoss", [output, labels], [loss], reduction="mean",
                name=f"SoftmaxCrossEntropyLoss_{loss}",
            )  # fmt: skip
            elem = _elem_type(info.dtype or "float32")
        else:
            elem = _elem_type(info.dtype or "float32")
            graph.input.append(helper.make_tensor_value_info(labels, elem, dims))
            node = helper.make_node(
                "MeanSquaredError", [output, labels], [loss], reduction="mean",
                domain=D5_DOMAIN, name=f"MeanSquaredError_{loss}",
            )  # fmt: skip
            if not any(o.domain == D5_DOMAIN for o in self._model.opset_import):
                self._model.opset_import.append(helper.make_opsetid(D5_DOMAIN, 1))
        graph.node.append(node)
        graph.output.append(helper.make_tensor_value_info(loss, elem, []))
        self._after_edit()
        return loss

    def _dims(self, tensor: str) -> list[int | str | None]:
        """Dims of ``tensor`` with symbolic names kept (for labels of batch ``N``)."""
        for proto in [*self._inferred().graph.value_info, *self._model.graph.output,
                      *self._model.graph.input]:  # fmt: skip
            if proto.name == tensor and proto.type.tensor_type.HasField("shape"):
                return [
                    int(d.dim_value) if d.HasField("dim_value")
                    else (d.dim_param or None)
                    for d in proto.type.tensor_type.shape.dim
                ]  # fmt: skip
        return []

    def _convert_opset(self, target: int) -> None:
        from onnx import version_converter

        try:
            converted = version_converter.convert_version(self._model, target)
        except Exception as err:  # the converter raises many kinds
            raise UsageError(
                f"{self._source}: cannot convert opset {self.opset} to {target} "
                f"({_one_line(str(err))}); export the model with opset >= 13"
            ) from None
        self._model.CopyFrom(converted)
        self._after_edit()

    def __repr__(self) -> str:
        return (
            f"Network({self.name!r}, opset={self.opset}, nodes={len(self._model.graph.node)}, "
            f"inputs={[i.name for i in self.inputs]}, outputs={[o.name for o in self.outputs]})"
        )
