"""Predictions: recorded before the run, compared after; never waiting for input; only the
learner's own guesses reach the journal."""
import builtins
import json

import pytest

from labkit.errors import LabError
from labkit.practice.journal import Journal
from labkit.practice.predict import predict

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


@pytest.fixture
def journal(tmp_path):
    return Journal(tmp_path / "scores.json")


@pytest.fixture(autouse=True)
def no_input(monkeypatch):
    def refuse(*args):
        raise AssertionError("a prediction must never wait for input")
    monkeypatch.setattr(builtins, "input", refuse)


def test_without_widgets_the_default_guess_is_taken_and_not_journalled(journal, capsys):
    p = predict("How many waiters wake on one release?", choices=[1, 5, 10], default=10, widgets=False,
                journal=journal)
    assert "Predict: How many waiters" in capsys.readouterr().out
    p.reveal(1)
    assert p.guess == 10 and not p.correct and not p.locked
    assert "Default guess 10; the run gave 1" in capsys.readouterr().out
    assert journal.entries() == []


def test_a_guess_given_in_code_is_locked_in_and_journalled(journal):
    p = predict("Wakeups per release with a parent watch?", choices=["1", "all"], guess="all", widgets=False,
                journal=journal)
    p.reveal("all")
    assert p.correct and p.locked
    [entry] = journal.entries("prediction")
    assert entry["guess"] == "all" and entry["correct"] is True
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
    assert "You predicted 10; the run gave 1" in p.panel.result.value
    assert json.loads(journal.path.read_text())[0]["guess"] == 10


def test_the_widget_never_locked_takes_what_it_shows_and_journals_nothing(journal):
    p = predict("How many waiters wake?", choices=[1, 10], default=1, widgets=True, journal=journal)
    p.reveal(1)                        # as under nbval: nobody clicked
    assert p.correct and not p.locked and journal.entries() == []


def test_a_corrupt_journal_is_set_aside(journal):
    journal.path.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable"):
        assert journal.entries() == []
    journal.add("prediction", guess=1)
    assert len(journal.entries()) == 1
