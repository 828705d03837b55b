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
