"""``polyak-sgd``: heavy-ball momentum that also keeps an exponential average of each
parameter, for the algorithm to evaluate with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from d5core.api import Optimizer

__all__ = ["PolyakSGD"]


class PolyakSGD(Optimizer):
    """``v = m v + g``; ``p -= lr v``; then ``a = d a + (1 - d) p`` (``a`` starts at 0).

    :meth:`averages` gives the bias-corrected averages ``a / (1 - d^t)``, which weigh the
    parameters of the last ``1 / (1 - d)`` steps or so.
    """

    name: ClassVar[str] = "polyak-sgd"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9, "decay": 0.99}

    def update(
        self, param: np.ndarray, grad: np.ndarray, state: dict[str, np.ndarray], t: int
    ) -> None:
        velocity = self.zeros(state, "velocity", param)
        velocity *= self.hyper["momentum"]
        velocity += grad
        param -= self.lr * velocity
        average = self.zeros(state, "average", param)
        decay = self.hyper["decay"]
        average *= decay
        average += (1 - decay) * param

    def averages(self) -> Mapping[str, np.ndarray]:
        """Each stepped parameter's bias-corrected average (empty before the first step)."""
        decay = self.hyper["decay"]
        return {
            key: state["average"] / (1 - decay ** self.steps[key])
            for key, state in self.state.items()
            if "average" in state and self.steps.get(key, 0) > 0
        }
