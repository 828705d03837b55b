"""Worked answers to the scenario interviews: for each scenario, what a mid, a senior and a
staff answer say, in order, with the numbers worked out. They stay hidden until the learner
has written an answer of their own, behind the same kind of ladder as the exercises'
solutions (``labkit.practice.exercises.ladder``): one button, the mid answer first, then the
senior, then the staff one.

    reveal_answers("daily-job-once")          # a box for your answer, then the ladder (text without widgets)
    show_answer("daily-job-once", "senior")   # in text, once you have written yours

Every number a worked answer uses is written in its text and listed with where it comes
from: ``from``, an expression over labkit (a lesson's constant, a measured result a lesson's
code computes, the committed expiry-storm run), or ``arithmetic`` on the prompt's own
numbers; a number from outside both (the answer's own assumption, a product's default, a
paper) is a ``given``, with why. tests/practice/test_worked_answers.py evaluates each source and checks
that every number written in an answer is one of these, so an answer cannot drift from the
course. The texts live in ``worked_answers.json`` next to this module.

In the book (``./lab.sh book``) the ladder has a static copy: a box and one ``<details>`` per
level, which the book's script keeps shut until something is written in the box.

What can fail: ``NoWorkedAnswers`` for a scenario with no worked answers; ``LabError`` for
a level that is not one of mid, senior, staff, or a number whose source is not labkit or
arithmetic.
"""
from __future__ import annotations

import ast
import html
import importlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabError
from labkit.practice.deck import widgets_available
from labkit.practice.rubric import LEVELS

ANSWERS_DATA = Path(__file__).with_name("worked_answers.json")
WORDS_FIRST = 15   # words of the learner's own answer before the first worked answer shows
_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div,
               ast.FloorDiv, ast.USub)
_LABKIT_NAME = re.compile(r"labkit(?:\.[A-Za-z_]\w*)+")


class NoWorkedAnswers(LabError):
    """A scenario id with no worked answers in worked_answers.json."""


@dataclass(frozen=True)
class WorkedNumber:
    """A number as the answer writes it (``text``), its value, and where it comes from."""
    text: str
    value: float
    source: str          # a Python expression over labkit, or plain arithmetic
    origin: str          # "from" (the course) or "arithmetic" (the prompt's numbers)

    def resolve(self) -> float:
        """The value the source gives now."""
        if self.origin == "arithmetic":
            tree = ast.parse(self.source, mode="eval")
            if not all(isinstance(node, _ARITHMETIC) for node in ast.walk(tree)):
                raise LabError(f"{self.source!r} is not plain arithmetic", hint="numbers and + - * / // only")
            return float(eval(compile(tree, "<arithmetic>", "eval"), {"__builtins__": {}}))
        if not _LABKIT_NAME.search(self.source):
            raise LabError(f"{self.source!r} does not read labkit", hint="a lesson's constant or function, labkit.…")
        for dotted in _LABKIT_NAME.findall(self.source):
            parts = dotted.split(".")
            for end in range(2, len(parts) + 1):
                try:
                    importlib.import_module(".".join(parts[:end]))
                except ImportError:
                    break
        return float(eval(self.source, {"__builtins__": {}, "labkit": sys.modules["labkit"]}))

    def tolerance(self) -> float:
        """Half a unit of the last digit the value is written with (23.8: 0.05; 8333: 0.5)."""
        digits = repr(float(self.value)).split(".")[1].rstrip("0")
        return 0.5 * 10 ** -len(digits) + 1e-9 if digits else 0.5


@dataclass(frozen=True)
class WorkedAnswer:
    """``givens``: (text, why) for each number the answer takes from outside the course and
    the prompt (its own assumption, a product's default, a paper), said with why."""
    level: str
    says: tuple[str, ...]
    numbers: tuple[WorkedNumber, ...]
    givens: tuple[tuple[str, str], ...] = ()

    def text(self) -> str:
        return "\n".join(f"{number}. {line}" for number, line in enumerate(self.says, 1))


