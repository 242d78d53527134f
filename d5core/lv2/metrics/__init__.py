"""The training metrics (``d5.metrics`` entries of d5core): :mod:`.accuracy` (training,
test and final test accuracy, time to accuracy), :mod:`.loss` (the loss curve, time to
loss) and :mod:`.perplexity`.

Classes are imported from their module on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from d5core.lv2.metrics.accuracy import (
        FinalTestAccuracy,
        TestAccuracy,
        TimeToAccuracy,
        TrainingAccuracy,
    )
    from d5core.lv2.metrics.loss import LossCurve, TimeToLoss
    from d5core.lv2.metrics.perplexity import (
        FinalPerplexity,
        TimeToPerplexity,
        ValidationPerplexity,
    )

__all__ = [
    "FinalPerplexity",
    "FinalTestAccuracy",
    "LossCurve",
    "TestAccuracy",
    "TimeToAccuracy",
    "TimeToLoss",
    "TimeToPerplexity",
    "TrainingAccuracy",
    "ValidationPerplexity",
]

_MODULES = {
    "FinalPerplexity": "perplexity",
    "FinalTestAccuracy": "accuracy",
    "LossCurve": "loss",
    "TestAccuracy": "accuracy",
    "TimeToAccuracy": "accuracy",
    "TimeToLoss": "loss",
    "TimeToPerplexity": "perplexity",
    "TrainingAccuracy": "accuracy",
    "ValidationPerplexity": "perplexity",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
