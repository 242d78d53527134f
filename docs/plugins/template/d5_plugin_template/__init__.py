"""A d5 plugin (replace this docstring)."""

__version__ = "0.1.0"
