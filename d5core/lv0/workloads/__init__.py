"""Workloads: the problems d5 benchmarks, and the machine bounds they are compared with."""
