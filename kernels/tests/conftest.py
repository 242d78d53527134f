"""The ``isa`` fixture: every test that takes it runs once per micro-kernel ISA d5-kernels
has (generic, avx2, avx512). An ISA this CPU cannot run is skipped with the reason, so a
run on an AVX2-only machine shows the AVX-512 tests as skipped, not as absent."""

from __future__ import annotations

import pytest
from d5_kernels import runtime


@pytest.fixture(params=tuple(runtime.ISA_REQUIREMENTS))
def isa(request: pytest.FixtureRequest) -> str:
    """The name of one ISA this CPU runs (the test uses ``runtime.using_isa(isa)``)."""
    name: str = request.param
    reason = runtime.why_unavailable(name)
    if reason is not None:
        pytest.skip(reason)
    return name
