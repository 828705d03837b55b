"""labkit.progress: a line per step (never per poll) where no widget frontend draws, the
display closed and marked however its block ends, a part nested inside its whole, and the
widget marked done or stopped. Pure logic: no server."""
from __future__ import annotations

import threading
import time

import pytest

from labkit import progress as progress_module
from labkit.progress import LINE_PREFIX, MODE_VARIABLE, display_mode, showing_progress

pytestmark = pytest.mark.no_servers


def progress_lines(text: str) -> list[str]:
    return [line[len(LINE_PREFIX):] for line in text.splitlines() if line.startswith(LINE_PREFIX)]


def test_plain_lines_one_per_step_and_one_at_the_end(capsys, monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "lines")
    with showing_progress("race", total=3) as shown:
        for topology in ("client link", "follower cut", "leader cut"):
            shown.step(topology)
            with shown.waiting("the session to expire", seconds=0.05):
                time.sleep(0.06)                       # a wait prints no line of its own
    lines = progress_lines(capsys.readouterr().err)
    assert [line.split(" (")[0] for line in lines[:4]] == [
        "race: 3 to go", "race 1 of 3 · client link", "race 2 of 3 · follower cut", "race 3 of 3 · leader cut"]
    assert len(lines) == 5 and lines[-1].startswith("race: done, 3 of 3 in "), lines


def test_an_interrupted_block_says_it_stopped_and_the_interrupt_goes_on(capsys, monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "lines")
    cleaned = []
    with pytest.raises(KeyboardInterrupt):
        try:
            with showing_progress("torture run", total=10) as shown:
                shown.step()
                raise KeyboardInterrupt        # the stop button, as the kernel raises it
        finally:
            cleaned.append("stopped its processes")
    lines = progress_lines(capsys.readouterr().err)
    assert lines[-1].startswith("torture run: stopped by KeyboardInterrupt after 1 of 10"), lines
    assert cleaned and not progress_module._open, "nothing stays open once the block has ended"


def test_a_part_carries_its_whole_and_a_worker_thread_nests_under_the_cells(capsys, monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "lines")
    with showing_progress("races", total=2) as whole:
        whole.step("follower cut")
        with showing_progress("race", total=1) as part:
            part.step("holder paused")
        seen = []

        def election():
            with showing_progress("election") as part:
                seen.append(part.position())

        worker = threading.Thread(target=election)
        worker.start()
        worker.join()
    lines = progress_lines(capsys.readouterr().err)
    assert any(line.startswith("races 1 of 2 · follower cut › race 1 of 1 · holder paused") for line in lines), lines
    assert seen == ["races 1 of 2 · follower cut › election"], seen


def test_the_mode_follows_the_variable_and_is_lines_outside_a_kernel(monkeypatch):
    monkeypatch.delenv(MODE_VARIABLE, raising=False)
    assert display_mode() == "lines"           # pytest is no Jupyter kernel
    monkeypatch.setenv(MODE_VARIABLE, "widget")
    assert display_mode() == "widget"


def test_the_widget_is_marked_done_or_stopped(monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "widget")
    with showing_progress("elections", total=2) as shown:
        shown.step("leader paused")
        with shown.waiting("the lease to run out", seconds=1.0):
            time.sleep(0.3)                    # the clock thread redraws meanwhile
            assert "waiting for the lease to run out" in shown.widget.label.value
            assert 0 < shown.widget.bar.value < 0.5, shown.widget.bar.value
    assert shown.widget.bar.bar_style == "success" and shown.widget.bar.value == 1.0
    assert shown.widget.label.value.startswith("elections: done, 1 of 2")
    assert not shown.widget.clock.is_alive() or shown.widget.stop.is_set()
    with pytest.raises(RuntimeError):
        with showing_progress("bench") as failing:
            raise RuntimeError("a server died")
    assert failing.widget.bar.bar_style == "danger" and "stopped by RuntimeError" in failing.widget.label.value


def test_a_display_with_after_stays_silent_when_the_block_is_quick(capsys, monkeypatch):
    monkeypatch.setenv(MODE_VARIABLE, "lines")
    with showing_progress("waiting for a leader", after=2.0):
        pass                                   # quick: nothing shown, not even its end
    assert progress_lines(capsys.readouterr().err) == []
    with showing_progress("waiting for a leader", after=0.05):
        time.sleep(0.3)
    lines = progress_lines(capsys.readouterr().err)
    assert [line.split(" (")[0].split(",")[0] for line in lines] == ["waiting for a leader", "waiting for a leader: done"], lines
