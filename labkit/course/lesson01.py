"""Redis or consensus? Measure it, then break it: what notebooks/01_redis_vs_consensus.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("01")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.faults.redis import fail_over, key_facts, wait_for_replication
from labkit.lessons import peers
from labkit.lessons.common import table
from labkit.lessons.redis_vs_consensus import (acquire_and_release, grant_twice_on_failover, kill_leaders,
                                               kill_redis_holder, leader_crash_pairs, resurrect_from_snapshot,
                                               SLOWER_CHOICES, times_slower, vanish_on_restart)
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.redis_lock import RedisLock
from labkit.locks.zookeeper import ZooKeeperLock
from labkit.record.plots import hold_timeline, latency_plot
from labkit.practice.exercises import check_redis_unlock, lesson_examples
from labkit.practice.predict import predict
from labkit.record.history import History
from labkit.stats import take_turns

SHAPE = {"zookeeper": 1, "etcd": 1, "redis": True}   # lesson.lab()

__all__ = ["acquire_and_release", "check_redis_unlock", "EtcdMutex", "EtcdSession", "fail_over",
           "grant_twice_on_failover", "History", "hold_timeline", "key_facts", "kill_leaders",
           "kill_redis_holder", "latency_plot", "leader_crash_pairs", "lesson_examples", "peers", "predict",
           "RedisLock", "resurrect_from_snapshot", "SHAPE", "SLOWER_CHOICES", "table", "take_turns",
           "times_slower", "vanish_on_restart", "wait_for_replication", "ZooKeeperLock"]
