"""Level 2, training: an internal plugin package of d5core.

The trainer (:mod:`~d5core.lv2.trainer`), recipes and their assembly into a run
(:mod:`~d5core.lv2.recipes`, :mod:`~d5core.lv2.assembly`), datasets, samplers, transforms,
schedules and gradient modifiers, the training metrics (:mod:`d5core.lv2.metrics`), the
runner behind ``d5 run`` (:mod:`~d5core.lv2.runner`) and the training figures of the
report. It reaches the kernel through the hooks of :mod:`d5core.lv2.plugin` and through
d5core's ``d5.datasets`` and ``d5.metrics`` entry points.

Importing this package imports nothing else: d5 imports :mod:`d5core.lv2.plugin` at
every start.
"""
