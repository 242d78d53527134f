"""JAX for d5."""

__version__ = "0.1.0"
