"""Worked answers (issue #37): every scenario has a mid, a senior and a staff answer; every
number an answer uses is written in its text and equals what its source gives now (a labkit
constant, a lesson's function, the committed expiry-storm run, or the prompt's arithmetic),
so an answer cannot drift from the course; and the answers stay hidden until the learner
has written one of their own, in the widget, in text and in the book's static copy."""
import re

import pytest

from labkit.errors import LabError
from labkit.practice.journal import Journal
from labkit.practice.rubric import LEVELS
from labkit.practice.scenarios import SCENARIOS, ScenarioInterview, scenario, show_scenario
from labkit.practice.worked_answers import (WORDS_FIRST, WORKED_ANSWERS, AnswerLadder, NoWorkedAnswers, WorkedNumber,
                                            reveal_answers,
                                            show_answer, answers_html, worked_answers)

pytestmark = pytest.mark.no_servers

MINE = "I would fence every write with the lock's create revision and have the store refuse a lower one " \
       "in the same transaction as the write, and I would alert when no run finished by five."
NUMBERS = [(sid, level, number) for sid, levels in WORKED_ANSWERS.items() for level, answer in levels.items()
           for number in answer.numbers]


def test_every_scenario_has_three_worked_answers_that_grow_with_the_level():
    assert set(WORKED_ANSWERS) == {s.id for s in SCENARIOS}
    for item in SCENARIOS:
        answers = worked_answers(item.id)
        assert list(answers) == list(LEVELS), item.id
        assert all(len(answer.says) >= 3 and all(len(line) >= 15 for line in answer.says) for answer in answers.values())
        assert len(answers["mid"].says) <= len(answers["senior"].says) <= len(answers["staff"].says), item.id
        assert len({answer.text() for answer in answers.values()}) == 3, item.id


def test_most_answers_work_numbers_out_and_some_read_the_course():
    with_numbers = {sid for sid, _, _ in NUMBERS}
    assert with_numbers == set(WORKED_ANSWERS), set(WORKED_ANSWERS) - with_numbers
    from_course = [number for _, _, number in NUMBERS if number.origin == "from"]
    assert len(from_course) >= 15 and all("labkit." in number.source for number in from_course)


@pytest.mark.parametrize("sid,level,number", NUMBERS, ids=[f"{s}-{lv}-{n.text}" for s, lv, n in NUMBERS])
def test_each_number_is_in_its_answer_and_matches_its_source(sid, level, number):
    answer = WORKED_ANSWERS[sid][level]
    assert number.text in " ".join(answer.says), f"{sid} {level}: {number.text!r} is not written in the answer"
    assert re.search(r"\d", number.text), number.text
    got = number.resolve()
    assert abs(got - number.value) <= number.tolerance(), \
        f"{sid} {level}: the answer says {number.text} ({number.value}), {number.source} gives {got}"


NUMBER_WRITTEN = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def numbers_in(text: str) -> set[str]:
    return {token.rstrip(",") for token in NUMBER_WRITTEN.findall(text)}


@pytest.mark.parametrize("sid", sorted(WORKED_ANSWERS))
def test_every_number_written_in_an_answer_is_accounted_for(sid):
    """From the scenario's own text (prompt, follow-ups, rubric), a checked number, or a given
    with why; "notebook 04", "lesson 07" and "phase 2" are names, not numbers."""
    item = scenario(sid)
    context = " ".join([item.prompt, *(f.prompt for f in item.follow_ups),
                        *(" ".join([p.point, *p.levels.values()]) for p in item.rubric)])
    for level, answer in WORKED_ANSWERS[sid].items():
        known = numbers_in(context) | numbers_in(" ".join(n.text for n in answer.numbers)) | \
            numbers_in(" ".join(text for text, _ in answer.givens))
        assert all(len(why) > 10 and text in " ".join(answer.says) for text, why in answer.givens), (sid, level)
        for line in answer.says:
            for found in NUMBER_WRITTEN.finditer(line):
                token = found.group().rstrip(",")
                if re.search(r"(notebook|lesson|phase) $", line[max(0, found.start() - 9):found.start()]):
                    continue
                assert token in known, f"{sid} {level}: {token!r} in {line!r} has no source"


def test_a_number_can_drift_and_the_check_sees_it():
    true = WorkedNumber("1.1 s", 1.1, "labkit.servers.services.zookeeper.SERVER_LAG", "from")
    drifted = WorkedNumber("1.5 s", 1.5, "labkit.servers.services.zookeeper.SERVER_LAG", "from")
    assert abs(true.resolve() - true.value) <= true.tolerance()
    assert abs(drifted.resolve() - drifted.value) > drifted.tolerance()
    with pytest.raises(LabError, match="plain arithmetic"):
        WorkedNumber("2", 2, "__import__('os').getpid()", "arithmetic").resolve()
    with pytest.raises(LabError, match="does not read labkit"):
        WorkedNumber("2", 2, "len('ab')", "from").resolve()


