"""Calibration: a journal of known answers gives the right counts per lesson and for the
course; a skipped prediction counts neither right nor wrong; a later "Run All" does not
undo an answer; the misconceptions behind two or more wrong answers are named."""
import multiprocessing

import pytest

from labkit.cli import main as labkit
from labkit.practice.calibration import calibration, course_calibration, your_predictions
from labkit.practice.journal import Journal
from labkit.practice.predict import predict
from labkit.practice.prediction_notes import MISCONCEPTIONS

pytestmark = pytest.mark.no_servers

# (question, choices, guess or None for skipped, what the run gave); lessons and misconceptions
# come from predictions.json
FIRST_RUN = [
    ("20 waiters watch the parent. How many wake on the first release?", [1, 2, 10, 20], 1, 20),          # 02 wrong
    ("When Alice deletes her node, whose watch fires?", ["Bob's", "Carol's", "both"], "both", "Bob's"),  # 02 wrong
    ("Which client holds the lock after the three creates?", ["Alice", "Bob", "Carol", "nobody yet"],
     "Alice", "Alice"),                                                                                  # 02 right
    ("The holder is killed. When does the waiter get the lock?",
     ["at once", "about one session timeout later", "never"], None, "about one session timeout later"),  # 02 skipped
    ("With predecessor watches, which node does each waiter watch?",
     ["its predecessor", "the holder's node", "the lock's parent"], "the holder's node", "its predecessor"),  # 06 wrong
    ("Does the unfenced store accept client-1's late write, made after its session expired?",
     ["yes", "no"], "yes", "yes"),                                                                       # 04 right
    ("The holder's link is cut. Which comes first?", ["the holder gives up", "the server frees the lock"],
     "the server frees the lock", "the holder gives up"),                                                # 04 wrong
]
# a second "Run All" where nobody answers: every question skipped; then one answer changes
SECOND_RUN = [(question, choices, None, actual) for question, choices, _, actual in FIRST_RUN]
THIRD_RUN = [("The holder is killed. When does the waiter get the lock?",
              ["at once", "about one session timeout later", "never"], "about one session timeout later",
              "about one session timeout later")]                                                        # 02 right now


def play(journal, runs):
    for run in runs:
        for question, choices, guess, actual in run:
            predict(question, choices=choices, guess=guess, widgets=False, journal=journal).reveal(actual)


@pytest.fixture
def journal(tmp_path):
    return Journal(tmp_path / "scores.json")


def test_known_answers_give_the_right_numbers_per_lesson_and_for_the_course(journal, capsys):
    play(journal, [FIRST_RUN])
    lesson = calibration("02", journal)
    assert (lesson.asked, lesson.made, lesson.right, lesson.wrong, lesson.skipped) == (4, 3, 1, 2, 1)
    assert dict(lesson.wrong_by_misconception) == {"watch-fan-out": 2}
    course = calibration(None, journal)
    assert (course.asked, course.made, course.right, course.skipped) == (7, 6, 2, 1)
    assert course.recurring() == [("watch-fan-out", 3)]
    assert dict(course.wrong_by_misconception) == {"watch-fan-out": 3, "holder-knowledge": 1}
    four = calibration("04", journal)
    assert (four.asked, four.made, four.right, four.skipped) == (2, 2, 1, 0)


def test_a_later_run_all_skips_nothing_already_answered_and_a_new_answer_counts(journal):
    play(journal, [FIRST_RUN, SECOND_RUN])
    lesson = calibration("02", journal)
    assert (lesson.asked, lesson.made, lesson.right, lesson.skipped) == (4, 3, 1, 1)
    play(journal, [THIRD_RUN])
    lesson = calibration("02", journal)
    assert (lesson.asked, lesson.made, lesson.right, lesson.skipped) == (4, 4, 2, 0)


def test_only_skips_give_no_right_and_no_wrong(journal):
    play(journal, [SECOND_RUN])
    course = calibration(None, journal)
    assert (course.asked, course.made, course.right, course.wrong, course.skipped) == (7, 0, 0, 0, 7)
    assert not course.wrong_by_misconception


def test_the_lesson_cell_prints_the_counts_and_finds_every_prediction_of_this_kernel(journal, capsys):
    play(journal, [FIRST_RUN])
    result = your_predictions("02", journal)
    out = capsys.readouterr().out
    assert "lesson 02: 4 asked, 3 made, 1 right (33 % of those made), 2 wrong, 1 skipped" in out
    assert f"2 x watch-fan-out: {MISCONCEPTIONS['watch-fan-out']}" in out
    assert result.missing == []
    other = your_predictions("02", Journal(journal.path.with_name("other.json")))
    assert len(other.missing) == 4, "a journal that lost this kernel's predictions must show as missing"


