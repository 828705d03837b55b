"""Exercise (lesson 10): a read-modify-write on PostgreSQL that a late holder cannot spoil.

The learner writes the new holder's side of fencing a real database, in the layout of
``labkit.record.fenced_table.FencedTable`` (``key text PRIMARY KEY, value bigint, token
bigint``):

    def fenced_add(conn, table, key, delta, token) -> bool   # True if the addition was made

``conn`` is a psycopg 3 connection (``conn.execute(sql, params)``, ``with conn.transaction():``),
``table`` a table name the checker made. The addition must happen only while ``token`` is at
least the row's token, and it must stop an older holder from writing from the moment it
starts: claim the row (``UPDATE … SET token = $token WHERE key = $key AND token <= $token``)
before reading it, in the same transaction as the write. ``check_fenced_add(fenced_add, lab)``
runs it on the lab's PostgreSQL:

1. a late holder: the row has token 5, the learner adds with token 4: refused, value unchanged?
2. a holder adds twice with its own token: both made?
3. the old holder (token 1) writes with the fenced UPDATE right after the learner (token 2)
   has read the row. Unless the learner claimed (or locked) the row first, PostgreSQL takes
   the old holder's write, and the new holder's addition then silently overwrites it: the
   old holder was told its write succeeded while the new one already held.

What can fail: ``ExerciseError`` if ``fenced_add`` is not callable; ``NoPostgres`` if the lab
has no PostgreSQL; psycopg's errors if it cannot be reached.
"""
from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable

from psycopg import sql

from labkit.practice.exercises.report import Report, learner_function
from labkit.record.fenced_table import FencedTable
from labkit.timing import wait_until

if TYPE_CHECKING:
    from labkit.servers.lab import Lab

PROPERTIES = ("refuses an older token", "accepts the holder's additions", "claims before it reads")
# How long the old holder's write may take to end or to wait on the row's lock (the learner's
# claim), whichever it does: a precondition waited for, not a window. (A 0.5 s join was one: on
# a loaded machine an unblocked write that took longer looked blocked, and a solution without
# a claim passed, its own UPDATE then locking the row ahead of the old holder.)
RIVAL_PATIENCE = 30.0


class WatchedConnection:
    """The learner's connection: every call goes to psycopg, and after the learner's first
    SELECT a callback runs once (the checker's old holder writing in between)."""

    def __init__(self, conn: Any, after_first_read: Callable[[], None] | None = None):
        self.conn = conn
        self.after_first_read = after_first_read
        self.read_seen = False

    def execute(self, query: Any, params: Any = None) -> Any:
        cursor = self.conn.execute(query, params)
        text = query.as_string(self.conn) if isinstance(query, sql.Composable) else str(query)
        if text.lstrip().upper().startswith("SELECT") and not self.read_seen:
            self.read_seen = True
            if self.after_first_read is not None:
                self.after_first_read()
        return cursor

    def transaction(self) -> Any:
        return self.conn.transaction()

    def cursor(self) -> Any:  # a learner who prefers cursors: not watched (the checker says so)
        return self.conn.cursor()


def check_fenced_add(fenced_add: Callable, lab: Lab) -> Report:
    """Run ``fenced_add(conn, table, key, delta, token)`` on the lab's PostgreSQL and judge it."""
    learner_function(fenced_add, hint="pass fenced_add(conn, table, key, delta, token) -> bool")
    report = Report("fenced read-modify-write exercise", properties=PROPERTIES)
    name = f"exercise_{uuid.uuid4().hex[:8]}"
    with FencedTable(lab, name) as checker, FencedTable(lab, name) as learner_side, \
            FencedTable(lab, name) as old_holder:
        try:
            report.scenarios.append("the row has token 5; you add with token 4")
            _older_token(report, fenced_add, checker, learner_side, name)
            report.scenarios.append("you add twice with token 5")
            _holder_twice(report, fenced_add, checker, learner_side, name)
            report.scenarios.append("you (token 2) read; the old holder (token 1) writes; you write")
            _old_holder_in_between(report, fenced_add, checker, learner_side, old_holder, name)
        finally:
            checker.drop()
    report.stop_clock()
    return report


