"""A d5 plugin (replace this docstring)."""
