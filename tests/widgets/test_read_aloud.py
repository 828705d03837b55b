"""Read aloud, without a browser: the markdown a speech engine is handed is plain words
(no markup, no code, no hidden answers), a notebook splits into sections at its headings,
every lesson has the control as its second cell, and the book shows the control's static
copy. The browser half is tests/widgets/test_read_aloud_browser.py."""
import json
import re

import pytest

from labkit.book import NOTEBOOKS
from labkit.book.theme import Page, render_node
from labkit.errors import LessonNotFound
from labkit.widgets.read_aloud import read_aloud
from labkit.widgets.speech import lesson_sections, speakable, split_sections

pytestmark = pytest.mark.no_servers
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) + [NOTEBOOKS / "lab_panel.ipynb", NOTEBOOKS / "sandbox.ipynb"]
MARKUP = re.compile(r"[`*#|<>\[\]$\\]|\]\(|https?://")


def test_links_code_and_emphasis_are_read_as_words():
    assert speakable("Read [the docs](https://example.org/x) and **run** `lab.zookeeper.client()` *now*") == \
        "Read the docs and run lab.zookeeper.client now."
    assert speakable("`on_event(kind)` and `<lease>`") == "on event(kind) and lease."
    assert speakable("`UPDATE … WHERE token = $token` and `tcp_keepalives_*`") == \
        "UPDATE... WHERE token = token and tcp keepalives settings."
    assert speakable("See <https://redis.io/docs> or https://etcd.io for more") == "See or for more."
    # a comparison in a sentence is said, not dropped or read as a tag
    assert speakable("Keep renewDeadline < leaseDuration and P >= 2 s.") == \
        "Keep renewDeadline less than leaseDuration and P at least 2 s."
    assert speakable("In etcd issue #15247 a stale leader revoked leases.") == \
        "In etcd issue number 15247 a stale leader revoked leases."


def test_headings_lists_and_paragraphs_become_sentences():
    text = speakable("## The idea\nA lock is\nwrapped over lines\n\n- first item\n  goes on\n- second item\n\n> quoted")
    assert text == "The idea. A lock is wrapped over lines. first item goes on. second item. quoted."


def test_code_blocks_math_and_hidden_answers_are_skipped():
    markdown = ("Before.\n\n```python\nimport labkit\nlabkit.up()\n```\n\n$$\\frac{a}{b}$$\n\n"
                "Waiters: $n \\le 3$.\n\n"
                "<details><summary>Why does it wait?</summary>\n\nBecause of the watch.\n</details>")
    text = speakable(markdown)
    assert text == "Before. Waiters: n at most 3. Why does it wait?"


def test_a_table_is_read_row_by_row_without_its_rule():
    table = "| system | round trips |\n|---|---|\n| Redis | `SET NX PX`: 1 |\n| etcd | 2 → 4 |"
    assert speakable(table) == "system, round trips. Redis, SET NX PX: 1. etcd, 2 to 4."


def test_sections_split_at_headings_across_cells():
    sections = split_sections(["# Title\nIntro text.", "More intro.\n## Part one\nOne. Two!",
                               "### Part two\n```\n# not a heading\n```\nEnd"])
    assert [section.title for section in sections] == ["Title", "Part one", "Part two"]
    assert sections[0].sentences == ("Title.", "Intro text.", "More intro.")
    assert sections[1].sentences == ("Part one.", "One.", "Two!")
    assert sections[2].text == "Part two. End."
    assert split_sections(["No heading here."])[0].title == "Introduction"


@pytest.mark.parametrize("notebook", LESSONS, ids=lambda path: path.stem)
def test_every_lesson_reads_its_words_and_none_of_its_code(notebook):
    cells = json.loads(notebook.read_text())["cells"]
    sections = lesson_sections(notebook)
    headings, in_fence = [], False
    for cell in cells:
        for line in "".join(cell["source"]).splitlines() if cell["cell_type"] == "markdown" else []:
            in_fence ^= line.lstrip().startswith("```")
            headings += [line] if line.startswith("#") and not in_fence else []
    assert len(sections) == len(headings) >= 3
    spoken = " ".join(section.text for section in sections)
    assert not MARKUP.search(spoken), MARKUP.search(spoken)
    code_lines = {line.strip() for cell in cells if cell["cell_type"] == "code"
                  for line in "".join(cell["source"]).splitlines() if len(line.strip()) > 25}
    assert not [line for line in code_lines if line in spoken]
    # the control sits right after the title, on this very file: through the lesson's handle
    # (labkit.course), or in the old shape while a notebook waits for it (test_course_layer's UNCONVERTED)
    second = cells[1]
    key = notebook.stem[:2] if notebook.stem[:2].isdigit() else notebook.stem
    assert second["cell_type"] == "code" and "".join(second["source"]) in (
        f'import labkit\nlesson = labkit.lesson("{key}")   # this lesson\'s lab, experiments, predictions, exercise '
        'and cards\nlesson.read_aloud()',
        f'from labkit.widgets.read_aloud import read_aloud; read_aloud("{notebook.name}")')


def test_an_unknown_lesson_is_one_clear_error():
    with pytest.raises(LessonNotFound, match="no notebook 'nope.ipynb'"):
        read_aloud("nope.ipynb")


def test_the_book_shows_the_static_control_not_the_widget(tmp_path):
    """The output as MyST hands it to the book's theme (each mime type's content in a dict)."""
    widget = read_aloud("00_start_here.ipynb")
    data, _ = widget._repr_mimebundle_()
    output = {"type": "output", "jupyter_data": {"output_type": "display_data", "metadata": {}, "data": {
        mime: {"content": value if isinstance(value, str) else json.dumps(value), "content_type": mime}
        for mime, value in data.items()}}}
    body = render_node(output, Page(tmp_path, "00"))
    assert f'id="labkit-read-aloud-{widget.model_id}"' in body
    assert "needs a running kernel" not in body       # the control itself, not the widget's placeholder
    widget.close()
