"""ONNX semantics for operator backends: d5's library of ONNX helpers.

A framework plugin that implements ONNX operators (a ``d5.operators`` backend or a
``d5.frameworks`` executor) reads attributes, windows, signatures and recurrent settings
the way ONNX defines them with these helpers, and bases its operators on
:class:`SlottedOperator` or :class:`GraphNodeOperator`. They are a library beside the
kernel's contract (:mod:`d5core.api`), not part of it: the library has its own version,
:data:`ONNX_HELPERS_VERSION`, and its own changelog (``CHANGELOG.md`` in this folder), so
that a new helper does not move the plugin API.

Versioning follows the plugin API's rules: the minor number goes up when a name or an
optional argument is added, the major number when a name is removed or renamed or a
documented behaviour changes. A plugin that needs a helper added in a later version says
so in its distribution's dependencies (``d5core`` with the release that ships it).

Modules:

- :mod:`d5core.onnx.checks`: input slots, element types, ranks, attribute names and the
  argument semantics of the shape operators;
- :mod:`d5core.onnx.windows`: the windows of Conv, ConvTranspose and pooling;
- :mod:`d5core.onnx.signatures`: the inputs and attribute defaults of each operator;
- :mod:`d5core.onnx.recurrent`: the attributes of LSTM and GRU;
- :mod:`d5core.onnx.slotted_operator`: the base of a backend's operators;
- :mod:`d5core.onnx.graph_operator`: operators run as a one-node graph;
- :mod:`d5core.onnx.nodes`: node attributes, constants, legacy broadcasting and padding;
- :mod:`d5core.onnx.network`: :class:`~d5core.onnx.network.Network`, the ONNX model as
  executors get it (public through :mod:`d5core.api`);
- :mod:`d5core.onnx.plan`: :class:`Signature`, the one base of a backend's matched inputs;
- :mod:`d5core.onnx.operator_rules`: per-operator mixins that read the attributes and
  check the inputs the ONNX way;
- :mod:`d5core.onnx.indexing_rules`: the same for the operators that index, slice or
  cut a tensor (``Gather``, ``Slice``, ``Split``, ``Cast`` and kin);
- :mod:`d5core.onnx.backend`: the base of a backend's operators and its
  ``d5.operators`` backend, and the order backends list their operators in;
- :mod:`d5core.onnx.translation`: what executors that translate a graph share: the
  graph as they read it and one-line errors naming a node;
- :mod:`d5core.onnx.optimizers`: :class:`NativeOptimizer`, the base of framework-native
  optimizers: the checks of the gradients and parameters they are given, and the
  reference's layout of their state.

Importing this package is light: each name is imported from its module on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from d5core.onnx.backend import (
        OPERATOR_ORDER,
        BackendOperator,
        SlottedBackend,
        ordered_operator_classes,
    )
    from d5core.onnx.checks import (
        DescribedInput,
        InputSlot,
        check_attribute_names,
        check_class_labels,
        check_concat_shapes,
        check_float_dtypes,
        check_per_channel,
        check_rank,
        check_scalar_input,
        dropout_ratio,
        flatten_target,
        gemm_output_shape,
        int_list_attribute,
        integer_values,
        is_integer_dtype,
        match_input_slots,
        normalize_axes,
        reshape_target,
        slot_has_no_gradient,
        squeeze_axes,
        transpose_perm,
        unsqueeze_axes,
    )
    from d5core.onnx.graph_operator import (
        GRAPH_OPERATORS,
        GraphNodeOperator,
        graph_operator_classes,
        one_node,
        one_node_opset,
    )
    from d5core.onnx.indexing_rules import (
        ONNX_ELEMENT_TYPES,
        CastRules,
        ConstantOfShapeRules,
        ExpandRules,
        GatherElementsRules,
        GatherRules,
        ShapeRules,
        SliceRules,
        SplitRules,
        TriluRules,
        WhereRules,
        cast_target,
        slice_bounds,
    )
    from d5core.onnx.nodes import (
        AUTO_PADS,
        constant_value,
        legacy_broadcast,
        legacy_broadcast_shape,
        node_attributes,
        node_pads,
        resolve_pads,
    )
    from d5core.onnx.operator_rules import (
        LOSS_REDUCTIONS,
        AlongAxisRules,
        AveragePoolRules,
        BatchNormalizationRules,
        BroadcastingRules,
        ConcatRules,
        ConvolutionRules,
        ConvRules,
        ConvTransposeRules,
        DropoutRules,
        FlattenRules,
        GeluRules,
        GemmRules,
        GlobalAveragePoolRules,
        LayerNormalizationRules,
        LogSoftmaxRules,
        LossRules,
        MatMulRules,
        MaxPoolRules,
        MeanSquaredErrorRules,
        PoolRules,
        RecurrentRules,
        ReduceMaxRules,
        ReduceMeanRules,
        ReduceRules,
        ReduceSumRules,
        ReshapeRules,
        SoftmaxCrossEntropyLossRules,
        SoftmaxRules,
        SqueezeRules,
        TransposeRules,
        UnsqueezeRules,
        reference_mask,
    )
    from d5core.onnx.optimizers import (
        NativeOptimizer,
    )
    from d5core.onnx.plan import (
        Signature,
    )
    from d5core.onnx.recurrent import (
        RECURRENT_ACTIVATIONS,
        RECURRENT_DEFAULT_ACTIVATIONS,
        RECURRENT_GATES,
        ActivationDefaults,
        RecurrentActivationSpec,
        RecurrentAttributes,
        recurrent_attributes,
    )
    from d5core.onnx.signatures import (
        OperatorSignature,
        onnx_signature,
    )
    from d5core.onnx.slotted_operator import (
        SlottedOperator,
    )
    from d5core.onnx.translation import (
        GraphView,
        graph_view,
        node_errors,
    )
    from d5core.onnx.windows import (
        SpatialWindow,
        TransposedWindow,
        average_pool_divisors,
        check_auto_pad,
        conv_transpose_window,
        conv_window,
        spatial_window,
    )

#: The version of this library (see the module docstring and ``CHANGELOG.md``).
ONNX_HELPERS_VERSION = "1.1"

#: The public names by home module: each is imported from there on first use.
HOMES: dict[str, tuple[str, ...]] = {
    "d5core.onnx.checks": (
        "DescribedInput",
        "InputSlot",
        "check_attribute_names",
        "check_class_labels",
        "check_concat_shapes",
        "check_float_dtypes",
        "check_per_channel",
        "check_rank",
        "check_scalar_input",
        "dropout_ratio",
        "flatten_target",
        "gemm_output_shape",
        "int_list_attribute",
        "integer_values",
        "is_integer_dtype",
        "match_input_slots",
        "normalize_axes",
        "reshape_target",
        "slot_has_no_gradient",
        "squeeze_axes",
        "transpose_perm",
        "unsqueeze_axes",
    ),
    "d5core.onnx.windows": (
        "SpatialWindow",
        "TransposedWindow",
        "average_pool_divisors",
        "check_auto_pad",
        "conv_transpose_window",
        "conv_window",
        "spatial_window",
    ),
    "d5core.onnx.signatures": (
        "OperatorSignature",
        "onnx_signature",
    ),
    "d5core.onnx.recurrent": (
        "RECURRENT_ACTIVATIONS",
        "RECURRENT_DEFAULT_ACTIVATIONS",
        "RECURRENT_GATES",
        "ActivationDefaults",
        "RecurrentActivationSpec",
        "RecurrentAttributes",
        "recurrent_attributes",
    ),
    "d5core.onnx.slotted_operator": ("SlottedOperator",),
    "d5core.onnx.graph_operator": (
        "GRAPH_OPERATORS",
        "GraphNodeOperator",
        "graph_operator_classes",
        "one_node",
        "one_node_opset",
    ),
    "d5core.onnx.nodes": (
        "AUTO_PADS",
        "constant_value",
        "legacy_broadcast",
        "legacy_broadcast_shape",
        "node_attributes",
        "node_pads",
        "resolve_pads",
    ),
    "d5core.onnx.plan": ("Signature",),
    "d5core.onnx.operator_rules": (
        "LOSS_REDUCTIONS",
        "AlongAxisRules",
        "AveragePoolRules",
        "BatchNormalizationRules",
        "BroadcastingRules",
        "ConcatRules",
        "ConvRules",
        "ConvTransposeRules",
        "ConvolutionRules",
        "DropoutRules",
        "FlattenRules",
        "GeluRules",
        "GemmRules",
        "GlobalAveragePoolRules",
        "LayerNormalizationRules",
        "LogSoftmaxRules",
        "LossRules",
        "MatMulRules",
        "MaxPoolRules",
        "MeanSquaredErrorRules",
        "PoolRules",
        "RecurrentRules",
        "ReduceMaxRules",
        "ReduceMeanRules",
        "ReduceRules",
        "ReduceSumRules",
        "ReshapeRules",
        "SoftmaxCrossEntropyLossRules",
        "SoftmaxRules",
        "SqueezeRules",
        "TransposeRules",
        "UnsqueezeRules",
        "reference_mask",
    ),
    "d5core.onnx.indexing_rules": (
        "ONNX_ELEMENT_TYPES",
        "CastRules",
        "ConstantOfShapeRules",
        "ExpandRules",
        "GatherElementsRules",
        "GatherRules",
        "ShapeRules",
        "SliceRules",
        "SplitRules",
        "TriluRules",
        "WhereRules",
        "cast_target",
        "slice_bounds",
    ),
    "d5core.onnx.backend": (
        "OPERATOR_ORDER",
        "BackendOperator",
        "SlottedBackend",
        "ordered_operator_classes",
    ),
    "d5core.onnx.translation": (
        "GraphView",
        "graph_view",
        "node_errors",
    ),
    "d5core.onnx.optimizers": ("NativeOptimizer",),
}
_HOME_OF: dict[str, str] = {name: home for home, names in HOMES.items() for name in names}

__all__ = [
    "AUTO_PADS",
    "GRAPH_OPERATORS",
    "LOSS_REDUCTIONS",
    "ONNX_ELEMENT_TYPES",
    "ONNX_HELPERS_VERSION",
    "OPERATOR_ORDER",
    "RECURRENT_ACTIVATIONS",
    "RECURRENT_DEFAULT_ACTIVATIONS",
    "RECURRENT_GATES",
    "ActivationDefaults",
    "AlongAxisRules",
    "AveragePoolRules",
    "BackendOperator",
    "BatchNormalizationRules",
    "BroadcastingRules",
    "CastRules",
    "ConcatRules",
    "ConstantOfShapeRules",
    "ConvRules",
    "ConvTransposeRules",
    "ConvolutionRules",
    "DescribedInput",
    "DropoutRules",
    "ExpandRules",
    "FlattenRules",
    "GatherElementsRules",
    "GatherRules",
    "GeluRules",
    "GemmRules",
    "GlobalAveragePoolRules",
    "GraphNodeOperator",
    "GraphView",
    "InputSlot",
    "LayerNormalizationRules",
    "LogSoftmaxRules",
    "LossRules",
    "MatMulRules",
    "MaxPoolRules",
    "MeanSquaredErrorRules",
    "NativeOptimizer",
    "OperatorSignature",
    "PoolRules",
    "RecurrentActivationSpec",
    "RecurrentAttributes",
    "RecurrentRules",
    "ReduceMaxRules",
    "ReduceMeanRules",
    "ReduceRules",
    "ReduceSumRules",
    "ReshapeRules",
    "ShapeRules",
    "Signature",
    "SliceRules",
    "SlottedBackend",
    "SlottedOperator",
    "SoftmaxCrossEntropyLossRules",
    "SoftmaxRules",
    "SpatialWindow",
    "SplitRules",
    "SqueezeRules",
    "TransposeRules",
    "TransposedWindow",
    "TriluRules",
    "UnsqueezeRules",
    "WhereRules",
    "average_pool_divisors",
    "cast_target",
    "check_attribute_names",
    "check_auto_pad",
    "check_class_labels",
    "check_concat_shapes",
    "check_float_dtypes",
    "check_per_channel",
    "check_rank",
    "check_scalar_input",
    "constant_value",
    "conv_transpose_window",
    "conv_window",
    "dropout_ratio",
    "flatten_target",
    "gemm_output_shape",
    "graph_operator_classes",
    "graph_view",
    "int_list_attribute",
    "integer_values",
    "is_integer_dtype",
    "legacy_broadcast",
    "legacy_broadcast_shape",
    "match_input_slots",
    "node_attributes",
    "node_errors",
    "node_pads",
    "normalize_axes",
    "one_node",
    "one_node_opset",
    "onnx_signature",
    "ordered_operator_classes",
    "recurrent_attributes",
    "reference_mask",
    "reshape_target",
    "resolve_pads",
    "slice_bounds",
    "slot_has_no_gradient",
    "spatial_window",
    "squeeze_axes",
    "transpose_perm",
    "unsqueeze_axes",
]

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        """Import a public name from its home module on first use (PEP 562)."""
        home = _HOME_OF.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
