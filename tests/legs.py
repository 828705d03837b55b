"""Which tests each leg of the suite runs, and the parts a leg can be split in: plain data,
used by tests/conftest.py and checked by tests/suite/test_scripts.py. (Its own module: the notebooks
folder has a conftest.py too, so ``from conftest import ...`` can find the other one.)
Files are named without their room (tests/<room>/test_x.py is "test_x.py"): the names are
unique across the rooms (tests/suite/test_layout.py)."""

# The races whose asserts are about timing (who lapses or acquires first, within margins of a
# few hundred ms): when test files run side by side (pytest -n, scripts/ci/local.sh), these
# files run one after another on one worker, never two at once; the other workers run the rest.
# Measured: with 3 workers and the races as one unit every race passed on a machine loaded by
# other runs; with 4 workers one curator race came out inverted. The benchmarks assert no
# timing (tests/bench/test_bench.py), so they are not races.
RACES = ("test_holder_safety.py", "test_torture_nemeses.py", "test_clock_drift.py", "test_pre_vote.py",
         "test_curator_topologies.py", "test_delayed_write.py", "test_semaphore_deadlines.py")

# Not races, but their deadlines are about how fast the servers react, and a machine loaded by
# other workers missed them (fresh-clone runs with 3 workers): a Sentinel failover past 30 s;
# an etcd torture soak whose held share fell under its old floor.
LOAD_SENSITIVE = ("test_sentinel.py", "test_torture.py")

# The races part (--part races) in two groups that run side by side (pytest -n 2, one worker a
# group; scripts/lib.sh run_pytest_in_parts), each group's files one after another: a race mostly
# waits (sessions, leases, elections), so two of them on separate labs leave each other the
# CPU the moment they wake. Balanced by --durations=0 runs on a 2-core machine shared with
# other sessions (2026-12-02): the races alone, one file at a time, at load 10-48, 1783 s:
# holder_safety 474 s, semaphore_deadlines 528 (of which 349 the four 10-run negative
# controls, now 3-run), torture 208, torture_nemeses 206, clock_drift 142, curator_topologies
# 77, pre_vote 66, delayed_write 38, sentinel 23. In two groups at load 23-40, 1074 s: holder_safety
# 449, torture_nemeses 227, pre_vote 52 | semaphore_deadlines 305, torture 264, clock_drift 182,
# curator_topologies 106, delayed_write 32, sentinel 29; curator_topologies moved over since.
# So, at load 0.4-5.6 (this machine nearly alone): 633 s; holder_safety 404, torture_nemeses 128,
# pre_vote 48, curator_topologies 41 | semaphore_deadlines 256, clock_drift 136, torture 115,
# delayed_write 26, sentinel 19; every safety run safe, the smallest margin 301 ms.
RACE_GROUPS = (
    ("test_holder_safety.py", "test_torture_nemeses.py", "test_curator_topologies.py", "test_pre_vote.py"),
    ("test_semaphore_deadlines.py", "test_torture.py", "test_clock_drift.py", "test_delayed_write.py",
     "test_sentinel.py"),
)

PARTS = {
    "all": lambda name: True,
    "races": lambda name: name in RACES + LOAD_SENSITIVE,
    "rest": lambda name: name not in RACES + LOAD_SENSITIVE,
}

LEGS = {
    # leg: (backend, does a test with these markers run?)
    "local": ("local", lambda marks: "docker" not in marks),
    "quick": ("local", lambda marks: not marks & {"docker", "slow", "browser"}),
    "docker": ("docker", lambda marks: bool(marks & {"backend", "docker"}) and "local_backend" not in marks),
    "pythons": ("local", lambda marks: "no_servers" in marks and not marks & {"docker", "slow", "browser"}),
}
