"""Interview practice cards: question, answer, and the notebook section that proves it.

Every card links to a section of a course notebook whose experiment shows the answer on
real servers (or on the sandbox), with an ``assert`` that checks it. The headings are fixed
in ``SECTIONS``; notebook authors use exactly those texts as markdown headings, so a link
never points at nothing. A few senior cards are marked ``discussion``: no experiment in the
course shows their answer (a Curator semaphore, Postgres locks, STONITH ...), so they have
no proof link, only ``see_also`` sections on related ground, which prove nothing about them.

    CARDS                          # every card; labkit.practice.deck.Deck shows them

The cards and the headings live in ``cards.json`` next to this module (data, like
``scenarios.json``: an instructor can add a card without touching code); this module checks
each card's links as it loads it.

What can fail: an unknown card id raises ``UnknownCard``; a card whose link names a
notebook or heading missing from ``SECTIONS`` raises ValueError when it is created.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabError

CARDS_FILE = Path(__file__).with_name("cards.json")
_DATA = json.loads(CARDS_FILE.read_text(encoding="utf-8"))

# Section headings, per notebook, that cards link to. Use them verbatim as headings.
SECTIONS: dict[str, tuple[str, ...]] = {notebook: tuple(headings) for notebook, headings in _DATA["sections"].items()}


DISCUSSION = ("Discussion: no experiment in this course shows this answer; it rests on the designs and "
              "documentation it names.")


class UnknownCard(LabError):
    """A card id that is not in the deck."""


def anchor(heading: str) -> str:
    """The fragment JupyterLab gives a markdown heading: spaces become dashes."""
    return heading.replace(" ", "-")


@dataclass(frozen=True)
class Card:
    """One practice question. ``proves`` lists (notebook file, section heading) pairs whose
    experiments show the answer; a ``discussion`` card has none, and ``see_also`` pairs that
    are related reading, not proof."""

    id: str
    question: str
    answer: str
    proves: tuple[tuple[str, str], ...]
    claims: tuple[str, ...] = ()
    source: str = "course"          # "seed-qa", "seed-pitfall", "course" or "senior"
    trade_off: str = ""             # what the answer costs: a senior interviewer asks for it
    when_not: str = ""              # when this answer is the wrong tool
    discussion: bool = False        # no section of the course proves the answer
    see_also: tuple[tuple[str, str], ...] = ()   # related sections of a discussion card: not proof

    def __post_init__(self):
        if self.discussion and self.proves:
            raise ValueError(f"card {self.id} is marked discussion but has proof links; drop one or the other")
        if not self.proves and not self.discussion:
            raise ValueError(f"card {self.id} links to no notebook section; add one from SECTIONS, or mark it "
                             "discussion=True if no experiment of the course shows its answer")
        for notebook, heading in self.proves + self.see_also:
            if heading not in SECTIONS.get(notebook, ()):
                raise ValueError(f"card {self.id} links to {notebook} § {heading!r}, which is not in SECTIONS; "
                                 "add the heading there (and to the notebook) or pick an existing one")

    def links(self) -> list[str]:
        """Markdown links to the proving sections (for a discussion card: to its see-also
        sections), relative to the notebooks folder."""
        return [f"[{notebook} › {heading}]({notebook}#{anchor(heading)})"
                for notebook, heading in self.proves or self.see_also]

    def links_html(self) -> str:
        """The answer's footer in the widgets: "Proved in" and the links, or for a discussion
        card, that nothing proves it and what is related."""
        def items(pairs):
            return "".join(f'<li><a href="{html.escape(notebook)}#{html.escape(anchor(heading))}">'
                           f"{html.escape(notebook)} › {html.escape(heading)}</a></li>" for notebook, heading in pairs)
        if not self.discussion:
            return f"<p>Proved in:</p><ul>{items(self.proves)}</ul>"
        related = f"<p>Related sections (they do not prove this answer):</p><ul>{items(self.see_also)}</ul>" \
            if self.see_also else ""
        return f"<p>{html.escape(DISCUSSION)}</p>{related}"

    def as_text(self, reveal: bool = True) -> str:
        lines = [f"[{self.id}] {self.question}"]
        lines.append(f"Answer: {self.answer}" if reveal else "Answer: (think first, then reveal)")
        if reveal and self.trade_off:
            lines.append(f"Trade-off: {self.trade_off}")
        if reveal and self.when_not:
            lines.append(f"When not to: {self.when_not}")
        lines += [f"  proved in {notebook} › {heading}" for notebook, heading in self.proves]
        if self.discussion:
            lines.append(f"  {DISCUSSION}")
            lines += [f"  related (not proof): {notebook} › {heading}" for notebook, heading in self.see_also]
        if self.claims:
            lines.append(f"  claims: {', '.join(self.claims)}")
        return "\n".join(lines)


def card_from(entry: dict) -> Card:
    """A Card from one entry of cards.json (lists become tuples; a missing field is its default).
    Raises ValueError for a card whose links name no heading of SECTIONS (``Card``)."""
    fields = dict(entry)
    for key in ("proves", "see_also"):
        fields[key] = tuple(tuple(pair) for pair in entry.get(key, ()))
    fields["claims"] = tuple(entry.get("claims", ()))
    return Card(**fields)


CARDS: tuple[Card, ...] = tuple(card_from(entry) for entry in _DATA["cards"])
