"""MPI for d5: a communicator over mpi4py and the ``mpiexec`` launcher."""

__all__ = ["__version__"]

__version__ = "0.1.0"
