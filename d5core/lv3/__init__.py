"""Level 3, distributed training: an internal plugin package of d5core.

Launching ranks and gathering what they report (:mod:`~d5core.lv3.launch`, used by
``d5 run --ranks``), the collective sweep behind ``d5 bench comm``
(:mod:`~d5core.lv3.comm_sweep`), the communication-volume metric and the distributed
figures of the report. It reaches the kernel through the hooks of
:mod:`d5core.lv3.plugin` and d5core's ``d5.metrics`` entry points.

Importing this package imports nothing else: d5 imports :mod:`d5core.lv3.plugin` at
every start.
"""
