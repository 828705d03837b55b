"""Interview cards: content coverage, links, grading, mock timing, text and widget rendering."""
import json
from pathlib import Path

import pytest

from labkit.practice.cards import anchor, Card, CARDS, SECTIONS, UnknownCard
from labkit.practice.deck import Deck, render
from labkit.errors import LabError

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

NOTEBOOKS = {"00_start_here.ipynb", "01_redis_vs_consensus.ipynb", "02_zookeeper_lock_recipe.ipynb",
             "03_etcd_leases_and_mutex.ipynb", "04_pauses_and_fencing.ipynb",
             "05_coordinator_crash_and_quorum.ipynb", "06_observing_lock_health.ipynb",
             "07_partitions_and_client_side_expiry.ipynb", "08_redlock_and_clocks.ipynb",
             "09_semaphores_and_elections.ipynb", "10_fencing_a_database.ipynb", "11_interview_practice.ipynb",
             "sandbox.ipynb"}

# Key phrases of each seed question (Q&A, then Pitfalls), checked case-insensitively.
SEED_QUESTIONS = [
    ("seed-qa", ("ephemeral",)), ("seed-qa", ("sequential",)), ("seed-qa", ("predecessor", "parent")),
    ("seed-qa", ("curator", "interprocessmutex")), ("seed-qa", ("etcd", "lease")),
    ("seed-qa", ("session timeout", "gc pause")), ("seed-qa", ("zookeeper or etcd", "new system")),
    ("seed-qa", ("across datacenters",)), ("seed-qa", ("unlock fails", "session")),
    ("seed-qa", ("observe", "health")), ("seed-qa", ("linearizable",)), ("seed-qa", ("one-liner", "redis")),
    ("seed-pitfall", ("ten waiters", "parent", "how many")),
    ("seed-pitfall", ("predecessor", "how many wake")),
    ("seed-pitfall", ("gc pause", "session timeout", "before writing")),
]


@pytest.mark.parametrize("source, phrases", SEED_QUESTIONS)
def test_every_seed_question_has_exactly_one_card(source, phrases):
    matches = [card.id for card in CARDS
               if card.source == source and all(phrase in card.question.lower() for phrase in phrases)]
    assert len(matches) == 1, f"{phrases}: {matches}"


def test_card_counts_and_unique_ids():
    sources = [card.source for card in CARDS]
    assert (sources.count("seed-qa"), sources.count("seed-pitfall")) == (12, 3)
    assert sources.count("course") >= 6
    assert len({card.id for card in CARDS}) == len(CARDS)


def test_every_card_links_to_a_fixed_notebook_section_and_a_claim():
    assert set(SECTIONS) == NOTEBOOKS
    for card in CARDS:
        assert bool(card.proves) != card.discussion, card.id   # proof links, or marked discussion
        for notebook, heading in card.proves + card.see_also:
            assert notebook in NOTEBOOKS and heading in SECTIONS[notebook], (card.id, notebook, heading)
        assert card.claims and all(claim[0] == "C" and 1 <= int(claim[1:]) <= 33 for claim in card.claims), card.id


def test_cards_cover_the_claims_the_course_teaches():
    covered = {claim for card in CARDS for claim in card.claims}
    assert {f"C{number}" for number in range(1, 27)} <= covered


