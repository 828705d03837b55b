"""The plot of a batch of holder races (labkit/lessons/race_plots.py), from hand-made runs:
one row per recipe, topology and rule, in first-seen order; each run's give-up and the
waiter's grant at their seconds after the fault; a safe give-up drawn in the holding colour,
a late one in the lost colour, and one that never came at the right edge. The races on real
servers: tests/lessons/test_holder_safety.py. Pure logic: no server."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from labkit.lessons.holder_safety import RaceRun  # noqa: E402
from labkit.lessons.race_plots import plot_races  # noqa: E402
from labkit.vocabulary import STATE_COLOURS  # noqa: E402

pytestmark = pytest.mark.no_servers

RUNS = [RaceRun("zookeeper", "client-link", "server_lag subtracted", 4.0, 3200.0, 4100.0),     # safe
        RaceRun("zookeeper", "client-link", "server_lag subtracted", 4.0, 3300.0, 4000.0),     # safe
        RaceRun("zookeeper", "follower-cut", "trusts its server", 4.0, 4500.0, 4200.0),        # late
        RaceRun("etcd", "client-link", "keep-alive reply", 3.0, None, 3500.0)]                 # never gave up


def dots(ax) -> list[tuple[tuple[float, float], str, str]]:
    """(x, y), colour and marker kind of every scattered point, in drawing order."""
    found = []
    for collection in ax.collections:
        kind = "cross" if len(collection.get_paths()[0].vertices) <= 5 else "dot"
        for point, colour in zip(collection.get_offsets(), collection.get_facecolors() if kind == "dot"
                                 else collection.get_edgecolors()):
            found.append(((round(float(point[0]), 3), float(point[1])), to_hex(colour), kind))
    return found


def test_one_row_per_recipe_topology_and_rule_in_first_seen_order():
    ax = plot_races(RUNS, ax=Figure().add_subplot())
    assert [label.get_text() for label in ax.get_yticklabels()] == [
        "zookeeper, client-link\n(server_lag subtracted)", "zookeeper, follower-cut\n(trusts its server)",
        "etcd, client-link\n(keep-alive reply)"]
    assert ax.yaxis_inverted(), "the first row on top"


def test_each_run_is_its_give_up_and_the_grant_at_seconds_after_the_fault():
    ax = plot_races(RUNS, ax=Figure().add_subplot())
    right = 4.8   # the latest moment of any run (a give-up at 4.5 s) plus 0.3 s: a holder that never gave up stands there
    holding, lost = to_hex(STATE_COLOURS["holding"]), to_hex(STATE_COLOURS["lost"])
    assert dots(ax) == [((3.2, 0.0), holding, "dot"), ((4.1, 0.0), lost, "cross"),
                        ((3.3, 0.0), holding, "dot"), ((4.0, 0.0), lost, "cross"),
                        ((4.5, 1.0), lost, "dot"), ((4.2, 1.0), lost, "cross"),
                        ((right, 2.0), lost, "dot"), ((3.5, 2.0), lost, "cross")]
    assert ax.get_xlim() == pytest.approx((0, right + 0.1))
    assert [run.safe for run in RUNS] == [True, True, False, False]


def test_without_axes_it_makes_its_own_figure():
    import matplotlib.pyplot as plt
    ax = plot_races(RUNS[:1])
    try:
        assert ax.figure is not None and len(ax.get_yticklabels()) == 1
    finally:
        plt.close(ax.figure)
