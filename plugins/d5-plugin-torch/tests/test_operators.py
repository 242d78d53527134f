"""Every torch operator, forward and backward, against d5's numpy reference.

The shared kit (:class:`d5core.testing.operator_agreement.OperatorAgreementTests`) draws
shapes, attributes and data away from kinks with hypothesis for each operator and runs
:func:`d5core.validate.validate_operator` on them, in float32 and float64
(``D5_PROPERTY_EXAMPLES`` draws more examples). Torch draws its own dropout masks, so
training with a nonzero ratio is left to test_operators_dropout.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from d5_plugin_torch.operators import TorchBackend

from d5core.testing.operator_agreement import OperatorAgreementTests, property_examples


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny tensors gain nothing from threads, and on a shared 2-core machine torch's
    spinning workers can make each call a thousand times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class TestTorchAgreesWithTheReference(OperatorAgreementTests):
    backend = TorchBackend()
    examples = property_examples(20)
    seeded_dropout = False
