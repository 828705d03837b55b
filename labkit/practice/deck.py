"""Practising with the cards: a deck that keeps score, a timed mock interview, and the
ipywidgets panel that shows one card at a time.

    deck = Deck()
    deck.show()                    # ipywidgets: question, Reveal, I got it / I missed it, score
    print(deck.as_text())          # the same cards without a widget front-end
    interview = deck.mock_interview(n=5, seconds_per_card=90)

What can fail: an unknown card id raises ``labkit.practice.cards.UnknownCard``; ``show()``
without a widget front-end prints the text instead.
"""
from __future__ import annotations

import html
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from labkit.errors import LabError
from labkit.practice.cards import CARDS, Card, UnknownCard


@dataclass(frozen=True)
class Score:
    right: int
    missed: int
    total: int

    @property
    def not_tried(self) -> int:
        return self.total - self.right - self.missed

    def __str__(self) -> str:
        return f"{self.right} right, {self.missed} missed, {self.not_tried} not tried yet (of {self.total})"


class Deck:
    """Cards to practise. A card's latest grade counts: miss it, retry it, get it right."""

    def __init__(self, cards: tuple[Card, ...] | list[Card] = CARDS, random_seed: int | None = None):
        self.cards = list(cards)
        self.grades: dict[str, bool] = {}
        self._random = random.Random(random_seed)

    def card(self, card_id: str) -> Card:
        for card in self.cards:
            if card.id == card_id:
                return card
        raise UnknownCard(f"no card {card_id!r} in this deck", hint=f"ids look like {self.cards[0].id!r}; see [c.id for c in deck.cards]")

    def draw(self, random_seed: int | None = None) -> Card:
        """A random card you have not got right yet (any card once you have them all)."""
        pool = [card for card in self.cards if not self.grades.get(card.id)] or self.cards
        chooser = self._random if random_seed is None else random.Random(random_seed)
        return chooser.choice(pool)

    def grade(self, card_id: str, correct: bool) -> Score:
        self.grades[self.card(card_id).id] = bool(correct)
        return self.score()

    def score(self) -> Score:
        right = sum(1 for card in self.cards if self.grades.get(card.id) is True)
        missed = sum(1 for card in self.cards if self.grades.get(card.id) is False)
        return Score(right, missed, len(self.cards))

    def mock_interview(self, n: int = 5, seconds_per_card: float = 90, random_seed: int | None = None,
                       clock: Callable[[], float] = time.monotonic) -> "MockInterview":
        """``n`` different cards at random, each on its own clock; raises LabError if n is too big."""
        if not 1 <= n <= len(self.cards):
            raise LabError(f"a mock interview of {n} cards needs between 1 and {len(self.cards)} cards")
        chooser = self._random if random_seed is None else random.Random(random_seed)
        return MockInterview(self, chooser.sample(self.cards, n), seconds_per_card, clock)

    def as_text(self, reveal: bool = True) -> str:
        cards = [f"{number}. {card.as_text(reveal)}" for number, card in enumerate(self.cards, 1)]
        return "\n\n".join(cards + [f"Score: {self.score()}"])

    def show(self, widgets: bool | None = None, random_seed: int | None = None):
        """The card panel (ipywidgets); without a widget front-end, prints the questions instead."""
        if widgets is None:
            widgets = widgets_available()
        if widgets:
            return CardPanel(self, random_seed)
        print(self.as_text(reveal=False))
        print("\nReveal one: print(deck.card(ID).as_text()); grade it: deck.grade(ID, True or False)")
        return None


@dataclass
class CardResult:
    card_id: str
    seconds: float
    correct: bool
    over_time: bool


