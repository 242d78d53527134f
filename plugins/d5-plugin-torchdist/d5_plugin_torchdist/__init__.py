"""torch.distributed for d5: a communicator over gloo and the ``torchrun`` launcher."""

__all__ = ["__version__"]

__version__ = "0.1.0"
