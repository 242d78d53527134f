"""The ``d5`` command line."""

from __future__ import annotations

from d5core.cli.app import cli, main

__all__ = ["cli", "main"]
