"""The lock lab control panel: what notebooks/lab_panel.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("lab_panel")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.widgets import LockPanel

SHAPE = {"zookeeper": 3, "etcd": 1, "redis": True, "network": True}   # lesson.lab()

__all__ = ["LockPanel", "SHAPE"]
