"""The learner's practice journal: predictions and scenario scores, kept in a JSON file.

Why a file next to the notebook and not the notebook's metadata: the kernel does not own
the notebook document. JupyterLab holds it in the browser and saves it over whatever the
kernel would have written, so metadata written from Python is lost on the next autosave
(or, worse, races with it). A small JSON file in the notebook's folder (the kernel's
working directory) survives restarts, can be read back with ``Journal().entries()``, and
stays out of git (``.gitignore`` lists it). ``LABKIT_PRACTICE_JOURNAL`` names another file.

Several kernels may write one journal at once (notebooks run side by side under
pytest-xdist, or two open in JupyterLab): ``add`` holds an exclusive lock on a hidden
``.NAME.lock`` file next to it while it reads, appends and renames, where the platform has
``fcntl`` (Linux, macOS); elsewhere two kernels adding in the same instant could lose one
entry.

What can fail: an unreadable or corrupt journal file is renamed aside with a warning
and a fresh one started; a folder that cannot be written raises ``OSError``.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

try:
    import fcntl
except ImportError:        # Windows: no advisory locks; see the module docstring
    fcntl = None

DEFAULT_NAME = "practice_scores.json"


def journal_path() -> Path:
    return Path(os.environ.get("LABKIT_PRACTICE_JOURNAL") or Path.cwd() / DEFAULT_NAME)


class Journal:
    """Append-only list of entries ({"kind": "prediction" | "scenario", "at": epoch seconds, ...})."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else journal_path()

    def entries(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(entries, list):
                raise ValueError("not a list")
        except ValueError as error:
            aside = self.path.with_name(self.path.name + f".broken-{int(time.time())}")
            self.path.rename(aside)
            warnings.warn(f"the practice journal {self.path} was unreadable ({error}); kept it as {aside}, "
                          "starting a new one")
            return []
        return [entry for entry in entries if kind is None or entry.get("kind") == kind]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if fcntl is None:
            yield
            return
        # a hidden name: the file browser next to the notebooks does not list it
        with open(self.path.with_name(f".{self.path.name}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        entry = {"kind": kind, "at": round(time.time(), 3), **fields}
        with self._locked():
            entries = self.entries()
            entries.append(entry)
            # write aside (a name of this process's own), then rename: a crash mid-write never
            # leaves half a file
            partial = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
            partial.write_text(json.dumps(entries, indent=1, default=str), encoding="utf-8")
            partial.replace(self.path)
        return entry
