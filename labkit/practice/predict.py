"""Predict, then run: record the learner's guess before an experiment, compare it after.

    p = predict("How many waiters wake on one release?", choices=[1, 5, 10], default=10)
    ...run the experiment...
    p.reveal(wakeups)           # "You predicted 10; the servers said 1: not this time."

How sure the learner is goes with the guess: 50, 70 or 90 % in the widget, ``confidence=`` in
code. It is journalled with the answer, so that ``labkit.practice.reliability`` can set each
level against how often it was right (a reliability table and a Brier score): being 90 % sure
and right half the time is the overconfidence that interviews and incidents punish.

With a widget front-end the learner picks an answer (or types a number) and presses
"Lock in"; without one (plain Python, a script) pass ``guess=``. In every case nothing
waits for input: under "Run All" or nbval the cell runs through, so a notebook never
blocks on a prediction. A prediction revealed without a locked-in guess is **skipped**:
it is journalled as such and counts neither right nor wrong (``default`` only preselects
the widget's answer). Every reveal goes to the practice journal
(``labkit.practice.journal``) with the question's lesson and the misconception its wrong
answers stand for (``labkit.practice.prediction_notes``); ``labkit.practice.calibration``
reads them back.

What can fail: ``ValueError`` for a default or guess that is not among the choices, a
numeric prediction without a number, or a confidence outside [0, 1]; ``reveal`` twice raises
``LabError``.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

from IPython.display import display

from labkit.errors import LabError
from labkit.practice.deck import widgets_available
from labkit.practice.journal import Journal
from labkit.practice.prediction_notes import note
from labkit.vocabulary import ACCEPTED_COLOUR, GUIDE_COLOUR, MISSED_COLOUR


def _same(guess: Any, actual: Any) -> bool:
    return guess == actual or str(guess) == str(actual)


@dataclass
class Prediction:
    """One question. ``choices`` for a pick-one guess, or None for a number judged
    right when within ``within`` (relative) of the result."""

    question: str
    choices: tuple | None
    guess: Any
    within: float = 0.25
    locked: bool = False            # the learner chose it (widget "Lock in" or guess=), not the default
    actual: Any = None
    correct: bool | None = None     # None until revealed, and for ever when skipped
    revealed: bool = False
    lesson: str | None = None
    misconception: str | None = None
    confidence: float | None = None   # how sure the learner said they were (0-1), None when not said
    journal: Journal | None = field(default=None, repr=False)
    panel: PredictionPanel | None = field(default=None, repr=False)  # the widget, defined below

    @property
    def skipped(self) -> bool:
        """Revealed with no guess locked in: neither right nor wrong."""
        return self.revealed and not self.locked

    def lock(self, guess: Any, confidence: float | None = None) -> None:
        """Record the learner's guess, and how sure they are (what the "Lock in" button does)."""
        if self.revealed:
            raise LabError("the result is out already", hint="a guess counts only before reveal()")
        self.guess = _checked(guess, self.choices)
        self.confidence = _checked_confidence(confidence)
        self.locked = True

    def reveal(self, actual: Any) -> "Prediction":
        """Compare the locked-in guess with what the experiment gave; show it; journal it
        (a prediction with no guess locked in is journalled as skipped)."""
        if self.revealed:
            raise LabError(f"this prediction was revealed already (the result was {self.actual!r})")
        self.actual, self.revealed = actual, True
        if self.locked and self.choices is None:
            self.correct = abs(float(self.guess) - float(actual)) <= self.within * max(abs(float(actual)), 1e-9)
        elif self.locked:
            self.correct = _same(self.guess, actual)
        REVEALED.append(self)
        if self.journal is not None:
            self.journal.add("prediction", question=self.question, lesson=self.lesson,
                             misconception=self.misconception, skipped=self.skipped,
                             guess=self.guess if self.locked else None, actual=actual, correct=self.correct,
                             confidence=self.confidence if self.locked else None)
        if self.panel is not None:
            self.panel.show_result(self)
        else:
            print(self.verdict())
        return self

    def verdict(self) -> str:
        if not self.revealed:
            return f"Predict: {self.question} (your guess so far: {self.guess!r})"
        if self.skipped:
            return (f"Skipped (no guess locked in, so it counts neither right nor wrong); "
                    f"the run gave {self.actual!r}.")
        outcome = "right" if self.correct else "not this time: look at why below"
        sure = f" ({self.confidence * 100:.0f} % sure)" if self.confidence is not None else ""
        return f"You predicted {self.guess!r}{sure}; the run gave {self.actual!r}: {outcome}."

    def __repr__(self) -> str:
        return self.verdict()


