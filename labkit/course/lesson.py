"""``Lesson``: what a notebook needs, reached through one handle (``lesson = labkit.lesson("04")``).

What can fail: a number with no notebook or no facade module raises LessonNotFound with the
numbers there are; a name the facade does not hold raises AttributeError naming its file.
The experiments live in ``labkit/course/lessonNN.py`` (re-exports of labkit.lessons, recipes,
checkers and plots); this class adds only what every lesson has in the same shape: its lab,
read aloud, the exercise's ladder and check, its cards and its calibration summary."""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from labkit.errors import LabError, LessonNotFound
from labkit.practice.calibration import Calibration, your_predictions
from labkit.practice.cards import CARDS
from labkit.practice.deck import Deck
from labkit.practice.exercises.ladder import check_exercise, reveal_solution, show_solution
from labkit.servers import Lab, up
from labkit.widgets.read_aloud import COURSE_NOTEBOOKS, ReadAloud, read_aloud

FACADES = Path(__file__).resolve().parent


class Lesson:
    """Lesson ``number``'s handle. Attributes other than the methods below come from its
    facade module (``experiments``), so the notebook writes ``lesson.table(...)`` the way d2l's
    notebooks write ``d2l.plot(...)``."""

    def __init__(self, number: str):
        module = facade_name(number)
        facades = sorted(path.stem for path in FACADES.glob("*.py") if path.stem not in ("__init__", "lesson"))
        notebooks = notebooks_of(number)
        if module not in facades or len(notebooks) != 1:
            raise LessonNotFound(f"no lesson {number!r}: labkit/course/ has the facades {', '.join(facades)} "
                                 f"and {len(notebooks)} notebook(s) are named {number}_*.ipynb or {number}.ipynb here or in {COURSE_NOTEBOOKS}",
                                 hint="pass a lesson's two-digit number as a string, e.g. labkit.lesson(\"04\"), "
                                      "or a notebook's name without a number, e.g. labkit.lesson(\"sandbox\")")
        self.number = number
        self.notebook = notebooks[0].name
        # the facade is found by the lesson's number: a lookup in a folder of files, not a hidden cycle
        self.experiments: ModuleType = importlib.import_module(f"labkit.course.{module}")

    def __repr__(self) -> str:
        return f"Lesson({self.number!r}: {self.notebook})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "experiments":
            raise AttributeError(name)
        try:
            return getattr(self.experiments, name)
        except AttributeError:
            raise AttributeError(f"lesson {self.number} has no {name!r}: add it to labkit/course/{facade_name(self.number)}.py "
                                 f"if notebook {self.notebook} needs it") from None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(getattr(self.experiments, "__all__", ())))

    def lab(self, **changes: Any) -> Lab:
        """A lab in this lesson's shape (``SHAPE`` in its facade), with ``changes`` on top."""
        shape = getattr(self.experiments, "SHAPE", None)
        if shape is None:
            raise LabError(f"{self.notebook} runs no lab: its facade has no SHAPE",
                           hint="start one with labkit.up(zookeeper=1, ...) if you need servers here")
        return up(**{**shape, **changes})

    def read_aloud(self) -> ReadAloud:
        """The read-aloud control for this lesson's notebook (make it a cell's last line)."""
        return read_aloud(self.notebook)

    def exercise_name(self, part: str | None = None) -> str:
        """The exercise's name in the ladder: the number, or ``"09-etcd"`` for a lesson's second part."""
        return self.number if part is None else f"{self.number}-{part}"

    def reveal_solution(self, part: str | None = None):
        """The exercise's ladder as a button: hint 1, hint 2, then the reference solution."""
        return reveal_solution(self.exercise_name(part))

    def show_solution(self, part: str | None = None) -> str:
        """The ladder in text: each call prints the next hint, the last the solution."""
        return show_solution(self.exercise_name(part))

    def check_exercise(self, *functions: Callable, lab: Any, part: str | None = None, **options: Any):
        """Run the exercise's checker on the learner's ``functions`` and print its explanation."""
        return check_exercise(self.exercise_name(part), *functions, lab=lab, **options)

    def cards(self) -> Deck:
        """A deck of the practice cards whose answers this lesson's notebook proves."""
        return Deck([card for card in CARDS if any(notebook == self.notebook for notebook, _ in card.proves)])

    def your_predictions(self) -> Calibration:
        """Print and return the calibration of this lesson's predictions (``missing``: those the
        journal lacks)."""
        return your_predictions(self.number)


def notebooks_of(number: str) -> list[Path]:
    """The notebooks of lesson ``number``: beside the running notebook (Jupyter runs a lesson in
    its own folder, wherever labkit is installed), else in the course's notebooks folder."""
    for folder in dict.fromkeys((Path.cwd(), COURSE_NOTEBOOKS)):
        found = sorted(folder.glob(f"{number}_*.ipynb")) or sorted(folder.glob(f"{number}.ipynb"))
        if found:
            return found
    return []


def facade_name(number: str) -> str:
    """The facade module of lesson ``number``: ``lesson04`` for "04", the name itself for an
    unnumbered notebook ("sandbox", "lab_panel")."""
    return f"lesson{number}" if number.isdigit() else number


def lesson(number: str) -> Lesson:
    """Lesson ``number``'s handle, e.g. ``lesson = labkit.lesson("04")``."""
    return Lesson(number)
