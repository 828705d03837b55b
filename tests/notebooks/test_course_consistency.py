"""The course says one thing in every place it says it. Pure logic: files are read, nothing runs.

* Names and minutes: the map in 00, each notebook's first cell, README's table and
  docs/INSTRUCTOR.md's per-notebook headings list the same notebooks with the same minutes.
* Measured claims: a bound or ratio docs/INSTRUCTOR.md quotes under a notebook's heading is
  followed by a hidden marker ``<!-- assert: EXPR -->``; that notebook has an ``assert``
  containing EXPR, and every number written in EXPR is also written in the prose just before
  the marker, so the guide cannot quote one bound while the notebook checks another. A ratio
  or fraction of a timeout written in an Expected or Timing line without a marker fails.
* Facts read from the notebooks (issue #33): each heading's run time is the one the notebook's
  first cell gives, and README names every notebook that runs longer than about a minute; 02's
  crash timeouts are its CRASH_TIMEOUTS; a Predictions line counts and lists as many as the
  notebook's predict( calls; the discussion cards are those cards.json marks; both workshop
  plans place every lesson, in the timetable or the homework.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
INSTRUCTOR = ROOT / "docs" / "INSTRUCTOR.md"
MINUTES = re.compile(r"(\d+)(?:\s*[–-]\s*(\d+))?\s*min(?:utes)?\b")
MARKER = re.compile(r"<!--\s*assert:\s*(.*?)\s*-->", re.DOTALL)
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
# a ratio ("2x", "3 times") or a fraction of something ("0.7 of", "0.8 ×", "20 % of")
RATIO_OR_FRACTION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:x\b|×|times\b)|\b0\.\d+\s+of\b|\b\d+(?:\.\d+)?\s*%\s*of\b")


def minutes(text: str) -> tuple[int, ...]:
    """Every "N min" / "N–M minutes" in ``text``, flattened; "open-ended" reads as ()."""
    return tuple(int(number) for match in MINUTES.finditer(text) for number in match.groups() if number)


def cells(name: str) -> list[dict]:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def course_map() -> dict[str, tuple[int, ...]]:
    [text] = [source(cell) for cell in cells("00_start_here")
              if cell["cell_type"] == "markdown" and source(cell).startswith("## The map of the course")]
    rows = {}
    for line in text.splitlines():
        if line.startswith("| `"):
            first, *_, time = [column.strip() for column in line.strip("|").split("|")]
            rows[re.search(r"`([^`]+)`", first).group(1)] = minutes(time)
    return rows


def header_minutes(name: str) -> tuple[int, ...] | None:
    """The minutes a notebook's first cell announces, before what it says about its run time."""
    first = source(cells(name)[0])
    text = re.split(r"notebook runs|runs in", first)[0]
    found = minutes(text)
    return found or None


