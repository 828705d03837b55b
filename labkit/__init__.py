"""labkit: real ZooKeeper, etcd and Redis clusters, lock recipes, faults and graphs for the
Distributed Locks Lab course. A notebook starts with ``lesson = labkit.lesson("04")``
(labkit/course: the lesson's lab, experiments, predictions, exercise and cards)."""
import importlib

from labkit.errors import LabError
from labkit.servers import Lab, attach, attach_or_up, down_all, up

__all__ = ["Lab", "LabError", "attach", "attach_or_up", "down_all", "lesson", "up"]
__version__ = "0.1.0"


def lesson(number: str):
    """Lesson ``number``'s handle (``labkit.course.Lesson``): its lab, experiments, predictions,
    exercise and cards. The course layer loads here, not at ``import labkit``: it brings the
    widgets and matplotlib, which lock client processes and the command line never need."""
    return importlib.import_module("labkit.course").lesson(number)
