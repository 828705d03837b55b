"""Scenario interviews: nine of ~45 minutes, follow-ups on a clock, the rubric only at the
end with levels per key point and red flags that subtract, scores per axis kept in the
journal, a debrief that names what was missed; the widget and the text fallback never block."""
import re

import pytest

from labkit.errors import LabError
from labkit.practice.journal import Journal
from labkit.practice.rubric import AXES, COMMUNICATION, LEVELS
from labkit.practice.scenarios import (SCENARIOS, ScenarioInterview, ScenarioPanel, UnknownScenario, scenario,
                                       show_scenario)

IDS = {"daily-job-once", "redis-checkout-post-mortem", "partitioned-leader-epochs", "lock-service-design",
       "kubernetes-lease-writer", "multi-region-locks", "redis-to-fenced-migration", "expiry-storm-incident",
       "multi-tenant-lock-service"}
# the word "sequence" near "token" or "fenc" (tests/notebooks/test_text_claims.py's rule, for the rubric alone)
SEQUENCE_AS_TOKEN = re.compile(r"\bsequences?\b.{0,80}(token|fenc)|(token|fenc).{0,80}\bsequences?\b",
                               re.IGNORECASE)

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def journal(tmp_path):
    return Journal(tmp_path / "scores.json")


def test_nine_scenarios_of_about_45_minutes_with_follow_ups_and_a_rubric():
    assert {s.id for s in SCENARIOS} == IDS
    for item in SCENARIOS:
        assert 40 <= item.minutes <= 50 and len(item.follow_ups) >= 4 and len(item.rubric) >= 6
        minutes = [f.minute for f in item.follow_ups]
        assert minutes == sorted(minutes) and minutes[-1] < item.minutes
        assert item.max_points == 3 * len(item.rubric)
    with pytest.raises(UnknownScenario):
        scenario("nope")


