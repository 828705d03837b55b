"""Senior cards: each has a model answer, a trade-off, a "when not to", and proving links that exist."""
import pytest

from labkit.practice.cards import CARDS, SECTIONS
from labkit.practice.deck import CardPanel, Deck

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

SENIOR = [card for card in CARDS if card.source == "senior"]

# One card per topic of issue #14, found by a phrase of its question or answer.
TOPICS = ["leader election", "antirez", "jeopardy", "efficiency lock", "dies halfway", "for update",
          "stonith", "delete the lock key", "session or lease has expired", "read/write", "reentrant",
          "lock a then lock b", "interprocesssemaphorev2",
          "one hot lock", "producer epoch"]    # issue #27: capacity, epoch fencing without locks


def test_about_fifteen_senior_cards_each_complete():
    assert 13 <= len(SENIOR) <= 20
    for card in SENIOR:
        assert card.answer and card.trade_off and card.when_not, card.id
        assert all(heading in SECTIONS[notebook] for notebook, heading in card.proves), card.id


@pytest.mark.parametrize("phrase", TOPICS)
def test_every_senior_topic_has_a_card(phrase):
    assert any(phrase in (card.question + " " + card.answer).lower() for card in SENIOR), phrase


def test_the_text_and_the_widget_show_the_trade_off_and_when_not():
    card = SENIOR[0]
    text = card.as_text()
    assert f"Trade-off: {card.trade_off}" in text and f"When not to: {card.when_not}" in text
    assert "Trade-off" not in card.as_text(reveal=False)
    panel = CardPanel(Deck([card]))
    panel.reveal()
    assert "Trade-off:" in panel.answer.value and "When not to:" in panel.answer.value


def test_older_cards_show_no_empty_trade_off():
    seed_card = next(card for card in CARDS if card.source == "seed-qa")
    assert "Trade-off" not in seed_card.as_text()
