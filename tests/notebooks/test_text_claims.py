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

Issue #33 added sentences that are wrong outside the lab, each with the reason beside its rule:
a Kubernetes Lease's resourceVersion or leaseTransitions as a fencing token; an etcd keep-alive
that "needs a commit"; a lease that can never be freed early (etcd issue #15247 does it); the
ZooKeeper deadline without the servers' lag, or as 0.8 T less the lag without the heartbeat;
client_connection_check_interval as the cure for a half-open connection; "NTP slews at most
0.05 %" (ntpd's limit, not chrony's); a 0.2 margin for the etcd session (it keeps 0.1); a stale
read notebook 03 says it could not show; 09 called the last notebook; Curator said to keep N
nowhere (a SharedCountReader keeps it in ZooKeeper); an advisory lock said to be held until the
link heals (keepalive, tcp_user_timeout or idle_session_timeout end it first, notebook 10); a write
that matches no row called the refusal without its isolation level (REPEATABLE READ and
SERIALIZABLE raise a serialization error instead); a clock 25 % fast said to flip a 20 % margin
(that is the edge it covers: 08 flips it at 50 %). Issue #34 added one found by a failed run: every
etcd member said to count one more leader change when a cut-off leader rejoins without pre-vote (a
follower still in its check-quorum lease ignores the votes and may never see its leader change).

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

ROOT = Path(__file__).resolve().parents[2]
WINDOW = 80   # characters on either side of a match

# (name, first pattern, second pattern): the text fails where both occur within WINDOW characters.
RULES = [
    # a whole word, not an identifier: ``"sequence"`` keys, ``sequence_restart``, ids like course-sequence-token
    ("sequence as fencing token", r"(?<![\"'`_-])\bsequences?\b(?![\"'`_-])", r"token|fenc"),
    ("deadline from the last reply", r"last (?:reply|replies|answer)", r"deadline"),
    ("deadline anchored on SUSPENDED", r"suspended", r"minus a margin"),
    # issue #33: what is true outside the lab too
    # resourceVersion is opaque (clients must not compare it); leaseTransitions starts again when
    # the Lease is re-created and does not grow when the same identity re-acquires
    ("a Lease's resourceVersion or leaseTransitions as a token", r"\b(?:resourceVersion|leaseTransitions)\b",
     r"\btokens?\b|fenc|epoch"),
    # etcd's lessor renews in memory on the leader; a member forwards the renewal to the leader
    ("an etcd keep-alive goes through a commit", r"keep-?alives?|\brenewals?\b|\brenew(?:ed|s)?\b", r"\bcommit"),
    # etcd issue #15247: a stale leader's revokes, committed by the new leader (3.4.23 has it)
    ("a lease freed early cannot happen", r"freed \*?earl(?:y|ier)|nobody else can|no one else can",
     r"cannot happen|can't happen|never happens|revok"),
    # a ZooKeeper answer from a follower proves the session alive only up to the lag (notebook 07)
    ("deadline from the newest answer, no lag", r"(?:newest|last|latest) request (?:the|its) server answered",
     r"margin"),
    # it only notices a socket the kernel already reports closed
    ("client_connection_check_interval for a half-open connection", r"client_connection_check_interval",
     r"half-open|partition|network|(?:keepalive|keep-alive)[^.;]{0,60}\bor\b"),
    # 500 ppm is ntpd's limit; chrony slews up to 83 333 ppm (8.3 %) by default
    ("NTP slews at most 500 ppm", r"\b(?:NTP|the kernel)\b[^.;]{0,40}\bslews?\b[^.;]{0,40}(?:at most|up to|no more than)",
     r"0\.05 ?%|500 ?ppm"),
    # labkit/locks/etcd_session.py: drift_margin=0.1
    ("the etcd session's margin is 0.2", r"EtcdSession|etcd session",
     r"\bm = 0\.2\b|margin[^.]{0,30}\b0\.2\b(?! ?s\b)|\b0\.2\b(?! ?s\b)[^.]{0,30}margin|20 ?% margin"),
    # labkit/locks/zookeeper_deadline.py also subtracts the heartbeat
    ("0.8 T less the lag, no heartbeat",
     r"0\.8\s*(?:×|x|\*|of)(?:[^.;:]|\.(?=\w)){0,60}?(?:less|minus|-|−)(?:[^.;:]|\.(?=\w)){0,40}?lag\b"
     r"(?!(?:[^.;]|\.(?=\w)){0,80}heartbeat)", r"deadline"),
    # 03 could not show a stale serializable read on one machine, and says so
    ("notebook 03 shows a stale read", r"notebook 03 shows", r"stale"),
    # 10 comes after 09
    ("09 as the last notebook", r"\b(?:the )?(?:last|final) (?:notebook|lesson)\b", r"\b09\b|practice|interview|cards"),
    # Curator's InterProcessSemaphoreV2 built with a SharedCountReader keeps N in a ZooKeeper node (09)
    ("Curator stores N nowhere",
     r"\b(?:does not|doesn't|never|cannot|can't)\b[^.;]{0,15}\b(?:store|keep|hold|record)s?\b[^.;]{0,10}\bN\b",
     r"Curator"),
    # keepalive, tcp_user_timeout and idle_session_timeout each end a half-open session at its bound (10)
    ("an advisory lock held until the link heals", r"until the link heals|for the whole cut",
     r"\block|session|connection|freed"),
    # under REPEATABLE READ or SERIALIZABLE the late UPDATE raises SQLSTATE 40001 instead (10 asserts both)
    ("matches no row, whatever the isolation level",
     r"match(?:es|ed)? no rows?[^.;]{0,20}\b(?:is|as) a refusal|refusal, not an error",
     r"\A(?![\s\S]*read committed)"),
    # 1 / (1 - 0.2) - 1 = 25 %: the edge a 20 % margin covers, not past it (08 flips it at 50 %, C33)
    ("a clock 25 % fast flips a 20 % margin", r"\b25 ?% fast", r"(?<!not )(?<!n't )\bflip(?:s|ped)?\b"),
    # past surely_two_leaders_rate the follower's lease ends first wherever its tries fell, but the
    # second leader also needs its write to land in the time left (09, session 15: at load ~10 it did not)
    ("two leaders wherever the tries fell", r"(?:two leaders|that happens|it leads)[^.;]{0,20}\bwherever\b",
     r"\btries\b"),
    # a follower still in its check-quorum lease ignores the heal's vote requests; when its leader
    # wins again it never sees the leader change (07, CI of stop 45: the majority counted [0, 1])
    ("every member counts the heal's election", r"\b(?:every(?:one| member)|all (?:three )?members|each member)\b"
     r"[^.;]{0,30}\b(?:counts?|counted|sees?|saw)\b", r"(?:one )?(?:more|another) leader change"),
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
    "a Lease's resourceVersion or leaseTransitions as a token": [
        "resourceVersion is opaque (clients must not compare it)",                       # card senior-kubernetes-lease
        "Fences with the Lease's resourceVersion or leaseTransitions",                   # scenarios.json, a red flag
    ],
    "an etcd keep-alive goes through a commit": [
        "A lease keep-alive is not a write: renewals do not go through Raft",            # 05, practice question 4
    ],
    "a lease freed early cannot happen": [
    ],
    "deadline from the newest answer, no lag": [
    ],
    "client_connection_check_interval for a half-open connection": [
    ],
    "NTP slews at most 500 ppm": [
    ],
    "the etcd session's margin is 0.2": [
    ],
    "0.8 T less the lag, no heartbeat": [
    ],
    "notebook 03 shows a stale read": [
    ],
    "09 as the last notebook": [
    ],
    "Curator stores N nowhere": [
    ],
    "an advisory lock held until the link heals": [
    ],
    "matches no row, whatever the isolation level": [
    ],
    "a clock 25 % fast flips a 20 % margin": [
    ],
    "two leaders wherever the tries fell": [
    ],
    "every member counts the heal's election": [
        "in 9 of 9 runs every member counted one more leader",                    # lessons/pre_vote.py, measured
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
    for expected in ("notebooks/04_pauses_and_fencing.ipynb", "notebooks/11_interview_practice.ipynb",
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
    """Each rule fails on a sentence as it was written before issue #23 (the first three) or #33."""
    samples = {   # notebook 08's practice question 4, notebook 04's pitfall, the card course-suspended-vs-lost
        "sequence as fencing token": "For a fencing token that only grows, use ZooKeeper's sequence number or "
                                     "etcd's create revision.",
        "deadline from the last reply": "A holder cut off from the servers never receives it; count the session "
                                        "timeout yourself from the last reply (the client-side deadline).",
        "deadline anchored on SUSPENDED": "When SUSPENDED has lasted the negotiated session timeout minus a "
                                          "margin, counted from the last reply heard from the server, assume "
                                          "the lock is lost",

        # issue #33's sentences: the card senior-kubernetes-lease, scenarios.json (partitioned-leader-epochs),
        # the card senior-etcd-revoke-when and 05's "freed earlier", the card partition-suspended-holder,
        # the card senior-database-locks, 08's slew, TORTURE.md, 05 [10], 07 [7] and README
        "a Lease's resourceVersion or leaseTransitions as a token": "pass leaseTransitions or the resourceVersion "
                                                                    "as a token to a resource that checks it.",
        "an etcd keep-alive goes through a commit": "Explains that a keep-alive needs a commit, which needs a "
                                                    "majority, so the lease runs out",
        "a lease freed early cannot happen": "Safety is unaffected, it only takes longer; and the opposite, a lock "
                                             "freed *earlier* than the timeout, cannot happen this way.",
        "deadline from the newest answer, no lag": "give the lock up once (session timeout - margin) has passed since "
                                                   "it sent the newest request the server answered",
        "client_connection_check_interval for a half-open connection":
            "a dead or partitioned client host leaves a half-open TCP connection, which Postgres notices only "
            "through TCP keepalive (hours with the default settings) or, while a query runs, "
            "client_connection_check_interval",
        "NTP slews at most 500 ppm": "real oscillators drift by parts per million and NTP slews by at most 0.05 %, "
                                     "so a 20 % margin is generous",
        "the etcd session's margin is 0.2": "m = 0.2, the margin ZooKeeperLock and EtcdSession keep",
        "0.8 T less the lag, no heartbeat": "far less than the holder's client-side deadline (0.8 of the session "
                                            "timeout, less the servers' lag bound)",
        "notebook 03 shows a stale read": "a serializable read on a member cut off from the majority can be stale "
                                          "(notebook 03 shows it)",
        "09 as the last notebook": "(the last notebook is a deck of practice cards and auto-checked exercises)",
        # the old 10's pitfalls [19] and [53] and its recap [60]; the course plan's C33
        "Curator stores N nowhere": "Everyone must agree on N. Curator does not store N anywhere: a client started "
                                    "with N = 3 beside clients with N = 2 admits a third holder.",
        "an advisory lock held until the link heals": "freed within one connection-check interval, or only when the "
                                                      "running query ends, or, behind anything that keeps the "
                                                      "connection open, not at all until the link heals.",
        "matches no row, whatever the isolation level": "A fenced write that matches no row is a refusal, not an "
                                                        "error: check the row count",
        "a clock 25 % fast flips a 20 % margin": "clock-rate shim on CLOCK_MONOTONIC: 25 % fast vs a 20 % margin "
                                                 "flips the order, a 40 % margin restores it",
        "two leaders wherever the tries fell": "Above `durations.surely_two_leaders_rate()` (2.38) that happens "
                                               "wherever its jittered tries fell.",
        # 07 [13] before stop 46
        "every member counts the heal's election": "so the leader stepped down and everyone counted one more "
                                                   "leader change: an election nobody needed.",
    }
    for rule, first, second in RULES:
        found = offenders(rule, first, second, [("sample", samples[rule])])
        assert found and not any(phrases for _, _, phrases in found), f"{rule} misses its own example"
