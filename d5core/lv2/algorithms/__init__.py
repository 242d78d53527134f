"""Training algorithms compared the AlgoPerf way (issue 33).

An algorithm is AlgoPerf's five functions in d5's terms (the kernel's
:class:`d5core.levels.training.TrainingAlgorithm`); a suite is a set of FIXED recipes,
each with a target and a training-time budget. ``d5 bench algorithms`` runs every
algorithm on every workload of a suite under a tuning ruleset and stores each trial
(:mod:`.trials`); ``d5 results score`` turns the trials into performance profiles and
scores (:mod:`.scoring`), and ``d5 report`` draws them (:mod:`.figures`).
"""
