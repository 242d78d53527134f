"""``d5 report``, an internal plugin package of d5core: stored runs drawn as figures in
one self-contained HTML file, with PNG and PDF copies of every figure for papers.

The figures come from the ``d5_report_figures`` hook (each level draws its own section
from its internal plugin; this package adds the history). :mod:`d5core.levels.report`
holds the types they are made of, :mod:`~d5core.report.build` collects them,
:mod:`~d5core.report.html` writes the page and :mod:`~d5core.report.command` is the
command.

Importing this package imports nothing else: d5 imports :mod:`d5core.report.plugin` at
every start.
"""