def load_answers(path: Path = ANSWERS_DATA) -> dict[str, dict[str, WorkedAnswer]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    found = {}
    for entry in raw:
        found[entry["scenario"]] = {
            level: WorkedAnswer(level, tuple(answer["says"]),
                                tuple(WorkedNumber(n["text"], n["value"], n.get("from") or n["arithmetic"],
                                                   "from" if "from" in n else "arithmetic")
                                      for n in answer.get("numbers", ())),
                                tuple((g["text"], g["why"]) for g in answer.get("givens", ())))
            for level, answer in entry["answers"].items()}
    return found


WORKED_ANSWERS = load_answers()


def worked_answers(scenario_id: str) -> dict[str, WorkedAnswer]:
    """{level: WorkedAnswer} for one scenario, mid first."""
    if scenario_id not in WORKED_ANSWERS:
        raise NoWorkedAnswers(f"no worked answers for a scenario {scenario_id!r}",
                              hint="one of: " + ", ".join(WORKED_ANSWERS))
    return {level: WORKED_ANSWERS[scenario_id][level] for level in LEVELS}


def words_written(text: str) -> int:
    """Words in what the learner wrote (runs of letters and digits)."""
    return len(re.findall(r"\w+", text or ""))


def show_answer(scenario_id: str, level: str, mine: str = "") -> str:
    """One worked answer in text, once ``mine`` (your own answer) has WORDS_FIRST words."""
    if level not in LEVELS:
        raise LabError(f"{level!r} is not a level", hint=f"one of {list(LEVELS)}")
    if words_written(mine) < WORDS_FIRST:
        raise LabError("write your own answer first", hint=f"show_answer(id, level, mine='...') with at least "
                                                           f"{WORDS_FIRST} words of yours")
    answer = worked_answers(scenario_id)[level]
    text = f"The {level} answer ({scenario_id}):\n{answer.text()}"
    print(text)
    return text


def answers_html(scenario_id: str) -> str:
    """The book's copy: a box for the learner's answer and a shut ``<details>`` per level
    (book.js opens none until the box holds WORDS_FIRST words)."""
    answers = worked_answers(scenario_id)
    parts = [f'<div class="worked-answers" data-words="{WORDS_FIRST}"><p><i>Write your answer first (at least '
             f'{WORDS_FIRST} words), then open the worked answers: mid, senior, staff.</i></p>'
             '<textarea class="worked-mine" rows="4" placeholder="your answer"></textarea>']
    for level, answer in answers.items():
        steps = "".join(f"<li>{html.escape(line)}</li>" for line in answer.says)
        parts.append(f'<details class="worked-answer"><summary>The {level} answer</summary><ol>{steps}</ol></details>')
    return "".join(parts) + "</div>"


def reveal_answers(scenario_id: str, widgets: bool | None = None):
    """A box for your answer, then one button: the mid answer, the senior, the staff;
    without widgets, how to do the same in text."""
    worked_answers(scenario_id)
    if widgets is None:
        widgets = widgets_available()
    if not widgets:
        print(f"Write your answer, then show_answer({scenario_id!r}, 'mid', mine=your_answer); "
              "then 'senior' and 'staff'.")
        return None
    return AnswerLadder(scenario_id)


class AnswerLadder:
    """Your answer in a box; the button stays off until it holds WORDS_FIRST words, then each
    click shows the next level's worked answer."""

    def __init__(self, scenario_id: str):
        import ipywidgets as widgets

        self.scenario_id = scenario_id
        self.answers = worked_answers(scenario_id)
        self.shown = 0
        self.mine = widgets.Textarea(placeholder="Your answer: what you say, in order, with the numbers",
                                     layout=widgets.Layout(width="100%", height="90px"))
        self.button = widgets.Button(description=f"Write {WORDS_FIRST} words first", disabled=True,
                                     icon="lightbulb-o", layout=widgets.Layout(width="auto"))
        self.output = widgets.HTML()
        self.mine.observe(lambda _: self.refresh(), names="value")
        self.button.on_click(lambda _: self.climb())
        self.box = widgets.VBox([widgets.HTML("<i>Worked answers stay hidden until you have written yours.</i>"),
                                 self.mine, self.button, self.output])

    def refresh(self) -> None:
        if self.shown >= len(LEVELS):
            return
        ready = words_written(self.mine.value) >= WORDS_FIRST
        self.button.disabled = not ready
        self.button.description = f"Show the {list(LEVELS)[self.shown]} answer" if ready else \
            f"Write {WORDS_FIRST} words first"

    def climb(self) -> None:
        if words_written(self.mine.value) < WORDS_FIRST or self.shown >= len(LEVELS):
            return
        level = list(LEVELS)[self.shown]
        steps = "".join(f"<li>{html.escape(line)}</li>" for line in self.answers[level].says)
        self.output.value += f"<p><b>The {level} answer</b></p><ol>{steps}</ol>"
        self.shown += 1
        if self.shown == len(LEVELS):
            self.button.disabled = True
            self.button.description = "All three shown"
        else:
            self.refresh()

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        bundle["text/html"] = answers_html(self.scenario_id)    # the book shows this; JupyterLab the widget
        return bundle


TRANSCRIPTS_DATA = Path(__file__).with_name("transcripts.json")


def transcripts(path: Path = TRANSCRIPTS_DATA) -> list[dict]:
    """The calibration transcripts: a mock interview of one scenario at senior level and one
    at staff (question, answer, the interviewer's mark per rubric item and why, the total), so
    an instructor and a learner can check their grading against a known one."""
    return json.loads(path.read_text(encoding="utf-8"))
