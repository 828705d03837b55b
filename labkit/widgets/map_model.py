"""A lock map as plain Python data: nodes, edges, and the recorded steps each edge carried in a
real run, with its Mermaid text and its widget. labkit/widgets/maps.py builds maps from a History and shows
them; tests and notebooks read this view without a browser.

What can go wrong: an edge that names a node the map does not have (``ValueError`` when the map
is made: a bug in the builder, not in the run).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from labkit.widgets.map_widget import MAP_COLOURS, PACE_MS, MapWidget

KINDS_OF_MAP = ("architecture", "sequence", "flow")


@dataclass(frozen=True)
class MapStep:
    """One recorded use of an edge: ``number`` (the lesson's step for the ZooKeeper sequence,
    else the position in the run), ``time`` (wall-clock seconds of the event, as the History
    holds it), the client and event kind it came from, and ``facts`` (the event's detail)."""

    number: int
    time: float
    client: str
    event: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MapNode:
    id: str
    label: str
    why: str
    column: int = 0
    row: int = 0
    shape: str = "box"          # box, decision, failure, store


@dataclass(frozen=True)
class MapEdge:
    id: str
    source: str
    target: str
    label: str
    protocol: str
    direction: str
    effect: str
    consequence: str
    steps: tuple[MapStep, ...] = ()
    failure: bool = False       # the branch where something went wrong: drawn dotted and red

    @property
    def numbers(self) -> list[int]:
        return [step.number for step in self.steps]


@dataclass(frozen=True)
class LockMap:
    """``kind`` is one of KINDS_OF_MAP. ``replay()`` lists (edge id, step) in the order the run
    recorded them: the order the widget's replay lights the edges."""

    kind: str
    title: str
    nodes: tuple[MapNode, ...]
    edges: tuple[MapEdge, ...]

    def __post_init__(self):
        if self.kind not in KINDS_OF_MAP:
            raise ValueError(f"a map is one of {KINDS_OF_MAP}, not {self.kind!r}")
        known = {node.id for node in self.nodes}
        strangers = [edge.id for edge in self.edges if not {edge.source, edge.target} <= known]
        if strangers:
            raise ValueError(f"edges {strangers} name nodes this map does not have ({sorted(known)})")

    def node(self, node_id: str) -> MapNode:
        return next(node for node in self.nodes if node.id == node_id)

    def edge(self, edge_id: str) -> MapEdge:
        return next(edge for edge in self.edges if edge.id == edge_id)

    def replay(self) -> list[tuple[str, MapStep]]:
        """Every recorded step, (edge id, step), by time; steps of one event by number."""
        return sorted(((edge.id, step) for edge in self.edges for step in edge.steps),
                      key=lambda pair: (pair[1].time, pair[1].number))

    def started(self) -> float | None:
        replay = self.replay()
        return replay[0][1].time if replay else None

    def rows(self) -> list[dict[str, Any]]:
        """One row per edge (for a table): label, ends, steps and their seconds from the first."""
        first = self.started() or 0.0
        return [{"edge": edge.id, "from": self.node(edge.source).label, "to": self.node(edge.target).label,
                 "label": edge.label, "steps": ", ".join(map(str, edge.numbers)) or "-",
                 "at (s)": ", ".join(f"{step.time - first:.3f}" for step in edge.steps) or "not in this run"}
                for edge in self.edges]

    def widget(self, pace: int = PACE_MS) -> MapWidget:
        """The clickable map; ``pace``: milliseconds per replayed step."""
        return MapWidget(lock_map=self.as_state(), colours=MAP_COLOURS, pace=pace)

    def _repr_mimebundle_(self, include=None, exclude=None):
        """A cell's last line: the widget, with its static copy and its Mermaid text beside it
        (``text/vnd.mermaid``: the course book draws that as a diagram)."""
        bundle = self.widget()._repr_mimebundle_(include=include, exclude=exclude)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return dict(data, **{"text/vnd.mermaid": self.to_mermaid()}), metadata

    def to_mermaid(self) -> str:
        return sequence_mermaid(self) if self.kind == "sequence" else flowchart_mermaid(self)

    def as_state(self) -> dict[str, Any]:
        """What the browser draws (labkit/widgets/maps.js): everything, with times in seconds
        from the first recorded step."""
        first = self.started() or 0.0
        return {"kind": self.kind, "title": self.title,
                "nodes": [dict(id=node.id, label=node.label, why=node.why, column=node.column, row=node.row,
                               shape=node.shape) for node in self.nodes],
                "edges": [dict(id=edge.id, source=edge.source, target=edge.target, label=edge.label,
                               protocol=edge.protocol, direction=edge.direction, effect=edge.effect,
                               consequence=edge.consequence, failure=edge.failure,
                               steps=[{"number": step.number, "at": round(step.time - first, 3),
                                       "client": step.client} for step in edge.steps]) for edge in self.edges],
                "replay": [{"edge": edge_id, "number": step.number, "at": round(step.time - first, 3)}
                           for edge_id, step in self.replay()]}


MERMAID_CODES = {"#": "#35;", '"': "#quot;", ";": "#59;", "<": "#lt;", ">": "#gt;"}


def mermaid_text(text: str) -> str:
    """``text`` safe inside a quoted Mermaid label: Mermaid's entity codes for the characters
    its parser reads as syntax."""
    return re.sub(r'[#";<>]', lambda match: MERMAID_CODES[match.group()], text)


def _steps_text(edge: MapEdge, first: float) -> str:
    return ", ".join(f"{step.number} at +{step.time - first:.3f} s" for step in edge.steps)


def flowchart_mermaid(lock_map: LockMap) -> str:
    shapes = {"box": '["{}"]', "decision": '{{"{}"}}', "failure": '(["{}"])', "store": '[("{}")]'}
    first = lock_map.started() or 0.0
    lines = ["flowchart LR", f"    %% {mermaid_text(lock_map.title)}"]
    for node in lock_map.nodes:
        lines.append(f"    {node.id}" + shapes[node.shape].format(mermaid_text(node.label)))
    for edge in lock_map.edges:
        label = edge.label + (f" ({_steps_text(edge, first)})" if edge.steps else "")
        arrow = "-.->" if edge.failure else "-->"
        lines.append(f'    {edge.source} {arrow}|"{mermaid_text(label)}"| {edge.target}')
    return "\n".join(lines) + "\n"


def sequence_mermaid(lock_map: LockMap) -> str:
    first = lock_map.started() or 0.0
    lines = ["sequenceDiagram", f"    title {mermaid_text(lock_map.title)}"]
    for node in lock_map.nodes:
        lines.append(f"    participant {node.id} as {mermaid_text(node.label)}")
    for edge_id, step in lock_map.replay():
        edge = lock_map.edge(edge_id)
        arrow = "--)" if edge.failure else "->>"
        lines.append(f"    {edge.source}{arrow}{edge.target}: "
                     f"{step.number}. {mermaid_text(edge.label)} (+{step.time - first:.3f} s)")
    return "\n".join(lines) + "\n"
