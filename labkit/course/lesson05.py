"""Coordinator crash and quorum: what notebooks/05_coordinator_crash_and_quorum.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("05")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit import faults
from labkit.clients import spawn_clients
from labkit.faults.redis import cut_replication, fail_over, key_facts, wait_for_replication
from labkit.harness.queue import queue_behind, release_in_turn
from labkit.lessons.common import table
from labkit.lessons.coordinator_crash import (acquisitions_through_members, crash_then_fail_over,
                                              ETCD_ELECTION_TIMEOUT, etcd_queue, etcd_write,
                                              failover_timers_plot, LEASE_EXPIRY_CHECK, lose_majority,
                                              ordering_plot, recovery_plot, FAILOVER_WAITER_TIMEOUT, zookeeper_write)
from labkit.locks.redis_lock import RedisLock
from labkit.locks.zookeeper import sorted_contenders
from labkit.locks.zookeeper_deadline import heartbeat_for
from labkit.record.plots import hold_timeline
from labkit.practice.exercises import check_guarded_put, lesson_examples
from labkit.practice.predict import predict
from labkit.record.checker import check_fifo
from labkit.record.history import History
from labkit.servers.services.zookeeper import TICK_MS
from labkit.timing import seconds_until
from labkit.widgets import LockPanel

SHAPE = {"zookeeper": 3, "etcd": 3, "redis": True, "replica": True}   # lesson.lab()

__all__ = ["acquisitions_through_members", "check_fifo", "check_guarded_put", "crash_then_fail_over",
           "cut_replication", "ETCD_ELECTION_TIMEOUT", "etcd_queue", "etcd_write", "fail_over",
           "failover_timers_plot", "faults", "heartbeat_for", "History", "hold_timeline", "key_facts",
           "LEASE_EXPIRY_CHECK", "lesson_examples", "LockPanel", "lose_majority", "ordering_plot", "predict",
           "queue_behind", "recovery_plot", "RedisLock", "release_in_turn", "seconds_until", "SHAPE",
           "sorted_contenders", "spawn_clients", "table", "TICK_MS", "wait_for_replication",
           "FAILOVER_WAITER_TIMEOUT", "zookeeper_write"]
