"""How long each code cell of the course runs, and whether it shows its progress meanwhile: the
table ``notebooks/data/cell_times.csv`` (notebook, cell id, seconds, progress), measured on a
real run of every notebook, and the two checks that keep it honest.

    python -m labkit.book.cell_times                 # every notebook, one after another (~25 min loaded)
    python -m labkit.book.cell_times notebooks/07_partitions_and_client_side_expiry.ipynb

Each notebook runs under nbval (``pytest --nbval-lax``) with ``LABKIT_CELL_TIMES`` set, so
notebooks/conftest.py appends one line per code cell; the run's rows then replace that
notebook's rows in the table, whose first line says when and under what load they were taken
(the machine is shared: a loaded run is slower, and the table says so).

The checks (notebooks/conftest.py runs both; tests/notebooks/test_cell_times.py checks the table):
- a cell the table lists at more than ``SLOW_SECONDS`` must print progress lines
  (``labkit.progress.LINE_PREFIX``) on every nbval run, or it fails: a learner watching a
  silent cell for that long cannot tell working from stuck;
- with ``LABKIT_CELL_TIMES`` set, a notebook that ran every cell and took more than
  ``GROWTH_ALLOWED`` times its total in the table fails the session at its end.

What can fail: a notebook whose run fails keeps its old rows (its times would be partial);
the command names it and exits 1.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from labkit.book.run import NOTEBOOKS, ROOT
from labkit.progress import LINE_PREFIX

TABLE = NOTEBOOKS / "data" / "cell_times.csv"
SLOW_SECONDS = 5.0          # a cell longer than this shows its progress (issue 36)
GROWTH_ALLOWED = 1.2        # a notebook's fresh total may be at most 20 % over the table's
FIELDS = ("notebook", "cell", "seconds", "progress")
# Cells that may run over SLOW_SECONDS without progress, each with why: nothing in them waits
# for a server; they are slow only on a loaded machine (the table's first line says the load).
WAITS_FOR_NOTHING = {
    "read-aloud": "the first cell of each lesson: it imports labkit and ipywidgets (about 1 s on an idle "
                  "machine); no progress display exists before that import",
    "906786e2": "08: draws three figures of runs made in earlier cells (matplotlib only, no server); "
                "9.7 s at load 40 on 2 cores, well under a second idle",
}
TABLE_VARIABLE = "LABKIT_CELL_TABLE"   # another table for the checks (tests/notebooks/test_notebook_stderr.py)


def table_path() -> Path:
    """The table the checks read: ``$LABKIT_CELL_TABLE`` if set, else the course's."""
    return Path(os.environ.get(TABLE_VARIABLE) or TABLE)


def showed_progress(outputs) -> bool:
    """Did a cell's outputs (nbformat dicts) include a plain progress line?"""
    return any(line.startswith(LINE_PREFIX)
               for output in outputs or () if output.get("output_type") == "stream"
               for line in output.get("text", "").splitlines())


def read_table(path: Path = TABLE) -> list[dict]:
    """The table's rows (seconds as float, progress as bool); none if there is no table."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    return [{**row, "seconds": float(row["seconds"]), "progress": row["progress"] == "yes"}
            for row in csv.DictReader(lines)]


def slow_cells(rows: list[dict]) -> dict[tuple[str, str], float]:
    """(notebook, cell id) -> seconds, for every cell the table lists over SLOW_SECONDS (but
    those in WAITS_FOR_NOTHING)."""
    return {(row["notebook"], row["cell"]): row["seconds"] for row in rows
            if row["seconds"] > SLOW_SECONDS and row["cell"] not in WAITS_FOR_NOTHING}


def totals(rows: list[dict]) -> dict[str, float]:
    """Each notebook's total seconds over its cells."""
    summed: dict[str, float] = {}
    for row in rows:
        summed[row["notebook"]] = summed.get(row["notebook"], 0.0) + row["seconds"]
    return summed


def grown(fresh: dict[str, float], counted: dict[str, int], rows: list[dict]) -> list[str]:
    """What went wrong: each notebook of this run (every one of its cells timed: ``counted``
    matches the table's count) whose total is over GROWTH_ALLOWED times the table's."""
    recorded = totals(rows)
    cells = {name: sum(1 for row in rows if row["notebook"] == name) for name in recorded}
    return [f"{name}: {fresh[name]:.0f} s now, {recorded[name]:.0f} s in the table "
            f"(more than {GROWTH_ALLOWED - 1:.0%} over)"
            for name in sorted(fresh) if name in recorded and counted.get(name) == cells[name]
            and fresh[name] > GROWTH_ALLOWED * recorded[name]]


def load_now() -> str:
    """The machine's load as ``uptime`` gives it (1, 5 and 15 minutes) and its core count."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def notes_of(path: Path = TABLE) -> list[str]:
    """The table's first lines, each saying when and under what load some notebooks were measured."""
    if not path.exists():
        return []
    return [line[2:] for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("# ")]


def write_table(rows: list[dict], notes: list[str], path: Path = TABLE) -> None:
    rows = sorted(rows, key=lambda row: (row["notebook"], row["order"]))
    with path.open("w", encoding="utf-8", newline="") as table:
        table.writelines(f"# {note}\n" for note in notes)
        writer = csv.writer(table, lineterminator="\n")
        writer.writerow(FIELDS + ("order",))
        for row in rows:
            writer.writerow((row["notebook"], row["cell"], f"{row['seconds']:.2f}",
                             "yes" if row["progress"] else "no", row["order"]))


def measure(notebook: Path) -> list[dict] | None:
    """Run one notebook under nbval with its cells timed: its rows, or None if it failed."""
    with tempfile.TemporaryDirectory(prefix="cell-times-") as folder:
        lines = Path(folder) / "times.tsv"
        # measuring, not checking: no table to check against (tests/notebooks/test_cell_times.py judges the new one)
        environment = {**os.environ, "LABKIT_CELL_TIMES": str(lines), TABLE_VARIABLE: str(Path(folder) / "none.csv")}
        result = subprocess.run([sys.executable, "-m", "pytest", str(notebook), "--nbval-lax", "-q",
                                 "-p", "no:cacheprovider"], cwd=ROOT, env=environment)
        if result.returncode != 0 or not lines.exists():
            return None
        rows = []
        for line in lines.read_text(encoding="utf-8").splitlines():
            name, cell, order, seconds, progress = line.split("\t")[:5]
            rows.append({"notebook": name, "cell": cell, "order": int(order), "seconds": float(seconds),
                         "progress": progress == "yes"})
        return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    notebooks = [Path(name).resolve() for name in argv] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    failed, fresh, before = [], [], load_now()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for notebook in notebooks:
        rows = measure(notebook)
        if rows is None:
            failed.append(notebook.name)
        fresh += rows or []
    # read at the end: another measurement of other notebooks may have written meanwhile
    ran = {row["notebook"] for row in fresh}
    kept = [{**row, "order": int(row.get("order") or 0)} for row in read_table() if row["notebook"] not in ran]
    still = {row["notebook"][:2] for row in kept}     # an older note stays while rows of its run remain
    notes = [note for note in notes_of() if still & set(note.split(": ")[-1].split(", "))]
    write_table(kept + fresh, notes + [f"measured {started} by python -m labkit.book.cell_times, one notebook at a "
                                       f"time; {before} at the start, {load_now()} at the end: "
                                       + ", ".join(sorted(name[:2] for name in ran))])
    if failed:
        print("these notebooks failed, their old rows are kept:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
