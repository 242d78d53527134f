"""The crash suite (``CustomOpCrashTests``) through the mxnet glue:
a C++ custom operator that segfaults, aborts, throws a non-exception, frees twice, loops
forever, exits the process, gives NaN or writes a wrong shape ends ``d5 validate op
--custom`` as a failed check (exit 1, one line naming the fault), stored as a failed
validation; d5 never dies or hangs."""

from __future__ import annotations

import pytest

from d5core.testing.customop import CustomOpCrashTests

pytest.importorskip("mxnet")


class TestMXNetCustomOpCrashes(CustomOpCrashTests):
    framework = "mxnet"
