"""The sandbox as a widget that runs in the browser: the TypeScript model of
web/sandbox/src/ (the same model as labkit/practice/sandbox.py, and tests/practice/test_ts_sandbox.py
holds them to the same answers), compiled into labkit/practice/web/ and shipped with the
package, so a learner needs no Node. Every click is handled by the JavaScript in the page:
no kernel round trip, and the same code runs on a static page with no kernel at all.

What can go wrong: the compiled files are missing (a checkout that skipped package data):
``SandboxFilesMissing`` says which and how to rebuild them.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import anywidget
import traitlets

from labkit.errors import LabError

WEB = Path(__file__).with_name("web")
# the order matters: each file may import only the ones before it
MODULES = ("wakeups.mjs", "sandbox.mjs", "widget.mjs")
WATCH_STYLES = ("predecessor", "parent")
_RELATIVE_IMPORT = re.compile(r'^import \{[^}]*\} from "\./([a-z_]+\.mjs)";\n', re.MULTILINE)


class SandboxFilesMissing(LabError):
    """The compiled JavaScript of the sandbox is not beside this module."""


def bundle() -> str:
    """One ES module made of the compiled files: their imports of each other are dropped,
    since the names they import are then defined above them in the same module."""
    parts = []
    for name in MODULES:
        path = WEB / name
        if not path.exists():
            raise SandboxFilesMissing(f"{path} is missing",
                                      hint="reinstall labkit, or rebuild it: scripts/maint/sandbox_js.sh")
        text = path.read_text(encoding="utf-8")
        for imported in _RELATIVE_IMPORT.findall(text):
            if imported not in MODULES[:MODULES.index(name)]:
                raise SandboxFilesMissing(f"{name} imports {imported}, which the bundle does not place before it",
                                          hint="list it in labkit.practice.sandbox_widget.MODULES")
        parts.append(_RELATIVE_IMPORT.sub("", text))
    return "\n".join(parts)


class SandboxWidget(anywidget.AnyWidget):
    """Buttons to add a client, release the lock, kill a session and switch between
    predecessor and parent watching; the children, who woke, and the wakeups per release.
    ``wakeups`` comes back from the browser after every click."""

    _esm = bundle()
    strategy = traitlets.Unicode("predecessor").tag(sync=True)
    clients = traitlets.Int(3).tag(sync=True)
    wakeups = traitlets.List(traitlets.Int()).tag(sync=True)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        html = static_sandbox_html(self.strategy, self.clients, self.model_id or "page")
        return dict(data, **{"text/html": html}), metadata


def static_sandbox_html(strategy: str, clients: int, key: str = "page") -> str:
    """The widget as HTML that needs no widget manager and no kernel (a course book page):
    the same module, inline, handed a stand-in model that keeps its state in the page."""
    state = json.dumps({"strategy": strategy, "clients": clients, "wakeups": []})
    return (f'<div id="labkit-sandbox-{key}"></div>\n'
            '<script type="module">\n'
            f'{bundle()}\n'
            f'const state = {state};\n'
            'const model = { get: (name) => state[name], set: (name, value) => { state[name] = value; },\n'
            '                save_changes() {}, on() {}, off() {} };\n'
            f'render({{ model, el: document.getElementById("labkit-sandbox-{key}") }});\n'
            '</script>\n')


def sandbox_widget(strategy: str = "predecessor", clients: int = 3) -> SandboxWidget:
    """A SandboxWidget that starts with ``clients`` clients watching their predecessor or
    the parent. Raises LabError for another watch style or a count outside 0..50."""
    if strategy not in WATCH_STYLES:
        raise LabError(f"the widget shows watch styles {' and '.join(WATCH_STYLES)}, not {strategy!r}",
                       hint="try the others with labkit.practice.sandbox.Sandbox or evaluate()")
    if not 0 <= clients <= 50:
        raise LabError(f"start with 0 to 50 clients, not {clients}", hint="add more with the widget's button")
    return SandboxWidget(strategy=strategy, clients=clients)
