"""Level 0, operators: an internal plugin package of d5core.

The runner of ``d5 bench op`` and ``d5 validate op`` (:mod:`~d5core.lv0.runner`), their
commands, the measurement job (:mod:`~d5core.lv0.jobs`), the workloads (shape suites,
DeepBench, roofline, memory bandwidth; :mod:`d5core.lv0.workloads`), C++ custom
operators (:mod:`d5core.lv0.customop`, ``d5 op``) and the operators' report figures. It
reaches the kernel through the hooks of :mod:`d5core.lv0.plugin`.

Importing this package imports nothing else: d5 imports :mod:`d5core.lv0.plugin` at
every start.
"""
