"""What a torture run leaves (labkit/torture/report.py), from trials judged on hand-made
histories and store records: a safe trial and one whose holds overlap; the result's verdict
in words (repr, HTML with the pictures inline), and ``save``'s folder: report.json that
``read_replay`` reads the schedule back from, with every event and write, a PNG per trial and
report.html pointing at them; a folder that cannot be made is an OSError. Pure logic: the
servers' part of a run is tests/torture/test_torture.py's."""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from labkit.locks.registry import recipe_named  # noqa: E402
from labkit.record.events import Event  # noqa: E402
from labkit.record.fencing import StoreWrite  # noqa: E402
from labkit.record.history import History  # noqa: E402
from labkit.torture import read_replay  # noqa: E402
from labkit.torture.nemesis import Executed  # noqa: E402
from labkit.torture.report import TortureResult, Trial  # noqa: E402
from labkit.torture.schedule import Step  # noqa: E402
from labkit.torture.verdict import judge  # noqa: E402

pytestmark = pytest.mark.no_servers

START = 1_000.0   # time.time() of the workload's start
PARAMETERS = {"recipe": "zookeeper", "clients": 2, "duration": 3.0, "nemeses": ["pause"], "seed": 7, "fenced": False}


def write(at, client, token, accepted=True):
    return StoreWrite(START + at, client, token, accepted, f"{client}-{token}", False, None, "")


def trial(number: int, overlapping: bool) -> Trial:
    """c1 holds (token 1) and lets go at 1.0; c2 takes over (token 2). Overlapping: c2 is told
    it holds at 0.6 and writes at 0.7, between two writes of c1, and the unfenced store takes all."""
    taken = 0.6 if overlapping else 1.1
    events = [(0.0, "c1", "requested", {}), (0.1, "c1", "acquired", {"token": 1}), (0.2, "c2", "requested", {}),
              (taken, "c2", "acquired", {"token": 2}), (1.0, "c1", "released", {"token": 1}),
              (2.0, "c2", "released", {"token": 2})]
    history = History(Event(START + at, client, kind, detail) for at, client, kind, detail in sorted(events))
    writes = [write(0.5, "c1", 1), write(0.8 if overlapping else 0.9, "c1", 1), write(1.5, "c2", 2)]
    if overlapping:
        writes.insert(1, write(0.7, "c2", 2))
    pause = Step(1.2, "pause", "client", 0.1)
    executed = [Executed(pause, "c2", START + 1.2, START + 1.3)]
    judgement = judge(history, writes, executed, recipe_named("zookeeper"), ttl=1.0, timeout=1.0, start=START,
                      end=START + 3.0)
    return Trial(number, 7 + number, [pause], executed, history, writes, judgement, START, START + 3.0)


def test_a_safe_trial_and_an_overlapping_one_are_told_apart():
    safe, broken = trial(1, overlapping=False), trial(2, overlapping=True)
    assert safe.ok and not broken.ok
    assert safe.summary().startswith("trial 1 (seed 8): mutual exclusion OK, linearizable; 2 acquires, "
                                     "0 stale writes rejected")
    assert "mutual exclusion VIOLATED" in broken.summary()
    assert safe.fault_periods() == [(START + 1.2, START + 1.3, "pause c2")]


def test_the_result_holds_only_if_every_trial_does():
    assert TortureResult(PARAMETERS, [trial(1, False)]).ok
    assert not TortureResult(PARAMETERS, [trial(1, False), trial(2, True)]).ok
    assert not TortureResult(PARAMETERS, []).ok, "no trial shows nothing"


def test_the_repr_says_the_verdict_and_explains_a_violation():
    result = TortureResult(PARAMETERS, [trial(1, False), trial(2, True)])
    text = repr(result)
    assert text.startswith("<TortureResult zookeeper, 2 clients, 3 s, nemesis pause, seed 7, unfenced: "
                           "VIOLATIONS FOUND (2 trial(s))")
    lines = text.splitlines()
    assert lines[1].strip().startswith("trial 1") and lines[2].strip().startswith("trial 2")
    assert lines[3].strip().startswith("Mutual exclusion (the store's record): VIOLATED")   # trial 2's first reason
    assert "every check held" in repr(TortureResult(PARAMETERS, [trial(1, False)]))


def test_the_notebook_view_embeds_the_pictures():
    page = TortureResult(PARAMETERS, [trial(1, False)])._repr_html_()
    assert page.count('<img src="data:image/png;base64,') == 1 and "Every check held." in page
    assert "labkit torture --replay report.json" in page


def test_save_writes_a_report_the_schedule_can_be_replayed_from(tmp_path):
    result = TortureResult(PARAMETERS, [trial(1, False), trial(2, True)])
    folder = result.save(tmp_path / "report")
    assert sorted(path.name for path in folder.iterdir()) == ["report.html", "report.json", "trial-1.png",
                                                              "trial-2.png"]
    assert all((folder / f"trial-{n}.png").read_bytes().startswith(b"\x89PNG") for n in (1, 2))
    saved = json.loads((folder / "report.json").read_text())
    assert saved["parameters"] == PARAMETERS and saved["ok"] is False
    assert [len(each["events"]) for each in saved["trials"]] == [6, 6]
    assert [len(each["writes"]) for each in saved["trials"]] == [3, 4]
    assert saved["trials"][1]["verdicts"]["mutual_exclusion"]["ok"] is False
    assert saved["trials"][1]["verdicts"]["mutual_exclusion"]["first"], "the first overlap is explained"
    parameters, schedules = read_replay(folder)
    assert parameters == PARAMETERS and schedules == [(8, [Step(1.2, "pause", "client", 0.1)]),
                                                      (9, [Step(1.2, "pause", "client", 0.1)])]
    page = (folder / "report.html").read_text()
    assert '<img src="trial-1.png"' in page and '<img src="trial-2.png"' in page and "data:image" not in page
    assert "labkit torture --replay report.json" in page   # the page sits beside it
    assert result.folder == folder and f"labkit torture --replay {folder}" in result._repr_html_()   # the notebook's view


def test_save_to_a_folder_that_cannot_be_made_is_an_os_error(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OSError):
        TortureResult(PARAMETERS, [trial(1, False)]).save(tmp_path / "a-file" / "report")


def test_a_trial_with_no_client_event_says_so_in_its_figure():
    empty = trial(1, False)
    empty.history = History()
    figure = empty.figure()
    assert [text.get_text() for text in figure.texts] == [
        "Trial 1: no client event was recorded (did the clients start?)"]
