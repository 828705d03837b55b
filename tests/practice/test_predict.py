"""Predictions: recorded before the run, compared after; never waiting for input; a
prediction with no guess locked in is journalled as skipped, never right or wrong; every
notebook question names its lesson and misconception."""
import ast
import builtins
import json
from pathlib import Path

import pytest

from labkit.errors import LabError
from labkit.practice.journal import Journal
from labkit.practice.predict import predict
from labkit.practice.prediction_notes import MISCONCEPTIONS, NOTES, note

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


@pytest.fixture
def journal(tmp_path):
    return Journal(tmp_path / "scores.json")


@pytest.fixture(autouse=True)
def no_input(monkeypatch):
    def refuse(*args):
        raise AssertionError("a prediction must never wait for input")
    monkeypatch.setattr(builtins, "input", refuse)


def test_without_widgets_and_without_a_guess_the_prediction_is_skipped(journal, capsys):
    p = predict("How many waiters wake on one release?", choices=[1, 5, 10], default=10, widgets=False,
                journal=journal)
    assert "Predict: How many waiters" in capsys.readouterr().out
    p.reveal(1)
    assert p.skipped and p.correct is None and not p.locked
    assert "Skipped" in capsys.readouterr().out
    [entry] = journal.entries("prediction")
    assert entry["skipped"] is True and entry["correct"] is None and entry["guess"] is None


def test_a_guess_given_in_code_is_locked_in_and_journalled(journal):
    p = predict("Wakeups per release with a parent watch?", choices=["1", "all"], guess="all", widgets=False,
                journal=journal)
    p.reveal("all")
    assert p.correct and p.locked
    [entry] = journal.entries("prediction")
    assert entry["guess"] == "all" and entry["correct"] is True and entry["skipped"] is False
    with pytest.raises(LabError, match="revealed already"):
        p.reveal("1")


def test_a_number_is_right_within_a_relative_tolerance(journal):
    close = predict("Seconds until the next waiter acquires?", guess=4.5, within=0.2, widgets=False, journal=journal)
    far = predict("Seconds until the next waiter acquires?", guess=1, within=0.2, widgets=False, journal=journal)
    assert close.reveal(5.0).correct and not far.reveal(5.0).correct
    with pytest.raises(ValueError, match="a number"):
        predict("Seconds?", guess="soon", widgets=False, journal=journal)


def test_a_guess_outside_the_choices_is_refused(journal):
    with pytest.raises(ValueError, match="not one of the choices"):
        predict("?", choices=[1, 2], guess=3, widgets=False, journal=journal)


def test_the_widget_locks_in_and_shows_the_result(journal):
    p = predict("How many waiters wake?", choices=[1, 10], widgets=True, journal=journal)
    p.panel.input.value = "10"
    p.panel.lock_button.click()
    assert p.locked and p.guess == 10 and p.panel.input.disabled
    p.reveal(1)
    assert "You predicted 10; the run gave 1" in p.panel.result.value and not p.skipped
    assert json.loads(journal.path.read_text())[0]["guess"] == 10


def test_the_widget_never_locked_is_skipped_whatever_it_shows(journal):
    p = predict("How many waiters wake?", choices=[1, 10], default=1, widgets=True, journal=journal)
    p.reveal(1)                        # as under "Run All" or nbval: nobody clicked
    assert p.skipped and p.correct is None and "Skipped" in p.panel.result.value
    assert journal.entries()[0]["skipped"] is True


def test_a_notebook_question_carries_its_lesson_and_misconception(journal):
    p = predict("20 waiters watch the parent. How many wake on the first release?", choices=[1, 2, 10, 20],
                guess=20, widgets=False, journal=journal)
    p.reveal(20)
    [entry] = journal.entries("prediction")
    assert (entry["lesson"], entry["misconception"]) == ("02", "watch-fan-out")


def _notebook_questions():
    questions = []
    for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "\n".join(line for line in "".join(cell["source"]).splitlines()
                               if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Call) and "predict" in (getattr(node.func, "id", None),   # predict(...)
                                                                getattr(node.func, "attr", None)):  # lesson.predict(...)
                    assert isinstance(node.args[0], ast.Constant), f"{notebook.name}: a predict() question must be a literal"
                    questions.append((notebook.name[:2], node.args[0].value))
    return questions


def test_every_notebook_prediction_names_its_lesson_and_a_misconception():
    questions = _notebook_questions()
    assert len(questions) >= 70
    missing = [(lesson, question) for lesson, question in questions if note(question).lesson != lesson]
    assert not missing, f"add these to labkit/practice/predictions.json (lesson and misconception): {missing}"
    asked = {question for _, question in questions}
    stale = [question for question in NOTES if question not in asked]
    assert not stale, f"predictions.json names questions no notebook asks any more: {stale}"
    assert all(item.misconception in MISCONCEPTIONS for item in NOTES.values())


def test_a_corrupt_journal_is_set_aside(journal):
    journal.path.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        assert journal.entries() == []
    journal.add("prediction", guess=1)
    assert len(journal.entries()) == 1
