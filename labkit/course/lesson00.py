"""Start here: what notebooks/00_start_here.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("00")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.lessons.common import table
from labkit.lessons.start_here import (contender_factory, DeletionWatch, exit_without_closing, lock_numbers,
                                       serve_in_queue_order)
from labkit.lessons.zookeeper_recipe import watchers_of
from labkit.locks.etcd_mutex import EtcdMutex
from labkit.locks.etcd_session import EtcdSession
from labkit.locks.redis_lock import RedisLock
from labkit.locks.zookeeper import sequence_of, ZooKeeperLock
from labkit.record.plots import hold_timeline
from labkit.practice.predict import predict
from labkit.record.history import History
from labkit.servers.runners.discovery import doctor
from labkit.servers.services.zookeeper import TICK_MS
from labkit.timing import seconds_until, wait_until
from labkit.widgets import maps

SHAPE = {"zookeeper": 1, "etcd": 1, "redis": True}   # lesson.lab()

__all__ = ["contender_factory", "DeletionWatch", "doctor", "EtcdMutex", "EtcdSession", "exit_without_closing",
           "History", "hold_timeline", "lock_numbers", "maps", "predict", "RedisLock", "seconds_until",
           "sequence_of", "serve_in_queue_order", "SHAPE", "table", "TICK_MS", "wait_until", "watchers_of",
           "ZooKeeperLock"]
