"""Results for teams: the PostgreSQL store, and moving runs between stores.

d5's internal plugin for results shared by many people and many jobs; the kernel's
store (:mod:`d5core.results`) reaches it only through hooks:

- :mod:`d5core.teamstore.postgres_backend` and :mod:`d5core.teamstore.postgres_schema`:
  the PostgreSQL backend of :class:`~d5core.results.ResultsStore`, opened for
  ``postgresql://`` URLs through ``d5_results_backend``;
- :mod:`d5core.teamstore.transfer`: merging stores and the JSON Lines files that move
  runs between sites;
- :mod:`d5core.teamstore.merge_cmd`: ``d5 results merge`` and ``d5 results import``.
"""
