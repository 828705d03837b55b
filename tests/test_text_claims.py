"""Claims the course must never teach, found by a text scan (issue #23).

Three sentences have been written again and again, and each teaches the unsafe direction:

- the ZooKeeper *sequence number* as the fencing token (the token is the lock node's czxid, or
  etcd's create revision: the sequence is a counter of the parent node and restarts at 0 when the
  parent is re-created; notebook 04 shows it);
- a client-side deadline counted from the *last reply* (count from the send time of the newest
  request whose answer proves the session alive: the reply can come back a whole network delay
  late);
- a deadline anchored on SUSPENDED ("once SUSPENDED has lasted the session timeout minus a
  margin"): kazoo reports SUSPENDED only after about two thirds of a timeout of silence, so that
  rule fires about 1.5 timeouts after the last contact, after the server may have expired the
  session.

The scan reads every place a learner reads: notebook cells (markdown and code), the cards and
scenarios, docs/*.md, README.md, and the strings and comments of labkit's Python files. A
passage that names the wrong idea in order to refute it is allowed by a phrase of its own in
ALLOWED, never by file; every allowed phrase must still be found, once, so the list cannot rot.

The right rule is stated once, in notebook 04 (RULE below); every other passage that names "the
deadline rule" either says it in the same words or points to notebook 04.
"""
import json
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WINDOW = 80   # characters on either side of a match

# (name, first pattern, second pattern): the text fails where both occur within WINDOW characters.
RULES = [
    # a whole word, not an identifier: ``"sequence"`` keys, ``sequence_restart``, ids like course-sequence-token
    ("sequence as fencing token", r"(?<![\"'`_-])\bsequences?\b(?![\"'`_-])", r"token|fenc"),
    ("deadline from the last reply", r"last (?:reply|replies|answer)", r"deadline"),
    ("deadline anchored on SUSPENDED", r"suspended", r"minus a margin"),
]

# Negative examples: passages that name the wrong idea to teach why it is wrong. Each phrase is
# distinctive enough to mark one passage; a match is allowed when its window overlaps the phrase.
ALLOWED = {
    "sequence as fencing token": [
        "the 10-digit counter the server appends to a sequential node's name",   # 00's glossary
        "a ZooKeeper sequence that starts again at 0",                             # 04's goals
        "orders the queue but is not a safe token",                                # 04, fencing tokens
        "Fenced by the sequence, a store that saw the first round",                # 04, the restart shown
        "keeps the sequence only to order the queue",
        "Fencing with the ZooKeeper sequence number",                              # 04's pitfall
        "`czxid`, not the sequence",                                               # 04's recap
        "the sequence numbers start again at 0, while ``czxid``",                  # lessons/fencing_edges.py
        "its node's sequence number and its czxid (the token)",
        "czxid rather than its sequence number",                                   # card course-sequence-token
        "The sequence number is a counter of the parent node",
        "a ZooKeeper sequence restarts if the lock's parent",                      # card on fencing's edges
        "the node's sequence number is a queue position, not a token",             # INSTRUCTOR.md, 00
        "the sequence restarts at 0 under the re-created parent while czxid",      # INSTRUCTOR.md, 04
        "Fences with a timestamp or the ZooKeeper sequence number",                # scenarios.json, a red flag
    ],
    "deadline from the last reply": [
    ],
    "deadline anchored on SUSPENDED": [
        'a rule like "give up once SUSPENDED has lasted',                          # 04, the deadline rule
    ],
}

# The one deadline rule, in the words notebook 04 states it.
RULE = ("A holder gives up at the send time of the newest request whose answer proves the session alive, "
        "plus the session timeout (or lease TTL) minus a margin.")
RULE_CORE = "the send time of the newest request whose answer proves the session alive"



def _flat(text: str) -> str:
    """Whitespace (line breaks, indentation) and markdown quote marks collapsed, so that a phrase split
    across lines matches."""
    return re.sub(r"\s+", " ", re.sub(r"(?m)^[ \t]*> ?", "", text))


def _python_prose(path: Path) -> str:
    """The strings and comments of a Python file, in order: docstrings, messages, card texts."""
    pieces = []
    with path.open(encoding="utf-8") as source:
        for token in tokenize.generate_tokens(source.readline):
            if token.type in (tokenize.STRING, tokenize.COMMENT):
                pieces.append(token.string)
            elif getattr(tokenize, "FSTRING_MIDDLE", None) == token.type:
                pieces.append(token.string)
    return " ".join(pieces)