def test_text_answers_need_your_own_answer_and_the_end_of_the_interview(tmp_path, capsys):
    with pytest.raises(LabError, match="write your own answer first"):
        show_answer("daily-job-once", "staff", mine="a lock")
    with pytest.raises(LabError, match="not a level"):
        show_answer("daily-job-once", "principal", mine=MINE)
    with pytest.raises(NoWorkedAnswers):
        worked_answers("nope")
    text = show_answer("daily-job-once", "staff", mine=MINE)
    assert worked_answers("daily-job-once")["staff"].says[0] in text
    interview = ScenarioInterview(scenario("daily-job-once"), journal=Journal(tmp_path / "j.json"))
    interview.start()
    with pytest.raises(LabError, match="at the end"):
        interview.worked_answer("mid", MINE)
    interview.finish()
    assert worked_answers("daily-job-once")["mid"].says[0] in interview.worked_answer("mid", MINE)
    reveal_answers("daily-job-once", widgets=False)
    assert "show_answer('daily-job-once', 'mid'" in capsys.readouterr().out


def test_the_ladder_stays_off_until_the_learner_wrote_then_climbs_mid_senior_staff():
    ladder = reveal_answers("kubernetes-lease-writer", widgets=True)
    answers = worked_answers("kubernetes-lease-writer")
    assert isinstance(ladder, AnswerLadder) and ladder.button.disabled and ladder.output.value == ""
    ladder.climb()                                         # a click that sneaks through shows nothing
    assert ladder.output.value == ""
    ladder.mine.value = " ".join(["word"] * (WORDS_FIRST - 1))
    assert ladder.button.disabled
    ladder.mine.value = MINE
    assert not ladder.button.disabled and "mid" in ladder.button.description
    for level in LEVELS:
        ladder.button.click()
        assert answers[level].says[0][:40] in ladder.output.value
    assert ladder.button.disabled and ladder.output.value.index("The mid answer") < ladder.output.value.index("The staff")


def test_the_panel_shows_the_ladder_after_end_and_the_book_copy_keeps_answers_shut(tmp_path):
    panel = show_scenario("expiry-storm-incident", widgets=True, journal=Journal(tmp_path / "j.json"))
    staff = worked_answers("expiry-storm-incident")["staff"].says[0]
    assert panel.ladder is None
    panel.start_button.click()
    panel.end_button.click()
    assert panel.ladder is not None and panel.ladder.box in panel.rubric_box.children and panel.ladder.button.disabled
    bundle = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle           # JupyterLab draws the widget
    page = bundle["text/html"]                                             # the book draws this
    assert scenario("expiry-storm-incident").prompt[:50] in page
    assert page.count('<details class="worked-answer">') == 3 and "<details open" not in page
    assert f'data-words="{WORDS_FIRST}"' in page and 'textarea class="worked-mine"' in page
    assert page.index("<summary>The mid answer") < page.index(staff[:30].replace("'", "&#x27;"))
    assert answers_html("expiry-storm-incident") in page
    panel.close()


def test_the_calibration_transcripts_score_what_they_say():
    from labkit.practice.rubric import grade
    from labkit.practice.worked_answers import transcripts

    found = transcripts()
    assert sorted(t["level"] for t in found) == ["senior", "staff"]
    for record in found:
        item = scenario(record["scenario"])
        assert [mark["item"] for mark in record["marks"]] == list(range(len(item.rubric))), record["scenario"]
        assert all(len(mark["why"]) > 30 for mark in record["marks"])
        minutes = [exchange["minute"] for exchange in record["exchanges"]]
        assert minutes[0] == 0 and minutes[1:] == [f.minute for f in item.follow_ups][:len(minutes) - 1]
        graded = grade(item.rubric, item.red_flags, {m["item"]: m["level"] for m in record["marks"] if m["level"]},
                       [flag["flag"] for flag in record["red_flags"]])
        assert graded["points"] == record["points"], f"{record['scenario']}: the marks give {graded['points']}"
        levels = [mark["level"] for mark in record["marks"]]
        assert max(set(levels), key=levels.count) == record["level"], "most marks are at the transcript's level"


def test_the_books_theme_draws_the_panels_static_copy_not_the_widget_placeholder(tmp_path):
    from labkit.book.theme import WIDGET_VIEW, Page, output

    panel = show_scenario("multi-tenant-lock-service", widgets=True, journal=Journal(tmp_path / "j.json"))
    bundle = panel._repr_mimebundle_()
    node = {"type": "output", "jupyter_data": {"output_type": "display_data", "data": {
        mime: {"content": value if isinstance(value, str) else str(value)} for mime, value in bundle.items()}}}
    assert WIDGET_VIEW in node["jupyter_data"]["data"]
    drawn = output(node, Page(tmp_path, "11_interview_practice"))
    assert "worked-answers" in drawn and "needs a running kernel" not in drawn
    panel.close()