def test_the_course_summary_names_the_recurring_misconception_and_its_lessons(journal, capsys):
    play(journal, [FIRST_RUN])
    found = course_calibration(journal)
    out = capsys.readouterr().out
    assert found[None].made == 6 and found["02"].asked == 4 and found["09"].asked == 0
    assert "3 x watch-fan-out (lessons 02, 06)" in out and "holder-knowledge" not in out.split("Misconceptions")[1]


def _add_many(path, worker):
    journal = Journal(path)
    for number in range(15):
        journal.add("prediction", question=f"w{worker}-{number}", skipped=True)


def test_kernels_writing_one_journal_at_once_lose_no_entry(tmp_path):
    path = tmp_path / "shared.json"
    workers = [multiprocessing.Process(target=_add_many, args=(path, worker)) for worker in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert len(Journal(path).entries()) == 60


def test_the_labkit_command_reads_the_journal_back(journal, capsys):
    play(journal, [FIRST_RUN])
    assert labkit(["predictions", "--journal", str(journal.path)]) == 0
    assert "3 x watch-fan-out (lessons 02, 06)" in capsys.readouterr().out
    assert labkit(["predictions", "--journal", str(journal.path), "--lesson", "04"]) == 0
    assert "lesson 04: 2 asked, 2 made, 1 right" in capsys.readouterr().out
    assert labkit(["predictions", "--journal", str(journal.path.with_name("none.json"))]) == 2
    assert "no journal" in capsys.readouterr().err


# FIRST_RUN's answers with how sure the learner said they were (None: no confidence said)
CONFIDENCES = [0.9, 0.9, 0.9, None, 0.5, 0.7, None]


def play_sure(journal):
    for (question, choices, guess, actual), sure in zip(FIRST_RUN, CONFIDENCES):
        confidence = sure if guess is not None else None
        predict(question, choices=choices, guess=guess, confidence=confidence, widgets=False,
                journal=journal).reveal(actual)


def test_confidences_give_the_known_brier_score_and_reliability_table(journal, capsys):
    play_sure(journal)
    course = calibration(None, journal)
    # rated: 0.9 wrong, 0.9 wrong, 0.9 right (lesson 02), 0.5 wrong (06), 0.7 right (04); the
    # 04 wrong one said no confidence. Brier = (0.81 + 0.81 + 0.01 + 0.25 + 0.09) / 5
    assert course.reliability.rated == 5 and course.reliability.without_confidence == 1
    assert course.reliability.brier == pytest.approx(1.97 / 5)
    assert [(level.confidence, level.made, level.right) for level in course.reliability.rows()] == [
        (0.5, 1, 0), (0.7, 1, 1), (0.9, 3, 1)]
    assert [level.confidence for level in course.reliability.overconfident()] == [0.9]
    assert calibration("02", journal).reliability.brier == pytest.approx(1.63 / 3)
    assert calibration("04", journal).reliability.brier == pytest.approx(0.09)
    your_predictions("02", journal)
    said = capsys.readouterr().out
    assert "Brier score 0.543 over 3 rated guesses" in said and "Overconfident at 90 %" in said


def test_the_course_summary_and_the_command_show_the_brier_score_of_every_lesson(journal, capsys):
    play_sure(journal)
    found = course_calibration(journal)
    said = capsys.readouterr().out
    assert "10" in found, "lesson 10's predictions are left out of the course summary"
    lines = {line.split()[0]: line for line in said.splitlines() if line.strip()}
    assert lines["course"].split()[-1] == "0.394" and lines["02"].split()[-1] == "0.543"
    assert lines["10"].split()[-1] == "-", "a lesson with no rated guess shows no score"
    assert labkit(["predictions", "--journal", str(journal.path)]) == 0
    assert "Brier score 0.394 over 5 rated guesses" in capsys.readouterr().out


def test_without_any_confidence_the_summary_says_how_to_give_one(journal, capsys):
    play(journal, [FIRST_RUN])
    assert calibration(None, journal).reliability.brier is None
    your_predictions("02", journal)
    assert "pick 50, 70 or 90 %" in capsys.readouterr().out


def test_a_confidence_is_a_fraction_and_goes_with_a_guess(journal):
    with pytest.raises(ValueError, match="not a percentage"):
        predict("?", choices=[1, 2], guess=1, confidence=90, widgets=False, journal=journal)
    with pytest.raises(ValueError, match="goes with a guess"):
        predict("?", choices=[1, 2], confidence=0.9, widgets=False, journal=journal)


def test_the_widget_journals_the_confidence_picked(journal):
    p = predict("How many waiters wake?", choices=[1, 10], widgets=True, journal=journal)
    assert p.panel.sure.value is None, "the widget must not choose a confidence for the learner"
    p.panel.input.value, p.panel.sure.value = "10", 0.9
    p.panel.lock_button.click()
    p.reveal(1)
    assert journal.entries()[0]["confidence"] == 0.9 and "(90 % sure)" in p.panel.result.value
