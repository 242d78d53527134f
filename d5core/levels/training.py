"""Level 2 interfaces: datasets, samplers and optimizers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import ClassVar

import numpy as np

__all__ = ["Dataset", "Optimizer", "Sampler"]


class Dataset(ABC):
    """Labelled examples addressed by index; registered in ``d5.datasets``."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of examples."""

    @abstractmethod
    def batch(self, indices: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inputs and labels of the examples at ``indices``."""


class Sampler(ABC):
    """Decides which examples form each minibatch of an epoch."""

    def __init__(self, size: int, batch_size: int, *, seed: int = 0) -> None:
        self.size, self.batch_size, self.seed = size, batch_size, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch``: samplers that shuffle derive their order from it."""
        self.epoch = epoch

    @abstractmethod
    def __iter__(self) -> Iterator[np.ndarray]:
        """Index arrays, one per minibatch, for the current epoch."""


class Optimizer(ABC):
    """Updates parameters from their gradients; registered in ``d5.optimizers``."""

    #: The name users select the optimizer by.
    name: ClassVar[str] = ""

    @abstractmethod
    def step(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """Update ``params`` in place from ``grads``."""
