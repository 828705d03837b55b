"""The course map in 00 agrees with the notebooks folder: every notebook is listed, every
listed notebook exists (or is marked as coming, or still has its old name), every claim
C1-C26 is taught somewhere, and each entry has a time."""
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"


def map_rows():
    notebook = json.loads((NOTEBOOKS / "00_start_here.ipynb").read_text())
    [text] = ["".join(cell["source"]) for cell in notebook["cells"]
              if cell["cell_type"] == "markdown" and "".join(cell["source"]).startswith("## The map of the course")]
    rows = []
    for line in text.splitlines():
        if line.startswith("| `"):
            first, _, claims, time = [column.strip() for column in line.strip("|").split("|")]
            names = re.findall(r"`([^`]+)`", first)
            rows.append({"name": names[0], "was": re.search(r"renamed from `([^`]+)`", first),
                         "coming": "coming" in first, "claims": claims, "time": time})
    return rows


def test_every_notebook_is_on_the_map_and_every_entry_exists_or_is_coming():
    rows = map_rows()
    listed = {row["name"] for row in rows}
    old_names = {row["was"].group(1) for row in rows if row["was"]}
    on_disk = {path.stem for path in NOTEBOOKS.glob("*.ipynb")}
    assert on_disk - listed - old_names == set(), "notebooks missing from the map in 00"
    for row in rows:
        exists = row["name"] in on_disk or (row["was"] is not None and row["was"].group(1) in on_disk)
        assert exists or row["coming"], f"{row['name']} is on the map but neither exists nor is marked coming"


def test_the_map_covers_every_claim_and_gives_every_entry_a_time():
    rows = map_rows()
    claims = {int(number) for row in rows for number in re.findall(r"\bC(\d+)\b", row["claims"])}
    assert claims >= set(range(1, 27)), f"claims not on the map: {sorted(set(range(1, 27)) - claims)}"
    assert all(re.search(r"\d+ min|open-ended", row["time"]) for row in rows), [row["time"] for row in rows]
