"""``polyak-sgd`` as a training algorithm: AlgoPerf's five functions in d5 terms.

- ``init_optimizer_state`` and ``update_params``: :meth:`PolyakAlgorithm.settings` names
  the ``polyak-sgd`` optimizer with the learning rate and options of the sampled point;
  the trainer builds it and steps it.
- ``get_batch_size``: the workload's own batch size (the default, ``None``).
- ``prepare_for_eval``: the averaged parameters, so every test pass scores the average.
- ``data_selection``: the sampler's batch as it is (the default).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any, ClassVar

import numpy as np
import tomllib

from d5core.api import Optimizer, TrainingAlgorithm

__all__ = ["PolyakAlgorithm"]

_SPACE = resources.files("d5_polyak").joinpath("search_space.toml").read_text(encoding="utf-8")


class PolyakAlgorithm(TrainingAlgorithm):
    """Momentum SGD evaluated on an exponential average of its parameters."""

    name: ClassVar[str] = "polyak-sgd"
    search_space: ClassVar[Mapping[str, Any]] = tomllib.loads(_SPACE)["search_space"]

    def settings(self, workload: str, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
        """The ``polyak-sgd`` optimizer with the point's learning rate, momentum, decay."""
        return {
            "optimizer": "polyak-sgd",
            "lr": hyperparameters["lr"],
            "optimizer_options": {
                "momentum": hyperparameters["momentum"],
                "decay": hyperparameters["decay"],
            },
        }

    def prepare_for_eval(
        self, params: Mapping[str, np.ndarray], optimizer: Optimizer
    ) -> Mapping[str, np.ndarray] | None:
        """The averaged parameters (live ones where there is no average yet)."""
        averages = getattr(optimizer, "averages", None)
        if not callable(averages):
            return None  # another optimizer: nothing to average
        averaged = averages()
        if not averaged:
            return None
        return {key: averaged.get(key, value) for key, value in params.items()}
