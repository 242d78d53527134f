"""Refuse work whose tensors cannot fit in memory, before anything is allocated.

A problem of ``--shape 1000000x1000000`` or a model input declared ``[1, 4e9]`` would
otherwise be allocated until the machine swaps or the kernel kills d5. The estimate is a
lower bound (the tensors d5 itself makes); it is compared with the memory available now.
"""

from __future__ import annotations

from d5core.errors import UsageError

__all__ = ["available_bytes", "check_fits", "gib"]


def available_bytes() -> int:
    """Memory that can be allocated now without swapping, in bytes (psutil's figure)."""
    import psutil

    return int(psutil.virtual_memory().available)


def gib(nbytes: float) -> str:
    """``nbytes`` in GiB, for messages: ``"7450.6 GiB"``."""
    return f"{nbytes / 2**30:.1f} GiB"


def check_fits(nbytes: int, what: str, fix: str) -> None:
    """Raise a one-line UsageError when ``nbytes`` exceed the available memory.

    :param what: the subject of the message, with ``{need}`` where the estimate goes,
        for example ``"problem Gemm[...] needs at least {need} for its tensors"``.
    :param fix: what the user can do, for example ``"give smaller --shape"``.
    """
    available = available_bytes()
    if nbytes > available:
        raise UsageError(
            f"{what.format(need=gib(nbytes))}, more than the {gib(available)} of memory "
            f"available; {fix}"
        )
