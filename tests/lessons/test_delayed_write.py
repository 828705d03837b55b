"""Kleppmann's delayed write, on real servers: a holder that checks is_held and sends its
write before its client-side deadline can still have that write arrive after its successor's,
because only the link to the resource was slow. The unfenced store applies it (the old
holder's value wins); the fenced store refuses it. A deadline does not replace fencing."""
from __future__ import annotations

import pytest

import labkit
from labkit.lessons.delayed_write import LATE_VALUE, SUCCESSOR_VALUE, delayed_write_runs, plot_delayed_writes

pytestmark = pytest.mark.slow  # its module's runs take ~26 s

RUNS = 3


@pytest.fixture(scope="module")
def runs():
    with labkit.up(zookeeper=1, etcd=0, redis=True, network=True, quiet=True) as lab:
        yield delayed_write_runs(lab, RUNS, session_timeout=2.0)


def _rows(outcomes):
    rows = [outcome.row() for outcome in outcomes]
    print(*rows, sep="\n")
    return rows


@pytest.mark.parametrize("fenced", [False, True], ids=["unfenced", "fenced"])
def test_the_holder_sent_in_time_and_gave_up_in_time(runs, fenced):
    outcomes = runs[fenced]
    rows = _rows(outcomes)
    assert len(outcomes) == RUNS
    for outcome in outcomes:
        assert outcome.time_left_at_send_ms > 0, rows
        assert outcome.sent_before_deadline, rows
        assert outcome.gave_up_first, rows
        assert outcome.new_token > outcome.old_token, rows
        assert outcome.arrived_after_successor, rows
        # only holder -> Redis was slowed: the answer came back at once
        assert outcome.late_replied_ms - outcome.late_arrived_ms < 500, rows


def test_the_unfenced_store_applies_the_late_write_after_the_successors(runs):
    rows = _rows(runs[False])
    for outcome in runs[False]:
        assert outcome.late_accepted, rows
        assert outcome.corrupted and outcome.final_value == LATE_VALUE, rows
        order = [write.value for write in outcome.writes]
        assert order.index(SUCCESSOR_VALUE) < order.index(LATE_VALUE), order


def test_the_fenced_store_refuses_the_late_write(runs):
    rows = _rows(runs[True])
    for outcome in runs[True]:
        assert not outcome.late_accepted, rows
        assert not outcome.corrupted and outcome.final_value == SUCCESSOR_VALUE, rows
        late = next(write for write in outcome.writes if write.value == LATE_VALUE)
        assert late.reason.startswith(f"token {outcome.old_token} < highest seen {outcome.new_token}"), late


def test_the_plot_draws_one_timeline_per_run(runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = plot_delayed_writes([runs[False][0], runs[True][0]])
    assert len(axes) == 2
    assert "unfenced" in axes[0].get_title() and "applied" in axes[0].get_title()
    assert axes[1].get_title().startswith("fenced") and "refused" in axes[1].get_title()
    plt.close("all")