# the levels the widget offers: how sure the learner is that the guess is right
CONFIDENCES = (0.5, 0.7, 0.9)

# every prediction revealed in this kernel, oldest first (a lesson's summary cell checks them)
REVEALED: list[Prediction] = []


def _checked(guess: Any, choices: tuple | None) -> Any:
    if choices is None:
        try:
            return float(guess)
        except (TypeError, ValueError):
            raise ValueError(f"this prediction is a number, not {guess!r}") from None
    for choice in choices:
        if _same(guess, choice):
            return choice
    raise ValueError(f"{guess!r} is not one of the choices {list(choices)}")


def _checked_confidence(confidence: float | None) -> float | None:
    if confidence is None:
        return None
    try:
        value = float(confidence)
    except (TypeError, ValueError):
        raise ValueError(f"confidence={confidence!r}: how sure you are, a fraction such as 0.7 (70 %)") from None
    if not 0 <= value <= 1:
        raise ValueError(f"confidence={confidence!r}: a fraction from 0 to 1 (0.9 means 90 % sure), not a percentage")
    return value


def predict(question: str, choices: Sequence[Any] | None = None, default: Any = None, guess: Any = None,
            within: float = 0.25, widgets: bool | None = None, journal: Journal | None = None,
            lesson: str | None = None, misconception: str | None = None,
            confidence: float | None = None) -> Prediction:
    """Ask ``question`` before the experiment; never waits. ``default`` preselects the
    widget's answer (the first choice, or 0, unless given); ``guess=`` locks a guess in
    without a widget, with ``confidence=`` (0-1) saying how sure. ``lesson`` and
    ``misconception`` default to the question's entry in ``predictions.json``."""
    options = None if choices is None else tuple(choices)
    start = default if default is not None else (options[0] if options else 0.0)
    about = note(question)
    prediction = Prediction(question, options, _checked(start, options), within,
                            lesson=lesson or about.lesson, misconception=misconception or about.misconception,
                            journal=journal if journal is not None else Journal())
    if guess is not None:
        prediction.lock(guess, confidence)
    elif confidence is not None:
        raise ValueError("confidence= goes with a guess=: how sure you are of that guess")
    if widgets is None:
        widgets = widgets_available()
    if widgets:
        prediction.panel = PredictionPanel(prediction)
        display(prediction.panel)
    else:
        shown = " / ".join(map(str, options)) if options else "a number"
        print(f"Predict: {question} [{shown}]"
              + (f" — your guess: {prediction.guess!r}" if prediction.locked
                 else " — pass guess=... to record yours; without one it counts as skipped"))
    return prediction


class PredictionPanel:
    """The question, the choices (or a number box), "Lock in", and the result after reveal."""

    def __init__(self, prediction: Prediction):
        import ipywidgets as widgets

        self.prediction = prediction
        self.question = widgets.HTML(f"<b>Predict:</b> {html.escape(prediction.question)}")
        if prediction.choices is None:
            self.input = widgets.FloatText(value=float(prediction.guess), description="your guess")
        else:
            labels = [str(choice) for choice in prediction.choices]
            self.input = widgets.RadioButtons(options=labels, value=str(prediction.guess))
        # no level chosen for the learner: a confidence counts only when they pick one
        self.sure = widgets.ToggleButtons(options=[(f"{level * 100:.0f} %", level) for level in CONFIDENCES],
                                          value=None, description="how sure",
                                          tooltips=["a coin toss", "fairly sure", "very sure"])
        self.lock_button = widgets.Button(description="Lock in", button_style="primary", icon="lock")
        self.result = widgets.HTML("Lock in your guess, then run the next cell (without one, it counts as "
                                   "skipped)." if not prediction.locked
                                   else f"Locked in: {html.escape(str(prediction.guess))}")
        self.lock_button.on_click(lambda _: self.lock())
        self.box = widgets.VBox([self.question, self.input, self.sure, self.lock_button, self.result])

    def lock(self) -> None:
        if self.prediction.revealed:
            return
        self.prediction.lock(self.input.value, self.sure.value)
        self.input.disabled = self.sure.disabled = self.lock_button.disabled = True
        sure = "" if self.prediction.confidence is None else f", {self.prediction.confidence * 100:.0f} % sure"
        self.result.value = f"Locked in: {html.escape(str(self.prediction.guess))}{sure}"

    def show_result(self, prediction: Prediction) -> None:
        self.input.disabled = self.sure.disabled = self.lock_button.disabled = True
        colour = ACCEPTED_COLOUR if prediction.correct else (GUIDE_COLOUR if prediction.skipped else MISSED_COLOUR)
        self.result.value = f'<span style="color:{colour}">{html.escape(prediction.verdict())}</span>'

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)
