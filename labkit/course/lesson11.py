"""Interview practice: what notebooks/11_interview_practice.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("11")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the two exercises as ``part="zookeeper"`` and
``part="etcd"``, the calibration summary). Every name here is a re-export: the cards, deck,
scenarios, checkers and the expiry-storm run live in labkit.practice, the paused holder in
labkit.lessons, the torture run in labkit.torture."""
from labkit.lessons.common import table
from labkit.lessons.pauses_and_fencing import pause_past_timeout
from labkit.locks.errors import SessionExpired
from labkit.record.plots import hold_timeline, store_writes_plot
from labkit.practice.calibration import course_calibration
from labkit.practice.cards import CARDS
from labkit.practice.deck import Deck
from labkit.practice.exercises import LESSON_EXERCISES, check_etcd_wait, check_zookeeper_lock, examples
from labkit.practice.exercises.pitfalls import wakeups_of_one_release
from labkit.practice.expiry_storm import load_storm, reconnect_curve, storm_facts
from labkit.practice.links import FOUND, MISSING, NOT_WRITTEN, link_status
from labkit.practice.mock_interview import show_mock_interview
from labkit.practice.predict import REVEALED, predict
from labkit.practice.scenarios import SCENARIOS, ScenarioPanel, show_scenario
from labkit.torture import torture

# One ZooKeeper node and one etcd member for the exercises and pitfalls; Redis for the shared record
SHAPE = {"zookeeper": 1, "etcd": 1, "redis": True}   # lesson.lab()

__all__ = ["CARDS", "check_etcd_wait", "check_zookeeper_lock", "course_calibration", "Deck", "examples", "FOUND",
           "hold_timeline", "LESSON_EXERCISES", "link_status", "load_storm", "MISSING", "NOT_WRITTEN",
           "pause_past_timeout", "predict", "reconnect_curve", "REVEALED", "ScenarioPanel", "SCENARIOS",
           "SessionExpired", "SHAPE", "show_mock_interview", "show_scenario", "storm_facts", "store_writes_plot",
           "table", "torture", "wakeups_of_one_release"]