def readme_table() -> dict[str, tuple[int, ...]]:
    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([^`]+)\.ipynb` \|.*\| ([^|]*) \|$", line)
        if match:
            rows[match.group(1)] = minutes(match.group(2))
    return rows


def instructor_sections() -> dict[str, tuple[tuple[int, ...], str]]:
    """Per notebook (by its map name): the minutes of its INSTRUCTOR.md heading and its text."""
    text = INSTRUCTOR.read_text(encoding="utf-8")
    names = {name[:2]: name for name in course_map() if name[:2].isdigit()}
    sections = {}
    parts = re.split(r"^### (.+)$", text, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2]):
        key = heading.split()[0]
        name = names.get(key, key)
        time = re.search(r"\(([^;)]*)", heading)
        sections[name] = (minutes(time.group(1)) if time else (), body.split("\n## ")[0])
    return sections


def asserts_of(name: str) -> list[str]:
    """Every assert statement of a notebook, continuation lines joined, whitespace collapsed."""
    found = []
    for cell in cells(name):
        if cell["cell_type"] != "code":
            continue
        lines = source(cell).splitlines()
        for index, line in enumerate(lines):
            if re.match(r"\s*assert\b", line):
                indent = len(line) - len(line.lstrip())
                statement = [line]
                for follower in lines[index + 1:]:
                    if follower.strip() and len(follower) - len(follower.lstrip()) <= indent:
                        break
                    statement.append(follower)
                found.append(" ".join(" ".join(statement).split()))
    return found


def test_the_map_the_notebooks_the_readme_and_the_guide_agree_on_names_and_minutes():
    course = course_map()
    on_disk = {path.stem for path in NOTEBOOKS.glob("*.ipynb")}
    assert set(course) == on_disk, f"the map in 00 and the notebooks folder differ: {set(course) ^ on_disk}"
    assert readme_table() == course, "README's table and the map in 00 differ"
    guide = instructor_sections()
    assert set(guide) == set(course), f"INSTRUCTOR.md's per-notebook headings and the map differ: {set(guide) ^ set(course)}"
    disagree = []
    for name, on_map in course.items():
        if guide[name][0] != on_map:
            disagree.append(f"{name}: map {on_map}, INSTRUCTOR.md {guide[name][0]}")
        header = header_minutes(name)
        if header is not None and header != on_map:
            disagree.append(f"{name}: map {on_map}, its first cell {header}")
        if header is None and on_map:
            disagree.append(f"{name}: map {on_map}, its first cell gives no time")
    assert not disagree, "minutes disagree:\n" + "\n".join(disagree)


def markers() -> list[tuple[str, str, str]]:
    """(notebook, assert expression, the prose before the marker) for every marker."""
    found = []
    for name, (_, body) in instructor_sections().items():
        for match in MARKER.finditer(body):
            before = MARKER.sub("", body[:match.start()])
            sentence = re.split(r"(?:\n\s*\n|\n- \*\*|[.;]\s)", before)[-1]
            found.append((name, match.group(1), sentence))
    return found


def test_the_guide_marks_its_measured_bounds():
    assert len(markers()) >= 15, "INSTRUCTOR.md should mark the bounds it quotes (<!-- assert: ... -->)"


@pytest.mark.parametrize("notebook, expression, prose", markers(), ids=[f"{n[:2]}:{e[:40]}" for n, e, _ in markers()])
def test_every_marked_bound_is_asserted_by_its_notebook_with_the_same_numbers(notebook, expression, prose):
    wanted = " ".join(expression.split())
    assert any(wanted in statement for statement in asserts_of(notebook)), (
        f"INSTRUCTOR.md says {notebook} asserts `{wanted}`, but no assert of that notebook contains it")
    written = {float(number) for number in NUMBER.findall(prose.replace("−", "-"))}
    missing = [number for number in NUMBER.findall(wanted) if float(number) not in written]
    assert not missing, f"the assert `{wanted}` uses {missing}, which the guide's sentence does not say: {prose!r}"


def test_no_ratio_or_fraction_of_a_timeout_goes_unmarked():
    unmarked = []
    for name, (_, body) in instructor_sections().items():
        for paragraph in re.split(r"\n(?=- \*\*)", body):
            if not paragraph.startswith(("- **Expected", "- **Timing")):
                continue
            for match in RATIO_OR_FRACTION.finditer(paragraph):
                rest = paragraph[match.end():]
                if not MARKER.search(rest.split(". ")[0] if ". " in rest else rest):
                    unmarked.append(f"{name}: {match.group(0)!r} in {paragraph[max(0, match.start() - 60):match.end() + 20]!r}")
    assert not unmarked, "measured ratios or fractions with no assert marker:\n" + "\n".join(unmarked)


# --- issue #33: the guide's facts about each notebook, read from the notebooks themselves ---------

RUN_TIME = re.compile(r"runs in ((?:well )?(?:under|about) (?:a|an|one|two|three|four|five|six|\d+) minutes?)")
COUNT_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
               "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
LESSON = re.compile(r"(?<![\d:.])(\d\d)(?![\d:.])")


def run_time(name: str) -> str | None:
    """What a notebook's first cell says about its unattended run ("about three minutes")."""
    found = RUN_TIME.search(" ".join(source(cells(name)[0]).split()))
    return found.group(1) if found else None


def parentheses(text: str) -> list[str]:
    """The text inside each outermost pair of parentheses."""
    groups, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
            start = index + 1 if depth == 1 else start
        elif char == ")" and depth:
            depth -= 1
            if depth == 0:
                groups.append(text[start:index])
    return groups


def code_of(name: str) -> str:
    return "\n".join(source(cell) for cell in cells(name) if cell["cell_type"] == "code")


def instructor_headings() -> dict[str, str]:
    names = {name[:2]: name for name in course_map() if name[:2].isdigit()}
    text = INSTRUCTOR.read_text(encoding="utf-8")
    return {names.get(heading.split()[0], heading.split()[0]): heading
            for heading in re.findall(r"^### (.+)$", text, flags=re.MULTILINE)}


def test_the_guide_and_the_readme_give_each_notebooks_run_time_as_its_first_cell_does():
    headings, disagree = instructor_headings(), []
    for name in course_map():
        said = run_time(name)
        if said is None:
            continue
        quoted = RUN_TIME.search(headings[name])
        if not quoted or quoted.group(1) != said:
            disagree.append(f"{name}: its first cell says it runs in {said!r}, INSTRUCTOR.md's heading {headings[name]!r}")
    assert not disagree, "run times disagree:\n" + "\n".join(disagree)
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    exceptions = dict(re.findall(r"\b(\d\d) in ((?:well )?(?:under|about) \w+ minutes?)", readme))
    longer = {name[:2]: run_time(name) for name in course_map()
              if run_time(name) and not run_time(name).endswith(("a minute", "one minute"))}
    assert exceptions == longer, (
        f"README names {exceptions} as the notebooks that run longer than about a minute; their first cells say {longer}")
    assert "run in about a minute" in readme, "README should say how long the other notebooks run"


def test_the_guide_quotes_02s_crash_timeouts():
    [timeouts] = re.findall(r"^CRASH_TIMEOUTS = (\([^)]*\))", code_of("02_zookeeper_lock_recipe"), flags=re.MULTILINE)
    timeouts = {float(value) for value in ast.literal_eval(timeouts)}
    _, body = instructor_sections()["02_zookeeper_lock_recipe"]
    [quoted] = re.findall(r"timeouts of ([\d., and]+?) s\b", body)
    assert {float(value) for value in re.findall(r"\d+(?:\.\d+)?", quoted)} == timeouts, (
        f"INSTRUCTOR.md quotes 02's crash timeouts as {quoted!r}; the notebook's CRASH_TIMEOUTS are {sorted(timeouts)}")
    for suggested in re.findall(r"`CRASH_TIMEOUTS` \((\d+(?:\.\d+)?)\)", body):
        assert float(suggested) > max(timeouts), f"the longer timeout to add ({suggested}) must be above {max(timeouts)}"


def test_the_guide_counts_and_lists_each_notebooks_predictions():
    checked = 0
    for name, (_, body) in instructor_sections().items():
        line = re.search(r"^- \*\*Predictions:\*\* (\w+)(.*?)(?=\n- \*\*|\Z)", body, flags=re.MULTILINE | re.DOTALL)
        if not line:
            continue
        made = len(re.findall(r"\bpredict\(", code_of(name)))
        said = COUNT_WORDS.get(line.group(1).lower())
        # the list is the paragraph's longest parenthesis, one item per comma
        listed = max((group.split(", ") for group in parentheses(" ".join(line.group(2).split()))), key=len, default=[])
        assert said == made == len(listed), (
            f"INSTRUCTOR.md says {name} makes {line.group(1)} predictions and lists {len(listed)} ({listed}); "
            f"the notebook calls predict( {made} times")
        checked += 1
    assert checked, "INSTRUCTOR.md should count the predictions of at least one notebook"


def test_the_guide_names_the_discussion_cards():
    deck = json.loads((ROOT / "labkit" / "practice" / "cards.json").read_text(encoding="utf-8"))["cards"]
    discussion = {card["id"] for card in deck if card.get("discussion")}
    text = " ".join(INSTRUCTOR.read_text(encoding="utf-8").split())
    found = re.findall(r"(\w+) senior cards are marked \*discussion\* \(([^)]*)\)", text)
    assert len(found) == 1, "INSTRUCTOR.md should say, once: '<count> senior cards are marked *discussion* (`card-id`, ...)'"
    [(count, listed)] = found
    named = set(re.findall(r"`([a-z0-9-]+)`", listed))
    assert named == discussion, f"INSTRUCTOR.md names {sorted(named)} as discussion cards; cards.json marks {sorted(discussion)}"
    assert COUNT_WORDS.get(count.lower()) == len(discussion), f"INSTRUCTOR.md counts {count!r} discussion cards"


@pytest.mark.parametrize("plan", ["Half-day workshop", "Full-day workshop"])
def test_every_lesson_is_in_each_workshop_plan(plan):
    text = INSTRUCTOR.read_text(encoding="utf-8")
    section = text.split(f"## {plan}", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if re.match(r"\|\s*\d+:\d\d\s*\|", line)]
    assert rows, f"the {plan} plan should have a timetable"
    starts = [int(hours) * 60 + int(minutes) for hours, minutes in (row[0].strip().split(":") for row in rows)]
    assert starts == sorted(starts), f"the {plan} plan's times should only grow: {[row[0].strip() for row in rows]}"
    placed = set(LESSON.findall(" ".join(row[-1] for row in rows)))
    homework = set(LESSON.findall(" ".join(re.findall(r"^Assign[^\n]*(?:\n[^\n|#][^\n]*)*", section, flags=re.MULTILINE))))
    lessons = {name[:2] for name in course_map() if name[:2].isdigit()}
    assert lessons <= placed | homework, (
        f"the {plan} plan leaves out lessons {sorted(lessons - placed - homework)}: put them in the table or the homework")


def test_the_guide_gives_the_range_of_the_lessons_timeouts():
    """Every session timeout and TTL a lesson sets at its top lies in the range the guide gives."""
    found = re.findall(r"lessons measure timeouts of (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?) seconds",
                       " ".join(INSTRUCTOR.read_text(encoding="utf-8").split()))
    assert len(found) == 1, "INSTRUCTOR.md should give the lessons' timeouts once, in figures: 'timeouts of X to Y seconds'"
    [(low, high)] = found
    seconds = {}
    for name in course_map():
        for constant, value in re.findall(r"^([A-Z_]*(?:TIMEOUT|TTL)[A-Z_]*) = ([\d._]+|\([\d., ]+\))",
                                          code_of(name), flags=re.MULTILINE):
            values = ast.literal_eval(value)
            for number in values if isinstance(values, tuple) else (values,):
                seconds[f"{name[:2]} {constant}"] = number / 1000 if constant.endswith("_MS") else number
    assert seconds, "the lessons' timeout constants were not found"
    outside = {where: value for where, value in seconds.items() if not float(low) <= value <= float(high)}
    assert not outside, f"INSTRUCTOR.md says the lessons measure timeouts of {low} to {high} s; these lie outside: {outside}"
    assert float(low) == min(seconds.values()) and float(high) == max(seconds.values()), (
        f"the range should be the lessons' own, {min(seconds.values())} to {max(seconds.values())} s")


def test_every_count_of_the_scenario_interviews_is_the_decks():
    """README said six after scenarios.json had nine (found by the issue #33 audit)."""
    deck = json.loads((ROOT / "labkit" / "practice" / "scenarios.json").read_text(encoding="utf-8"))
    counted = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(NOTEBOOKS.glob("*.ipynb"))]:
        text = " ".join(path.read_text(encoding="utf-8").replace("\\n", " ").split())
        for count in re.findall(r"\b(\w+) (?:45-minute )?scenario interviews\b", text):
            if count.lower() in COUNT_WORDS:
                counted.setdefault(COUNT_WORDS[count.lower()], []).append(path.name)
    assert counted, "the course should say how many scenario interviews it has"
    assert set(counted) == {len(deck)}, f"scenarios.json has {len(deck)} scenarios; the course counts {counted}"
