"""Each plot renders crafted data to a PNG, titled, labelled and with its data drawn."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # tests never open a window

import matplotlib.pyplot as pyplot  # noqa: E402
import pytest  # noqa: E402

from labkit import plots  # noqa: E402
from labkit.record.events import Event  # noqa: E402
from labkit.record.fencing import StoreWrite  # noqa: E402
from labkit.record.history import FAULT_CLIENT, History  # noqa: E402


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
