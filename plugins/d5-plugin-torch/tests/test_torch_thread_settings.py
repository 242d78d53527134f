"""The torch plugin reports torch's thread pools for the fitness record, once torch runs."""

from __future__ import annotations

import subprocess
import sys

import torch
from d5_plugin_torch import plugin

from d5core.testing.kernel import fitness_threads


def test_the_fitness_record_carries_torch_thread_pools() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        threads = fitness_threads()
    finally:
        torch.set_num_threads(before)
    assert threads["torch.get_num_threads()"] == "1"
    assert threads["torch.get_num_interop_threads()"] == str(torch.get_num_interop_threads())


def test_thread_settings_never_import_torch() -> None:
    code = (
        "import sys; from d5_plugin_torch import plugin; "
        "print(plugin.d5_thread_settings(), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "False"]
    assert plugin.d5_thread_settings() is not None  # here torch is imported
