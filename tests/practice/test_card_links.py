"""Every card's proof link points at a section that proves something: the heading exists in
its notebook and the section's code asserts what the servers did. A card that no experiment
of the course shows is marked discussion and has no proof link at all. Pure logic: the
notebooks are read, not run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.practice.cards import CARDS, Card
from labkit.practice.links import asserts_per_section

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PROOF_LINKS = [(card.id, notebook, heading) for card in CARDS for notebook, heading in card.proves]


@pytest.fixture(scope="module")
def sections():
    return {path.name: asserts_per_section(path) for path in NOTEBOOKS.glob("*.ipynb")}


@pytest.mark.parametrize("card_id, notebook, heading", PROOF_LINKS, ids=[f"{c}:{h}" for c, _, h in PROOF_LINKS])
def test_every_proof_link_is_a_section_with_an_assert(sections, card_id, notebook, heading):
    assert heading in sections[notebook], f"{card_id}: {notebook} has no heading {heading!r}"
    assert sections[notebook][heading] > 0, (
        f"{card_id} says it is proved in {notebook} › {heading}, but that section asserts nothing: link a section "
        "whose experiment shows the answer, or mark the card discussion (see_also=...)")


def test_discussion_cards_have_no_proof_link_and_say_so():
    discussion = [card for card in CARDS if card.discussion]
    assert {card.id for card in discussion} >= {
        "senior-read-write-lock", "senior-reentrancy", "senior-lock-ordering", "senior-split-brain-stonith"}
    for card in discussion:
        assert card.proves == () and "proved in" not in card.as_text() and "Discussion:" in card.as_text()
        assert "Proved in" not in card.links_html() and "Discussion:" in card.links_html()
    with pytest.raises(ValueError, match="marked discussion but has proof links"):
        Card("x", "q?", "a.", (("04_pauses_and_fencing.ipynb", "Where fencing has edges"),), discussion=True)


def test_a_section_counts_the_asserts_of_its_subsections_only_up_to_the_next_heading(tmp_path):
    def markdown(text):
        return {"cell_type": "markdown", "metadata": {}, "source": text}

    def code(text):
        return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}

    cells = [markdown("## A\nintro"), code("x = 1"), markdown("### A.1"), code("assert x == 1\nassert x"),
             markdown("## B"), code("print('no assert here')  # assert in a comment does not count"),
             markdown("## C"), code("    assert True")]
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": cells}))
    assert asserts_per_section(notebook) == {"A": 2, "A.1": 2, "B": 0, "C": 1}
