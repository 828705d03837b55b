"""The benchmarks, ``labkit bench`` (``command``): the recipes' costs and wakeups on one lab
(``recipes``), beside the libraries learners use (``peers``); what the fault proxy costs
(``network``); the hand-off among N contender processes (``processes/``); and 1000
contenders over worker processes (``scale/``). Lowest first: network, scale, peers,
processes, recipes, command (tests/suite/test_architecture.py, BENCH_PARTS)."""
