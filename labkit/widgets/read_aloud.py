"""Read aloud: a control at the top of a lesson that reads its markdown, section by section,
with the browser's speech synthesis (play/pause, previous/next section, speed, the sentence
being read highlighted). The words come from the notebook file (labkit/widgets/speech.py);
the JavaScript (read_aloud.js) runs in the browser, so playing needs no kernel.

What can go wrong: a browser with no speech synthesis (the control says so and shows the
text to read by eye); Chrome cutting off a long utterance after about 15 seconds (each
sentence is its own utterance); a notebook name that is not found (``LessonNotFound``). The
control reads the file as saved: an edit shows up when the cell runs again.

    from labkit.widgets.read_aloud import read_aloud; read_aloud("07_partitions_and_client_side_expiry.ipynb")

The widget also carries a static copy of itself as HTML (the same module, run by a small
script on the page): the course book shows that where it has no kernel and no widget manager.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import anywidget
import traitlets

from labkit.errors import LessonNotFound
from labkit.widgets.speech import Section, lesson_sections

MODULE = Path(__file__).with_name("read_aloud.js")
COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


class ReadAloud(anywidget.AnyWidget):
    _esm = MODULE.read_text(encoding="utf-8")
    lesson = traitlets.Unicode("").tag(sync=True)
    sections = traitlets.List(traitlets.Dict()).tag(sync=True)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data, **{"text/html": static_html(self.lesson, self.sections, self.model_id or "page")})
        return data, metadata


def static_html(lesson: str, sections: list[dict], key: str = "page") -> str:
    """The control as a piece of HTML that needs no widget manager: the page imports the
    same module from a data: URL and hands it a stand-in model that only reads."""
    module = base64.b64encode(MODULE.read_bytes()).decode("ascii")
    state = json.dumps({"lesson": lesson, "sections": sections}).replace("</", "<\\/")
    return (f'<div id="labkit-read-aloud-{key}"></div>\n'
            f'<script type="application/json" id="labkit-read-aloud-{key}-state">{state}</script>\n'
            '<script type="module">\n'
            f'const state = JSON.parse(document.getElementById("labkit-read-aloud-{key}-state").textContent);\n'
            f'const module = await import("data:text/javascript;base64,{module}");\n'
            'const model = { get: (name) => state[name], set() {}, save_changes() {}, on() {}, off() {} };\n'
            f'module.default.render({{ model, el: document.getElementById("labkit-read-aloud-{key}") }});\n'
            '</script>\n')


def find_lesson(notebook: str | Path) -> Path:
    """``notebook`` as given (Jupyter runs a lesson in its own folder), else in the course's
    notebooks folder."""
    for candidate in (Path(notebook), COURSE_NOTEBOOKS / Path(notebook).name):
        if candidate.is_file():
            return candidate
    raise LessonNotFound(f"no notebook {str(notebook)!r} here ({Path.cwd()}) or in {COURSE_NOTEBOOKS}",
                         hint="pass the lesson's file name, e.g. read_aloud(\"00_start_here.ipynb\")")


def as_state(sections: list[Section]) -> list[dict]:
    return [{"title": section.title, "sentences": list(section.sentences)} for section in sections]


def read_aloud(notebook: str | Path) -> ReadAloud:
    """The read-aloud control for ``notebook`` (display it: make it a cell's last line)."""
    path = find_lesson(notebook)
    sections = lesson_sections(path)
    return ReadAloud(lesson=sections[0].title if sections else path.stem, sections=as_state(sections))
