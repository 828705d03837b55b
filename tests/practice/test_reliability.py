"""labkit/practice/reliability.py: the reliability table and the Brier score of a journal's
predictions, on hand-made entries whose numbers are worked out here; skipped predictions
and those made with no confidence stay out of the score; a level right too rarely is named
overconfident only once it has enough answers; the diagram draws one dot per level beside
the diagonal. Pure logic: no server."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.practice.reliability import MIN_TO_JUDGE, plot_reliability, reliability  # noqa: E402

pytestmark = pytest.mark.no_servers


def guess(confidence, correct, skipped=False):
    return {"kind": "prediction", "confidence": confidence, "correct": correct, "skipped": skipped}


def test_the_brier_score_is_the_mean_squared_distance_from_the_outcome():
    result = reliability([guess(0.9, True), guess(0.9, False), guess(0.5, True), guess(0.7, True)])
    # (0.1² + 0.9² + 0.5² + 0.3²) / 4 = (0.01 + 0.81 + 0.25 + 0.09) / 4
    assert result.brier == pytest.approx(0.29)
    assert result.rated == 4 and result.without_confidence == 0
    assert [(level.confidence, level.made, level.right) for level in result.rows()] == [(0.5, 1, 1), (0.7, 1, 1),
                                                                                        (0.9, 2, 1)]
    assert result.levels[0.9].hit_rate == 0.5


def test_skipped_and_unrated_predictions_stay_out_of_the_score():
    result = reliability([guess(0.9, True), guess(0.9, False, skipped=True), guess(None, False), guess(None, True)])
    assert result.rated == 1 and result.brier == pytest.approx(0.01)
    assert result.without_confidence == 2   # made, with no confidence; the skipped one is not counted at all
    assert "2 more guesses said no confidence" in result.text()


def test_nothing_rated_gives_no_score_and_says_how_to_give_one():
    assert reliability([]).brier is None and reliability([]).text() == ""
    unrated = reliability([guess(None, True)])
    assert unrated.brier is None
    assert "None of your 1 guesses said how sure you were" in unrated.text() and "50, 70 or 90 %" in unrated.text()


def test_always_saying_fifty_percent_scores_a_quarter_whatever_happens():
    assert reliability([guess(0.5, right) for right in (True, False, False, True, False)]).brier == pytest.approx(0.25)


def test_a_level_is_overconfident_only_with_enough_answers_that_fall_short():
    short = [guess(0.9, True)] + [guess(0.9, False)] * (MIN_TO_JUDGE - 2)   # too few to judge
    assert reliability(short).overconfident() == []
    many = [guess(0.9, True), guess(0.9, True), guess(0.9, False), guess(0.9, False)]   # 50 % right at 90 %
    [level] = reliability(many).overconfident()
    assert level.confidence == 0.9 and level.made == 4
    assert "Overconfident at 90 %: right 50 %" in reliability(many).text()
    calibrated = [guess(0.7, True)] * 7 + [guess(0.7, False)] * 3   # right as often as it said
    assert reliability(calibrated).overconfident() == []
    assert "Overconfident" not in reliability(calibrated).text()


def test_the_table_lists_each_level_with_its_hit_rate():
    text = reliability([guess(0.7, True), guess(0.7, False), guess(0.9, True)]).text()
    lines = text.splitlines()
    assert lines[0] == "How sure you were, against how often you were right:"
    assert lines[2].split() == ["70", "%", "2", "1", "50", "%"] and lines[3].split() == ["90", "%", "1", "1", "100", "%"]
    assert "Brier score 0.197 over 3 rated guesses" in text   # (0.3² + 0.7² + 0.1²) / 3 = 0.59 / 3


def test_the_diagram_draws_a_dot_per_level_beside_the_diagonal():
    result = reliability([guess(0.5, True), guess(0.9, True), guess(0.9, False)])
    ax = plot_reliability(result)
    [diagonal] = ax.get_lines()
    assert list(diagonal.get_xdata()) == [0, 1] and list(diagonal.get_ydata()) == [0, 1]
    [dots] = ax.collections
    assert [tuple(point) for point in dots.get_offsets()] == [(0.5, 1.0), (0.9, 0.5)]
    assert "Brier 0.36" in ax.get_title()   # (0.5² + 0.1² + 0.9²) / 3 = 1.07 / 3
