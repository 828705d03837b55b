"""The expiry storm's timeline (scenario expiry-storm-incident): the committed run has the
shape the scenario and its worked answers read, says what ZooKeeper does (no client is told
of an expiry before the frozen leader wakes; a jittered client waits its delay), and the
script that made it runs on real servers at small scale (8 clients: in our runs 14 to 30 of 30 sessions expired, so 8 that all survive the
race is unlikely)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

from labkit.practice.expiry_storm import STORM_POLICIES, load_storm, reconnect_curve, reconnects_per_bucket, storm_facts

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "maint" / "expiry_storm.py"


def check_shape(data: dict, clients: int) -> None:
    assert data["servers"] == 3 and data["session_timeout"] < data["pause"] < data["followers_wait"], data
    assert data["followers_wait"] == pytest.approx(data["tick_ms"] * data["sync_limit"] / 1000)
    storms = [run for run in data["runs"] if run["storm"]]
    assert [run["policy"] for run in storms] == list(STORM_POLICIES)
    [control] = [run for run in data["runs"] if not run["storm"]]
    assert control["pause"] > data["followers_wait"], "the control freezes the leader past the followers' patience"
    for run in data["runs"]:
        assert len(run["clients"]) == clients and run["resumed_at"] >= run["pause"]
        for row in run["clients"]:
            assert set(row) == {"client", "expired_at", "delay", "back_at", "sessions"}, row
            if row["expired_at"] is None:
                assert row["back_at"] is None and row["sessions"] == 1, row
                continue
            assert row["back_at"] >= row["expired_at"] + row["delay"], row
            assert row["sessions"] == 2, row
    for run in storms:
        told = [row["expired_at"] for row in run["clients"] if row["expired_at"] is not None]
        assert told, f"{run['policy']}: no session expired, no storm"
        assert min(told) >= run["resumed_at"], "a frozen leader expires nothing: nobody is told before it wakes"
        if run["policy"] == "immediate":
            assert all(row["delay"] == 0 for row in run["clients"])
        else:
            assert len({row["delay"] for row in run["clients"]}) == clients and \
                all(0 <= row["delay"] < data["spread"] for row in run["clients"])


def test_the_committed_run_has_the_shape_the_scenario_reads():
    data = load_storm()
    check_shape(data, clients=30)
    facts = storm_facts(data)
    assert set(facts) == {"immediate", "jittered", "control"}
    assert sum(reconnects_per_bucket(data["runs"][0]).values()) == facts["immediate"]["expired"]
    assert facts["control"]["survived"] > facts["control"]["expired"], "a new leader restarts the session timers"


def test_the_reconnect_curve_draws_both_policies_the_freeze_and_the_control():
    ax = reconnect_curve(load_storm())
    labels = [line.get_label() for line in ax.get_lines()] + [patch.get_label() for patch in ax.patches]
    assert sum("reconnect: peak" in label for label in labels) == 2
    assert any(label.startswith("control:") for label in labels) and any("leader frozen" in label for label in labels)


@pytest.mark.slow
def test_the_script_runs_the_storm_on_real_servers(tmp_path):
    out = tmp_path / "storm.json"
    env = dict(os.environ, LABKIT_HOME=os.environ.get("LABKIT_HOME", str(tmp_path / "home")))
    done = subprocess.run([sys.executable, str(SCRIPT), "--clients", "8", "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    check_shape(json.loads(out.read_text()), clients=8)
    assert "wrote" in done.stdout and done.stdout.count("sessions expired") == 3
