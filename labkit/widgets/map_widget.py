"""The lock maps' widget: an anywidget whose JavaScript (maps.js, plain ES module, no build
step) draws a map's state (``LockMap.as_state()``), shows the text of a selected node or edge,
and replays the recorded steps, all in the browser with no kernel round trip. A static copy
of the same module (``static_map_html``) runs on a page with no widget manager (the book).

What can go wrong: maps.js missing beside this file (a checkout that skipped package data):
``FileNotFoundError`` names it at import.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import anywidget
import traitlets

from labkit.vocabulary import FAULT_COLOUR, GUIDE_COLOUR, STATE_COLOURS, TEXT_COLOUR

SCRIPT = Path(__file__).with_name("maps.js")
# what the browser colours: a lit edge as a holder, the failure branch as a loss
MAP_COLOURS = {"lit": STATE_COLOURS["holding"], "failure": STATE_COLOURS["lost"], "line": GUIDE_COLOUR,
               "text": TEXT_COLOUR, "selected": FAULT_COLOUR, "waiting": STATE_COLOURS["waiting"]}
PACE_MS = 500    # milliseconds per step of the replay


class MapWidget(anywidget.AnyWidget):
    """The map in the browser. ``lit`` comes back from the browser during a replay: the edge
    ids in the order they were lit."""

    _esm = SCRIPT.read_text(encoding="utf-8")
    lock_map = traitlets.Dict().tag(sync=True)
    colours = traitlets.Dict().tag(sync=True)
    pace = traitlets.Int(PACE_MS).tag(sync=True)
    lit = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        html = static_map_html(self.lock_map, self.model_id or "page")
        return dict(data, **{"text/html": html}), metadata


def static_map_html(state: dict, key: str = "page", pace: int = PACE_MS) -> str:
    """The map as HTML that needs no widget manager (a course book page): the page imports
    the same module from a data: URL and hands it a stand-in model."""
    module = base64.b64encode(SCRIPT.read_bytes()).decode("ascii")
    payload = json.dumps({"lock_map": state, "colours": MAP_COLOURS, "pace": pace, "lit": []}).replace("</", "<\\/")
    return (f'<div id="labkit-map-{key}"></div>\n'
            f'<script type="application/json" id="labkit-map-{key}-state">{payload}</script>\n'
            '<script type="module">\n'
            f'const state = JSON.parse(document.getElementById("labkit-map-{key}-state").textContent);\n'
            f'const module = await import("data:text/javascript;base64,{module}");\n'
            'const model = { get: (name) => state[name], set: (name, value) => { state[name] = value; },\n'
            '                save_changes() {}, on() {}, off() {} };\n'
            f'module.default.render({{ model, el: document.getElementById("labkit-map-{key}") }});\n'
            '</script>\n')