@pytest.mark.parametrize("item", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_every_rubric_has_levels_red_flags_and_the_communication_axis(item):
    for point in item.rubric:
        assert point.axis in AXES, point.point
        assert set(point.levels) == set(LEVELS) and all(len(text) > 15 for text in point.levels.values()), point.point
        assert len(set(point.levels.values())) == 3, f"the three levels of {point.point!r} must differ"
    assert any(point.axis == COMMUNICATION for point in item.rubric), "no requirements-and-communication item"
    assert len({point.axis for point in item.rubric}) >= 3, "a rubric should score more than one or two axes"
    assert len(item.red_flags) >= 2 and all(flag.points > 0 and flag.why for flag in item.red_flags)


@pytest.mark.parametrize("item", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_no_rubric_asks_for_the_sequence_number_as_the_fencing_token(item):
    for point in item.rubric:
        for text in (point.point, *point.levels.values()):
            assert not SEQUENCE_AS_TOKEN.search(text), f"{item.id}: {text}"


def test_the_staff_loop_questions_are_asked_somewhere():
    """Issue #37: migration, the expiry storm, tenancy, test strategy, lease reads and FLP."""
    asked = " ".join(f.prompt.lower() for item in SCENARIOS for f in item.follow_ups)
    for phrase in ("fault-injection", "passing", "lease read", "truetime", "flp", "quota", "watch", "jitter"):
        assert phrase in asked or phrase in " ".join(p.point.lower() for s in SCENARIOS for p in s.rubric), phrase


def test_the_wrong_tokens_are_red_flags_somewhere():
    flags = " ".join(flag.flag.lower() for item in SCENARIOS for flag in item.red_flags)
    for phrase in ("exactly-once", "redlock", "timestamp or the zookeeper sequence number",
                   "resourceversion or leasetransitions"):
        assert phrase in flags, phrase


def test_follow_ups_come_on_the_clock_and_the_rubric_only_at_the_end(journal):
    clock = FakeClock()
    interview = ScenarioInterview(scenario("daily-job-once"), clock=clock, journal=journal)
    assert "exactly once" in interview.start()
    assert interview.due() == []
    clock.now += 9 * 60
    assert [f.minute for f in interview.due()] == [8]
    interview.next_follow_up()
    assert interview.due() == []
    with pytest.raises(LabError, match="at the end"):
        interview.rubric()
    clock.now += 40 * 60
    assert "Rubric (21 points" in interview.finish() and "Red flags" in interview.finish()
    assert interview.time_left_minutes() == 0


def test_scores_by_level_minus_red_flags_are_kept_in_the_journal_across_attempts(journal):
    item = scenario("redis-checkout-post-mortem")
    for levels, flags in (({0: "mid", 1: "senior"}, []), ({0: "staff", 1: "staff", 4: "senior"}, [1])):
        interview = ScenarioInterview(item, clock=FakeClock(), journal=journal)
        interview.start()
        interview.finish()
        result = interview.score(levels, red_flags=flags)
    assert result["earned"] == 3 + 3 + 2 and result["penalty"] == item.red_flags[1].points
    assert result["points"] == 8 - item.red_flags[1].points
    assert [e["points"] for e in interview.history()] == [3, result["points"]]
    assert f"{result['points']}/21" in interview.summary() and f"3/21, {result['points']}/21" in interview.summary()
    with pytest.raises(LabError, match="numbered"):
        interview.score({99: "mid"})
    with pytest.raises(LabError, match="not a level"):
        interview.score({0: "principal"})
    with pytest.raises(LabError, match="red flags are numbered"):
        interview.score({}, red_flags=[9])


def test_the_debrief_shows_each_axis_names_the_red_flags_and_lists_the_missed_points(journal):
    item = scenario("daily-job-once")
    interview = ScenarioInterview(item, clock=FakeClock(), journal=journal)
    interview.start()
    interview.finish()
    with pytest.raises(LabError, match="nothing scored"):
        interview.debrief()
    levels = ["staff"] * len(item.rubric)
    levels[2] = "mid"                       # the fencing token, named but not passed to the store
    levels[6] = None                        # observability, not covered
    result = interview.score(levels, red_flags=[0])
    text = interview.debrief()
    for axis, score in result["axes"].items():
        assert f"{axis}: {score['points']}/{score['max_points']}" in text
    assert result["axes"][COMMUNICATION] == {"points": 3, "max_points": 3}
    assert item.red_flags[0].flag in text and item.red_flags[0].why in text
    missed = text.split("you missed", 1)[1]
    assert item.rubric[2].point in missed and "yours: mid" in missed and item.rubric[2].levels["staff"] in missed
    assert item.rubric[6].point in missed and "not covered" in missed
    assert item.rubric[0].point not in missed
    assert result["points"] == 3 * 5 + 1 - item.red_flags[0].points


def test_red_flags_never_take_the_score_below_zero(journal):
    item = scenario("multi-region-locks")
    interview = ScenarioInterview(item, clock=FakeClock(), journal=journal)
    interview.finish()
    result = interview.score({}, red_flags=range(len(item.red_flags)))
    assert result["points"] == 0 and result["penalty"] > 0


def test_a_shorter_run_scales_the_follow_ups(journal):
    clock = FakeClock()
    interview = ScenarioInterview(scenario("partitioned-leader-epochs"), clock=clock, journal=journal, minutes=15)
    interview.start()
    clock.now += 3 * 60       # minute 8 of 45 is minute 2.7 of 15
    assert [f.minute for f in interview.due()] == [8]


def test_the_text_fallback_prints_and_returns_an_interview(journal, capsys):
    interview = show_scenario("daily-job-once", widgets=False, journal=journal)
    out = capsys.readouterr().out
    assert "exactly once" in out and "interview.start()" in out and "Rubric" not in out
    assert interview.started_at is None       # nothing runs until the learner starts it


def test_the_panel_runs_start_follow_up_end_and_save(journal):
    panel = show_scenario("partitioned-leader-epochs", widgets=True, journal=journal)
    assert isinstance(panel, ScenarioPanel) and panel.next_button.disabled
    panel.start_button.click()
    panel.next_button.click()
    assert "Follow-up 1" in panel.follow_ups.value
    panel.end_button.click()
    assert len(panel.levels) == len(panel.interview.scenario.rubric)
    assert len(panel.flags) == len(panel.interview.scenario.red_flags)
    panel.levels[0].value = "senior"
    panel.levels[2].value = "staff"
    panel.flags[1].value = True
    panel.save_button.click()
    entry = journal.entries("scenario")[0]
    assert entry["levels"] == {"0": "senior", "2": "staff"}
    assert entry["red_flags"] == [panel.interview.scenario.red_flags[1].flag]
    assert "points" in panel.result.value and "you missed" in panel.result.value
    panel.close()