def passages() -> list[tuple[str, str]]:
    """(where, text) for every place the scan reads."""
    found = []
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            found.append((f"{notebook.relative_to(ROOT)}[{index}]", _flat("".join(cell["source"]))))
    for document in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found.append((str(document.relative_to(ROOT)), _flat(document.read_text(encoding="utf-8"))))
    for data in sorted((ROOT / "labkit").rglob("*.json")):
        found.append((str(data.relative_to(ROOT)), _flat(data.read_text(encoding="utf-8"))))
    for module in sorted((ROOT / "labkit").rglob("*.py")):
        found.append((str(module.relative_to(ROOT)), _flat(_python_prose(module))))
    return found


def _file_of(where: str) -> str:
    return where.split("[", 1)[0]


def offenders(rule: str, first: str, second: str, texts) -> list[tuple[str, str, set[str]]]:
    """(where, excerpt, allowed phrases marking it) for each match of `first` near `second`; the
    match is allowed when that set is not empty."""
    hits = []
    for where, text in texts:
        for match in re.finditer(first, text, re.IGNORECASE):
            start, end = max(0, match.start() - WINDOW), match.end() + WINDOW
            window = text[start:end]
            if not re.search(second, window, re.IGNORECASE):
                continue
            phrases = {phrase for phrase in ALLOWED[rule]
                       for spot in re.finditer(re.escape(phrase), text, re.IGNORECASE)
                       if spot.start() < end and spot.end() > start}
            hits.append((where, window, phrases))
    return hits


TEXTS = passages()


def test_the_scan_reads_every_kind_of_source():
    files = {_file_of(where) for where, _ in TEXTS}
    for expected in ("notebooks/04_pauses_and_fencing.ipynb", "notebooks/09_interview_practice.ipynb",
                     "README.md", "docs/RECIPES.md", "labkit/practice/cards.json",
                     "labkit/practice/scenarios.json", "labkit/locks/redis_lock.py"):
        assert expected in files, f"the scan does not read {expected}"
    cards = next(text for where, text in TEXTS if where == "labkit/practice/cards.json")
    assert "czxid" in cards, "the scan of cards.json should see the cards' text"


@pytest.mark.parametrize("rule, first, second", RULES, ids=[rule for rule, _, _ in RULES])
def test_no_passage_teaches_the_wrong_claim(rule, first, second):
    hits = [(where, window) for where, window, phrases in offenders(rule, first, second, TEXTS) if not phrases]
    assert not hits, f"{rule}: " + "\n".join(f"{where}: ...{window}..." for where, window in hits)


@pytest.mark.parametrize("rule", list(ALLOWED))
def test_every_allowed_phrase_marks_one_passage(rule):
    first, second = next((first, second) for name, first, second in RULES if name == rule)
    used = set().union(*(phrases for _, _, phrases in offenders(rule, first, second, TEXTS)))
    assert set(ALLOWED[rule]) <= used, f"{rule}: allowed phrases that mark no passage: {set(ALLOWED[rule]) - used}"
    for phrase in ALLOWED[rule]:
        places = [where for where, text in TEXTS if phrase.lower() in text.lower()]
        assert len(places) == 1, f"{rule}: the allowed phrase {phrase!r} should be distinctive, it is in {places}"


def test_the_deadline_rule_is_stated_once_and_referred_to():
    stated = [where for where, text in TEXTS if RULE in text]
    assert len(stated) == 1 and stated[0].startswith("notebooks/04_"), f"notebook 04 should state the rule, once: {stated}"
    vague = [where for where, text in TEXTS
             if "deadline rule" in text.lower() and RULE_CORE not in text and "notebook 04" not in text]
    assert not vague, f"these name the deadline rule without its words or a pointer to notebook 04: {vague}"


def test_the_scan_catches_each_wrong_claim():
    """Each rule fails on a sentence as it was written before issue #23."""
    samples = {   # notebook 08's practice question 4, notebook 04's pitfall, the card course-suspended-vs-lost
        "sequence as fencing token": "For a fencing token that only grows, use ZooKeeper's sequence number or "
                                     "etcd's create revision.",
        "deadline from the last reply": "A holder cut off from the servers never receives it; count the session "
                                        "timeout yourself from the last reply (the client-side deadline).",
        "deadline anchored on SUSPENDED": "When SUSPENDED has lasted the negotiated session timeout minus a "
                                          "margin, counted from the last reply heard from the server, assume "
                                          "the lock is lost",
    }
    for rule, first, second in RULES:
        found = offenders(rule, first, second, [("sample", samples[rule])])
        assert found and not any(phrases for _, _, phrases in found), f"{rule} misses its own example"
