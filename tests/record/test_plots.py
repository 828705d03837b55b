"""Each plot renders crafted data to a PNG, titled, labelled and with its data drawn."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests never open a window

import matplotlib.pyplot as pyplot  # noqa: E402
import pytest  # noqa: E402

from labkit.record import plots  # noqa: E402
from labkit.record.events import Event  # noqa: E402
from labkit.record.fencing import StoreWrite  # noqa: E402
from labkit.record.history import FAULT_CLIENT, History  # noqa: E402
from labkit.record.periods import fault_periods  # noqa: E402
from labkit.vocabulary import FAULT_BAND_COLOURS  # noqa: E402
from matplotlib.colors import to_hex  # noqa: E402

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


@pytest.fixture(autouse=True)
def close_figures():
    yield
    pyplot.close("all")


def fenced_run() -> History:
    rows = [(0.0, "client-1", "requested"), (0.01, "client-1", "acquired", {"token": 1}),
            (0.02, "client-2", "requested"), (0.03, "client-2", "watch"), (0.04, "client-3", "requested"),
            (0.5, FAULT_CLIENT, "fault", {"what": "pause", "target": "client-1", "seconds": 2.0}),
            (1.4, "client-1", "lost", {"reason": "session expired"}), (1.41, "client-2", "woke"),
            (1.42, "client-2", "acquired", {"token": 2}),
            (1.9, FAULT_CLIENT, "fault", {"what": "kill", "target": "client-3"}),
            (2.6, "client-2", "released", {"token": 2})]
    return History(Event(row[0], row[1], row[2], row[3] if len(row) > 3 else {}) for row in rows)


def assert_readable(ax, path) -> None:
    ax.figure.savefig(path, dpi=80)
    assert path.stat().st_size > 5000
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_legend() is not None and ax.get_legend().get_texts()


def test_hold_timeline(tmp_path):
    ax = plots.hold_timeline(fenced_run())
    assert_readable(ax, tmp_path / "timeline.png")
    assert "(s)" in ax.get_xlabel()
    assert [label.get_text() for label in ax.get_yticklabels()] == ["client-1", "client-2", "client-3"]
    bars = [collection for collection in ax.collections if len(collection.get_paths())]
    assert len(bars) >= 4  # waiting and holding bars of several clients, plus the pause
    assert any("kill client-3" in text.get_text() for text in ax.texts)
    with pytest.raises(ValueError, match="empty"):
        plots.hold_timeline(History())


def network_run() -> History:
    """A partition healed at 3 s, a delay never healed, a server paused by the panel's
    button and resumed, a timed pause of a client, a kill and a clock step."""
    lab = FAULT_CLIENT
    rows = [(0.0, "client-1", "requested"), (0.01, "client-1", "acquired", {"token": 1}),
            (0.02, "client-2", "requested"),
            (1.0, lab, "fault", {"what": "partition", "target": "zk1 | zk2,zk3", "phase": "start", "fault": 1,
                                 "links": ["zk1->zk2"], "cut": True}),
            (1.5, lab, "fault", {"what": "pause", "target": "zk2"}),
            (2.0, lab, "fault", {"what": "pause", "target": "client-2", "seconds": 1.5}),
            (2.5, lab, "fault", {"what": "resume", "target": "zk2"}),
            (3.0, lab, "fault", {"what": "partition", "target": "zk1 | zk2,zk3", "phase": "end", "fault": 1,
                                 "started": 101.0, "seconds": 2.0}),
            (3.5, lab, "fault", {"what": "kill", "target": "zk3"}),
            (4.0, lab, "fault", {"what": "clock_step", "target": "redis1", "seconds": 30}),
            (4.5, lab, "fault", {"what": "delay", "target": "every link", "phase": "start", "fault": 2, "delay": 50}),
            (6.0, "client-1", "released", {"token": 1})]
    return History(Event(100.0 + row[0], row[1], row[2], row[3] if len(row) > 3 else {}) for row in rows)


def fault_artists(ax) -> dict[str, object]:
    return {artist.get_gid(): artist for artist in ax.get_children() if str(artist.get_gid()).startswith("fault: ")}


def test_fault_periods_pair_starts_with_ends_and_pauses_with_resumes():
    periods = {(period.what, period.target): (period.start - 100.0, None if period.end is None else period.end - 100.0)
               for period in fault_periods(network_run())}
    assert periods == {("partition", "zk1 | zk2,zk3"): (1.0, 3.0), ("pause", "zk2"): (1.5, 2.5),
                       ("pause", "client-2"): (2.0, 3.5), ("kill", "zk3"): (3.5, 3.5),
                       ("clock_step", "redis1"): (4.0, 4.0), ("delay", "every link"): (4.5, None)}
    # an end recorded without its start (heal(history=h) after a partition without one)
    alone = History([Event(10.0, FAULT_CLIENT, "fault", {"what": "cut", "target": "client-1<->zk1", "phase": "end",
                                                         "fault": 7, "started": 8.0, "seconds": 2.0})])
    assert [(p.start, p.end) for p in fault_periods(alone)] == [(8.0, 10.0)]


def test_hold_timeline_shades_each_fault_period_as_a_band_and_instants_as_lines(tmp_path):
    ax = plots.hold_timeline(network_run())
    assert_readable(ax, tmp_path / "network.png")
    artists = fault_artists(ax)
    assert set(artists) == {"fault: partition zk1 | zk2,zk3", "fault: pause zk2", "fault: pause client-2",
                            "fault: kill zk3", "fault: clock_step redis1", "fault: delay every link"}

    def x_extent(gid):   # axvspan: a Rectangle, x in data, y in axes fraction 0..1
        band = artists[gid]
        assert (band.get_y(), band.get_height()) == (0, 1), f"{gid} does not span the Axes"
        return round(band.get_x(), 2), round(band.get_x() + band.get_width(), 2)
    # bands: their data x range is the fault's, in seconds since the first event
    assert x_extent("fault: partition zk1 | zk2,zk3") == (1.0, 3.0)
    assert x_extent("fault: pause zk2") == (1.5, 2.5)
    assert x_extent("fault: delay every link") == (4.5, 6.0)   # still on: up to the last event
    partition, delay = artists["fault: partition zk1 | zk2,zk3"], artists["fault: delay every link"]
    assert to_hex(partition.get_facecolor()) == FAULT_BAND_COLOURS["partition"]
    assert to_hex(delay.get_facecolor()) == FAULT_BAND_COLOURS["delay"]
    # a client's timed pause hatches its own row for its seconds
    hatched = artists["fault: pause client-2"]
    assert hatched.get_hatch() == "///"
    (xs,) = [path.vertices[:, 0] for path in hatched.get_paths()]
    assert (round(xs.min(), 2), round(xs.max(), 2)) == (2.0, 3.5)
    # instants: a dashed vertical line at their time
    for gid, at in (("fault: kill zk3", 3.5), ("fault: clock_step redis1", 4.0)):
        assert list(artists[gid].get_xdata()) == [at, at] and artists[gid].get_linestyle() == "--"
    labels = [text.get_text() for text in ax.texts]
    assert {"partition zk1 | zk2,zk3", "delay every link", "kill zk3", "clock_step redis1"} <= set(labels)


def test_wakeups_per_release_plot(tmp_path):
    ax = plots.wakeups_per_release_plot({"predecessor watch": {1: 1.0, 10: 1.0, 50: 1.0},
                                         "parent watch": {1: 1.0, 10: 8.9, 50: 48.7}})
    assert_readable(ax, tmp_path / "wakeups.png")
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["parent watch"].get_xdata()) == [1, 10, 50]
    assert list(lines["parent watch"].get_ydata()) == [1.0, 8.9, 48.7]


def test_latency_plot_uses_milliseconds_and_log_scale_for_wide_ranges(tmp_path):
    ax = plots.latency_plot({"redis": [0.0004, 0.0005, 0.0006], "zookeeper": [0.003, 0.004, 0.009]})
    assert_readable(ax, tmp_path / "latency.png")
    assert "ms" in ax.get_xlabel() and ax.get_xscale() == "log"
    assert "p50 0.50 ms" in ax.get_legend().get_texts()[0].get_text()
    close = plots.latency_plot({"a": [0.001, 0.002], "b": [0.0015, 0.0025]})
    assert close.get_xscale() == "linear"
    with pytest.raises(ValueError, match="no latency samples"):
        plots.latency_plot({"a": []})


def test_store_writes_plot(tmp_path):
    writes = [StoreWrite(100.0, "client-1", 1, True, "a", True, None, "accepted"),
              StoreWrite(101.5, "client-2", 2, True, "b", True, 1, "accepted"),
              StoreWrite(102.0, "client-1", 1, False, "a", True, 2, "token 1 < highest seen 2")]
    ax = plots.store_writes_plot(writes)
    assert_readable(ax, tmp_path / "writes.png")
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["accepted: 2", "accepted with a stale token: 0", "rejected by fencing: 1"]
    rejected = next(line for line in ax.get_lines() if line.get_label().startswith("rejected"))
    assert list(rejected.get_xdata()) == [2.0]


def test_store_writes_plot_marks_stale_writes_an_unfenced_store_accepted(tmp_path):
    writes = [{"time": 1.0, "client": "a", "token": 5, "accepted": True},
              {"time": 2.0, "client": "b", "token": 6, "accepted": True},
              {"time": 3.0, "client": "a", "token": 5, "accepted": True}]
    ax = plots.store_writes_plot(writes)
    assert_readable(ax, tmp_path / "unfenced.png")
    stale = next(line for line in ax.get_lines() if line.get_label().startswith("accepted with a stale token"))
    assert list(stale.get_xdata()) == [2.0] and stale.get_label().endswith(": 1")


def test_a_timed_pause_ends_at_its_targets_resume_or_kill():
    lab = FAULT_CLIENT
    rows = [(0.0, lab, {"what": "pause", "target": "client-1", "seconds": 60.0}),
            (0.1, lab, {"what": "resume", "target": "client-1"}),
            (0.2, lab, {"what": "pause", "target": "client-2", "seconds": 60.0}),
            (0.3, lab, {"what": "kill", "target": "client-2"}),
            (0.4, lab, {"what": "pause", "target": "client-3", "seconds": 1.0}),
            (2.0, lab, {"what": "resume", "target": "client-3"})]   # on time: the pause's own end stands
    periods = fault_periods(History(Event(time, client, "fault", detail) for time, client, detail in rows))
    assert [(p.what, p.target, p.start, p.end) for p in periods] == [
        ("pause", "client-1", 0.0, 0.1), ("pause", "client-2", 0.2, 0.3), ("kill", "client-2", 0.3, 0.3),
        ("pause", "client-3", 0.4, 1.4)]


def test_token_timeline_labels_each_hold_with_its_token_and_marks_the_writes(tmp_path):
    writes = [StoreWrite(100.02, "client-1", 1, True, "a", True, None, "accepted"),
              StoreWrite(101.45, "client-2", 2, True, "b", True, 1, "accepted"),
              StoreWrite(102.5, "client-1", 1, False, "late", True, 2, "token 1 < highest seen 2")]
    ax = plots.token_timeline(History(Event(100.0 + event.time, event.client, event.kind, event.detail)
                                      for event in fenced_run().events()), writes, token_name="epoch")
    assert_readable(ax, tmp_path / "terms.png")
    assert {"epoch 1", "epoch 2"} <= {text.get_text() for text in ax.texts}
    refused = next(line for line in ax.get_lines() if line.get_gid() == "refused writes")
    assert list(refused.get_xdata()) == [pytest.approx(2.5)] and list(refused.get_ydata()) == [pytest.approx(0.3)]
    assert "write refused by fencing" in [text.get_text() for text in ax.get_legend().get_texts()]


def test_holds_acting_plot_counts_what_the_checker_counts(tmp_path):
    begin_end = [("a", 1, 0.0), ("b", 2, 0.1), ("a", 1, 0.2), ("c", 3, 0.3), ("b", 2, 0.4), ("c", 3, 0.5),
                 ("a", 4, 0.6), ("a", 4, 0.7)]
    writes = [{"time": time, "client": client, "token": token, "accepted": True} for client, token, time in begin_end]
    holds_ax, count_ax = plots.holds_acting_plot(writes, 2)
    holds_ax.figure.savefig(tmp_path / "acting.png", dpi=80)
    step = next(line for line in count_ax.get_lines() if line.get_label() == "holds acting at once")
    # b spans 0.1-0.4 and c 0.3-0.5: with a until 0.2 that is 2 at most; a's second hold makes 1 again
    assert list(step.get_ydata()) == [1, 2, 2, 2, 2, 1, 1, 1]
    over = next(line for line in count_ax.get_lines() if line.get_label().startswith("more than 2"))
    assert list(over.get_ydata()) == []
    crowded = writes[:4] + [{"time": 0.35, "client": "a", "token": 1, "accepted": True}] + writes[4:]
    over = next(line for line in plots.holds_acting_plot(crowded, 2)[1].get_lines()
                if line.get_label().startswith("more than 2"))
    assert list(over.get_xdata()) == [pytest.approx(0.3), pytest.approx(0.35)] and set(over.get_ydata()) == {3}
    with pytest.raises(ValueError, match="no accepted writes"):
        plots.holds_acting_plot([{"time": 1.0, "client": "a", "token": 1, "accepted": False}], 2)
