"""Level 3 interfaces: communicators between ranks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

__all__ = ["Communicator"]


class Communicator(ABC):
    """Moves numpy buffers between the ranks of a job; registered in ``d5.communication``.

    Every call counts the bytes it sends and receives, so that communication volume is
    measured by the layer that knows it.
    """

    name: ClassVar[str] = ""

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank, from 0."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of ranks."""

    @abstractmethod
    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Combine ``array`` from every rank with ``op`` and return the result on all."""

    @abstractmethod
    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        """Return ``root``'s array on every rank."""

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank has reached this call."""