@dataclass
class MockInterview:
    """Cards asked one at a time against the clock: ``next_card()``, answer aloud, ``answer(correct)``."""

    deck: Deck
    cards: list[Card]
    seconds_per_card: float
    clock: Callable[[], float] = time.monotonic
    results: list[CardResult] = field(default_factory=list)
    _asked_at: float | None = field(default=None, init=False, repr=False)

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.cards)

    @property
    def current(self) -> Card | None:
        return self.cards[len(self.results)] if self._asked_at is not None else None

    def next_card(self) -> Card | None:
        """Start the clock on the next card; None when the interview is over."""
        if self._asked_at is not None:
            raise LabError(f"card {self.current.id} is still open", hint="grade it first: interview.answer(True or False)")
        if self.done:
            return None
        self._asked_at = self.clock()
        return self.cards[len(self.results)]

    def time_left(self) -> float:
        if self._asked_at is None:
            return 0.0
        return max(0.0, self.seconds_per_card - (self.clock() - self._asked_at))

    def answer(self, correct: bool) -> CardResult:
        """Stop the clock on the current card and grade it in the deck."""
        card = self.current
        if card is None:
            raise LabError("no card is open", hint="draw one with interview.next_card()")
        seconds = self.clock() - self._asked_at
        result = CardResult(card.id, seconds, bool(correct), seconds > self.seconds_per_card)
        self.results.append(result)
        self._asked_at = None
        self.deck.grade(card.id, correct)
        return result

    def summary(self) -> str:
        right = sum(result.correct for result in self.results)
        late = [result.card_id for result in self.results if result.over_time]
        lines = [f"{right}/{len(self.results)} right, {len(self.cards) - len(self.results)} not asked"]
        lines += [f"  {r.card_id}: {'right' if r.correct else 'missed'} in {r.seconds:.0f} s" for r in self.results]
        lines.append(f"over {self.seconds_per_card:.0f} s: {', '.join(late)}" if late else "every answer in time")
        return "\n".join(lines)


class CardPanel:
    """Question, Reveal, then "I got it" / "I missed it", which grade and draw the next card."""

    def __init__(self, deck: Deck, random_seed: int | None = None):
        import ipywidgets as widgets

        self.deck = deck
        self.card = deck.draw(random_seed)
        self.question = widgets.HTML()
        self.answer = widgets.HTML()
        self.reveal_button = widgets.Button(description="Reveal", icon="eye")
        self.got_it_button = widgets.Button(description="I got it", button_style="success")
        self.missed_button = widgets.Button(description="I missed it", button_style="warning")
        self.score_label = widgets.Label()
        self.reveal_button.on_click(lambda _: self.reveal())
        self.got_it_button.on_click(lambda _: self.grade(True))
        self.missed_button.on_click(lambda _: self.grade(False))
        buttons = widgets.HBox([self.reveal_button, self.got_it_button, self.missed_button])
        self.box = widgets.VBox([self.question, buttons, self.answer, self.score_label])
        self._show(self.card)

    def reveal(self) -> None:
        self.answer.value = (f"<p>{html.escape(self.card.answer)}</p>{senior_parts_html(self.card)}"
                             f"{self.card.links_html()}")
        self.revealed = True
        self.got_it_button.disabled = self.missed_button.disabled = False

    def grade(self, correct: bool) -> None:
        if not self.revealed:       # button.click() from code ignores ``disabled``; keep the rule anyway
            return
        self.deck.grade(self.card.id, correct)
        self.card = self.deck.draw()
        self._show(self.card)

    def _show(self, card: Card) -> None:
        self.question.value = f"<b>{html.escape(card.question)}</b>"
        self.answer.value = ""
        self.revealed = False
        # Grading before revealing would make the score meaningless.
        self.got_it_button.disabled = self.missed_button.disabled = True
        self.score_label.value = f"Score: {self.deck.score()}"

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def senior_parts_html(card: Card) -> str:
    """The trade-off and the "when not to" of a card, as HTML paragraphs (empty when it has none)."""
    parts = [("Trade-off", card.trade_off), ("When not to", card.when_not)]
    return "".join(f"<p><b>{title}:</b> {html.escape(text)}</p>" for title, text in parts if text)


def render(card: Card, widgets: bool = True):
    """One card as a CardPanel, or as plain text when ``widgets=False``."""
    return CardPanel(Deck([card])) if widgets else card.as_text()


def widgets_available() -> bool:
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and "IPKernelApp" in shell.config