def _call(report: Report, prop: str, fenced_add: Callable, conn: Any, *args: Any) -> bool | None:
    try:
        return bool(fenced_add(conn, *args))
    except Exception as error:
        report.judge(prop, False, f"fenced_add raised {type(error).__name__}: {error}", "raised")
        return None


def _older_token(report: Report, fenced_add: Callable, checker: FencedTable, learner: FencedTable, table: str) -> None:
    prop = PROPERTIES[0]
    checker.put("row", 100, 5)
    made = _call(report, prop, fenced_add, WatchedConnection(learner.conn), table, "row", 10, 4)
    if made is None:
        return
    value, token = checker.read("row")
    if (value, token) == (100, 5) and not made:
        report.judge(prop, True, "an addition with token 4 on a row at token 5 was refused; the row is unchanged")
    elif (value, token) == (100, 5):
        report.judge(prop, False, "the row is unchanged but fenced_add returned True: return whether the "
                     "database made the change (the UPDATE's rowcount)", "wrong answer")
    else:
        report.judge(prop, False, f"token 4 changed a row that token 5 had written (now value {value}, token "
                     f"{token}): the UPDATE must say AND token <= %s", "no token check")


def _holder_twice(report: Report, fenced_add: Callable, checker: FencedTable, learner: FencedTable, table: str) -> None:
    prop = PROPERTIES[1]
    checker.put("row", 100, 5)
    answers = [_call(report, prop, fenced_add, WatchedConnection(learner.conn), table, "row", 10, 5) for _ in range(2)]
    if None in answers:
        return
    value, token = checker.read("row")
    if answers == [True, True] and (value, token) == (120, 5):
        report.judge(prop, True, "both additions with the row's own token were made (120)")
    else:
        report.judge(prop, False, f"a holder adding twice with its token got {answers} and value {value} (token "
                     f"{token}), not [True, True] and 120: an equal token is the holder's own, accept it",
                     "refuses equal token")


def _old_holder_in_between(report: Report, fenced_add: Callable, checker: FencedTable, learner: FencedTable,
                           old_holder: FencedTable, table: str) -> None:
    prop = PROPERTIES[2]
    checker.put("row", 100, 1)
    outcome: dict[str, bool] = {}

    def old_write() -> None:
        outcome["accepted"] = old_holder.write("row", 110, 1)

    rival = threading.Thread(target=old_write, name="exercise-old-holder", daemon=True)

    backend = old_holder.conn.info.backend_pid

    def waits_on_a_lock() -> bool:
        row = checker.conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (backend,)).fetchone()
        return row is not None and row[0] == "Lock"

    def in_between() -> None:
        rival.start()
        # done (the row was not claimed), or blocked by a claimed (locked) row: then it finishes
        # after the learner's commit
        wait_until(lambda: not rival.is_alive() or waits_on_a_lock(), "the old holder's write to end or wait on the row",
                   RIVAL_PATIENCE, max_poll=0.05)

    conn = WatchedConnection(learner.conn, after_first_read=in_between)
    made = _call(report, prop, fenced_add, conn, table, "row", 50, 2)
    if rival.is_alive() or rival.ident is not None:
        rival.join(10)
    if made is None:
        return
    value, token = checker.read("row")
    if not conn.read_seen:
        report.judge(prop, False, "fenced_add never read the row with conn.execute(\"SELECT …\"), so the old "
                     "holder could not be put in between: read the value you add to", "no read")
    elif outcome.get("accepted") is False and made and (value, token) == (150, 2):
        report.judge(prop, True, "the old holder's write, sent after your read, was refused by PostgreSQL: "
                     "your claim had moved the row to token 2 first (150)")
    elif outcome.get("accepted"):
        report.judge(prop, False, f"you read, then the old holder (token 1) wrote 110 and PostgreSQL took it: "
                     f"the row still said token 1. Your addition then wrote {value} over it, and the old holder "
                     "was told its write succeeded while you already held. Claim the row (UPDATE … SET token) "
                     "before you read it, in the same transaction", "no claim")
    else:
        report.judge(prop, False, f"the old holder was refused, but your addition left value {value}, token "
                     f"{token} (expected 150, 2) and returned {made}", "wrong result")
