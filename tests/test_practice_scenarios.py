"""Scenario interviews: three of ~45 minutes, follow-ups on a clock, the rubric only at the
end, scores kept in the journal; the widget and the text fallback never block."""
import pytest

from labkit.errors import LabError
from labkit.practice.journal import Journal
from labkit.practice.scenarios import (SCENARIOS, ScenarioInterview, ScenarioPanel, UnknownScenario, scenario,
                                       show_scenario)

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def journal(tmp_path):
    return Journal(tmp_path / "scores.json")


def test_three_scenarios_of_about_45_minutes_with_follow_ups_and_a_rubric():
    assert {s.id for s in SCENARIOS} == {"daily-job-once", "redis-checkout-post-mortem", "partitioned-leader-epochs"}
    for item in SCENARIOS:
        assert 40 <= item.minutes <= 50 and len(item.follow_ups) >= 4 and len(item.rubric) >= 6
        minutes = [f.minute for f in item.follow_ups]
        assert minutes == sorted(minutes) and minutes[-1] < item.minutes
        assert item.max_points == 20
    with pytest.raises(UnknownScenario):
        scenario("nope")


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
    assert "Rubric (20 points)" in interview.finish()
    assert interview.time_left_minutes() == 0


def test_scores_are_kept_in_the_journal_across_attempts(journal):
    item = scenario("redis-checkout-post-mortem")
    for met in ([0, 1], [0, 1, 5]):
        interview = ScenarioInterview(item, clock=FakeClock(), journal=journal)
        interview.start()
        interview.finish()
        result = interview.score(met)
    assert result["points"] == sum(item.rubric[number].points for number in [0, 1, 5])
    assert [e["points"] for e in interview.history()] == [5, 8]
    assert "8/20" in interview.summary() and "5/20, 8/20" in interview.summary()
    with pytest.raises(LabError, match="numbered"):
        interview.score([99])


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
    assert len(panel.checks) == len(panel.interview.scenario.rubric)
    panel.checks[0].value = panel.checks[2].value = True
    panel.save_button.click()
    assert journal.entries("scenario")[0]["met"] == [0, 2]
    assert "points" in panel.result.value
    panel.close()
