"""The shared kit's properties of the transformer operators, run on the reference
itself: every drawn problem must pass the central-difference gradient check (the
reference's backward against its own forward, in float64) and the kit's draws must be
problems the reference accepts."""

from __future__ import annotations

from collections.abc import Collection

from d5_plugin_numpy.backend import NumpyBackend

from d5core.testing.operator_agreement import (
    CORE_OPERATORS,
    PROPERTIES,
    OperatorAgreementTests,
    property_examples,
)

#: The operators added for transformers (the recurrent ones have their own tests).
TRANSFORMER_OPERATORS = tuple(
    op for op in PROPERTIES if op not in CORE_OPERATORS and op not in ("LSTM", "GRU")
)


class _TransformerOperators(NumpyBackend):
    """The reference, offering only the transformer operators (the kit checks that a
    backend offers exactly the operators under test)."""

    def supported(self) -> Collection[str]:
        return sorted(TRANSFORMER_OPERATORS)


class TestReferenceTransformerProperties(OperatorAgreementTests):
    backend = _TransformerOperators()
    operators = TRANSFORMER_OPERATORS
    examples = property_examples(8)
    default_problem_dtypes = ("float32",)


def test_the_transformer_operators_are_the_ones_added() -> None:
    assert len(TRANSFORMER_OPERATORS) == 23  # 21, then Split and Trilu (GPT-2 exports)
    assert {"Split", "Trilu"} <= set(TRANSFORMER_OPERATORS)
    assert "LayerNormalization" in TRANSFORMER_OPERATORS and "Gemm" not in TRANSFORMER_OPERATORS
