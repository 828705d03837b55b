"""Observing lock health: what notebooks/06_observing_lock_health.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("06")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit import faults
from labkit.clients import spawn_clients
from labkit.health import (Dashboard, EtcdProbe, HealthSampler, LEASE_LOST, SESSION_EXPIRED, SteadyWorkload,
                           ZooKeeperProbe)
from labkit.health.watch_census import parent_watch_census, predecessor_watch_census, watch_census_plot
from labkit.lessons.observing import first_hand_on, node_gone_after_kill
from labkit.practice.exercises import check_queue_depth, lesson_examples
from labkit.practice.predict import predict
from labkit.servers.services.zookeeper import TICK_MS
from labkit.timing import wait_until
from labkit.torture import torture

SHAPE = {"zookeeper": 1, "etcd": 3}   # lesson.lab()

__all__ = ["check_queue_depth", "Dashboard", "EtcdProbe", "faults", "first_hand_on", "HealthSampler",
           "LEASE_LOST", "lesson_examples", "node_gone_after_kill", "parent_watch_census",
           "predecessor_watch_census", "predict", "SESSION_EXPIRED", "SHAPE", "spawn_clients",
           "SteadyWorkload", "TICK_MS", "torture", "wait_until", "watch_census_plot", "ZooKeeperProbe"]