def test_sandbox_headings_exist_in_the_sandbox_notebook():
    notebook = json.loads((Path(__file__).parents[2] / "notebooks" / "sandbox.ipynb").read_text())
    markdown = "".join("".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    for heading in SECTIONS["sandbox.ipynb"]:
        assert f"# {heading}\n" in markdown, heading


def test_redlock_headings_exist_in_notebook_08():
    notebook = json.loads((Path(__file__).parents[2] / "notebooks" / "08_redlock_and_clocks.ipynb").read_text())
    markdown = "".join("".join(cell["source"]) + "\n" for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    for heading in SECTIONS["08_redlock_and_clocks.ipynb"]:
        assert f"\n## {heading}\n" in "\n" + markdown, heading


def test_partitions_headings_exist_in_notebook_07():
    notebook = json.loads((Path(__file__).parents[2] / "notebooks" /
                           "07_partitions_and_client_side_expiry.ipynb").read_text())
    markdown = "".join("".join(cell["source"]) + "\n" for cell in notebook["cells"] if cell["cell_type"] == "markdown")
    for heading in SECTIONS["07_partitions_and_client_side_expiry.ipynb"]:
        assert f"\n## {heading}\n" in "\n" + markdown, heading


def test_a_card_with_a_broken_link_is_refused():
    with pytest.raises(ValueError, match="not in SECTIONS"):
        Card("x", "q?", "a.", (("02_zookeeper_lock_recipe.ipynb", "No such heading"),))
    with pytest.raises(ValueError, match="links to no notebook section"):
        Card("x", "q?", "a.", ())


def test_links_and_anchor():
    card = Deck().card("qa-predecessor")
    assert card.links()[0] == ("[02_zookeeper_lock_recipe.ipynb › Herd or predecessor: counting wakeups]"
                               "(02_zookeeper_lock_recipe.ipynb#Herd-or-predecessor:-counting-wakeups)")
    assert anchor("Edit the waiter's logic") == "Edit-the-waiter's-logic"


def test_grading_keeps_the_latest_grade_per_card():
    deck = Deck()
    deck.grade("qa-ephemeral", False)
    deck.grade("qa-sequential", True)
    assert (deck.score().right, deck.score().missed, deck.score().not_tried) == (1, 1, len(CARDS) - 2)
    score = deck.grade("qa-ephemeral", True)
    assert (score.right, score.missed) == (2, 0)
    assert str(score) == f"2 right, 0 missed, {len(CARDS) - 2} not tried yet (of {len(CARDS)})"
    with pytest.raises(UnknownCard, match="no card 'nope'"):
        deck.grade("nope", True)


def test_draw_is_repeatable_and_skips_cards_already_right():
    deck = Deck()
    assert deck.draw(random_seed=7) == Deck().draw(random_seed=7)
    small = Deck(CARDS[:3])
    small.grade(CARDS[0].id, True)
    small.grade(CARDS[1].id, True)
    assert {small.draw(random_seed=seed).id for seed in range(20)} == {CARDS[2].id}
    small.grade(CARDS[2].id, True)          # all right: any card may come back
    assert len({small.draw(random_seed=seed).id for seed in range(20)}) == 3


def test_mock_interview_times_each_card():
    now = [1000.0]
    deck = Deck()
    interview = deck.mock_interview(n=3, seconds_per_card=90, random_seed=1, clock=lambda: now[0])
    assert len({card.id for card in interview.cards}) == 3
    first = interview.next_card()
    now[0] += 30
    assert interview.time_left() == 60
    with pytest.raises(LabError, match="still open"):
        interview.next_card()
    assert interview.answer(True).seconds == 30
    interview.next_card()
    now[0] += 120
    late = interview.answer(False)
    assert late.over_time and late.seconds == 120
    interview.next_card()
    now[0] += 5
    interview.answer(True)
    assert interview.done and interview.next_card() is None
    assert deck.grades[first.id] is True and deck.score().right == 2
    assert "2/3 right" in interview.summary() and f"over 90 s: {late.card_id}" in interview.summary()
    with pytest.raises(LabError, match="no card is open"):
        interview.answer(True)
    with pytest.raises(LabError, match="between 1 and"):
        deck.mock_interview(n=len(CARDS) + 1)


def test_plain_text_fallback(capsys):
    card = Deck().card("pitfall-parent-watch")
    text = render(card, widgets=False)
    assert text.startswith("[pitfall-parent-watch] Ten waiters") and "Answer: All ten." in text
    assert "proved in sandbox.ipynb › Predict: ten waiters watch the parent" in text
    assert "All ten" not in card.as_text(reveal=False)
    deck = Deck(CARDS[:2])
    deck.grade(CARDS[0].id, True)
    assert deck.as_text().endswith("Score: 1 right, 0 missed, 1 not tried yet (of 2)")
    assert deck.show(widgets=False) is None
    printed = capsys.readouterr().out
    assert CARDS[1].question in printed and CARDS[1].answer not in printed


def test_widget_reveal_then_grade():
    deck = Deck(random_seed=3)
    panel = deck.show(widgets=True, random_seed=3)
    card = panel.card
    assert card.question in panel.question.value.replace("&#x27;", "'")
    assert panel.answer.value == "" and panel.got_it_button.disabled
    panel.got_it_button.click()                   # ignored until the answer is revealed
    assert deck.score().right == 0
    panel.reveal_button.click()
    assert card.answer.split()[0] in panel.answer.value and not panel.got_it_button.disabled
    assert anchor(card.proves[0][1]) in panel.answer.value
    panel.missed_button.click()
    assert deck.grades == {card.id: False}
    assert panel.score_label.value == f"Score: 0 right, 1 missed, {len(CARDS) - 1} not tried yet (of {len(CARDS)})"
    assert panel.answer.value == "" and panel.got_it_button.disabled
    assert "application/vnd.jupyter.widget-view+json" in panel._repr_mimebundle_()


def test_render_one_card_as_widget():
    card = CARDS[0]
    panel = render(card)
    panel.reveal_button.click()
    panel.got_it_button.click()
    assert panel.deck.score().right == 1 and panel.card == card     # a one-card deck draws it again
