"""Where labs live on disk: ``$LABKIT_HOME/labs/<id>/`` holds a lab's data, logs and its
state file ``lab.json``; ``$LABKIT_HOME/current`` names the lab ``labkit up`` started last.

What can fail: an unreadable or half-written state file reads as None (a start that died
early); the reaper in ``labkit.servers.state`` decides what to do with it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


def labkit_home() -> Path:
    home = os.environ.get("LABKIT_HOME")
    if home:
        return Path(home)
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "labkit"


def labs_dir() -> Path:
    path = labkit_home() / "labs"
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)  # other users need not even see lab ids
    return path


def current_file() -> Path:
    return labkit_home() / "current"


def write_state(run_dir: Path, state: dict) -> None:
    tmp = run_dir / "lab.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    os.replace(tmp, run_dir / "lab.json")


def read_state(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "lab.json").read_text())
    except (OSError, ValueError):
        return None
