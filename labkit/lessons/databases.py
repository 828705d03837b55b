"""Lesson 10's databases: fencing a real PostgreSQL (C29) and an advisory lock that outlives
its client (C30), on ``labkit.up(postgres=True, network=True)``.

C29, ``late_write``: an old leader (token 1) reads a balance, pauses, and writes what it
computed after a new leader (token 2) has written. Unfenced, the database takes the late
write and the new leader's change is gone; fenced (labkit/record/fenced_table.py), the
UPDATE's ``token <= 1`` condition matches nothing and PostgreSQL refuses it.
``late_write_isolated``: the same refusal when the old leader read and writes inside one
transaction, at each isolation level. Under READ COMMITTED (PostgreSQL's default) each
statement sees the newest committed row, so the late UPDATE matches no row; under REPEATABLE
READ and SERIALIZABLE the transaction keeps the snapshot of its first read, and an UPDATE of a
row changed since then raises a serialization error (SQLSTATE 40001) instead.

C30, ``advisory_holds``: ``pg_advisory_lock`` belongs to a server session, and a session
lives as long as its TCP connection, whatever happened to the client. Here the client process
dies (SIGKILL: its kernel closes the socket) while its session runs a query. With
``client_connection_check_interval`` the server polls the socket during the query and ends
the session within about one interval; without it the server sees the closed socket only
when the query ends and it turns to the client again. A client whose machine vanishes, so
that nothing closes the socket (a half-open connection, packets dropped and no FIN), is
labkit/lessons/half_open.py, in a network namespace of its own.

``measure_fenced_update``: p50 of a fenced and an unfenced UPDATE on the same connection,
for ``labkit bench``. What can fail: NoPostgres for a lab without PostgreSQL; TimeoutError
when a lock is never freed within its deadline.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import psycopg
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from psycopg import sql

from labkit.record.plots import HOLDING_COLOUR, PAUSE_COLOUR, WAITING_COLOUR
from labkit.progress import shows_progress
from labkit.record.fenced_table import FencedTable, NoPostgres
from labkit.stats import summarize, take_turns
from labkit.timing import wait_until
from labkit.vocabulary import ACCEPTED_COLOUR, GUIDE_COLOUR, MARK_COLOUR, REJECTED_COLOUR, TEXT_COLOUR


def postgres_of(lab):
    if getattr(lab, "postgres", None) is None:
        raise NoPostgres("this lab runs no PostgreSQL", "start one with labkit.up(..., postgres=True)")
    return lab.postgres


# ---- C29: a paused old leader's late write -------------------------------------------------
@dataclass(frozen=True)
class RowStep:
    """One statement of the schedule and the row as PostgreSQL had it right after (read on
    a connection of its own): ``at`` seconds since the first statement, who ran it ("set-up",
    "old leader", "new leader"), what ("put", "read", "claim + write", "write", "late write"),
    the token it carried, whether the database took it (None for a read)."""

    at: float
    who: str
    action: str
    token: int | None
    accepted: bool | None
    value: int
    row_token: int


@dataclass
class LateWrite:
    fenced: bool
    start: int                 # the balance before either leader touched it
    old_planned: int           # what the old leader computed before its pause
    new_written: int           # what the new leader wrote
    late_accepted: bool        # did the database take the old leader's late write?
    final: int                 # the row afterwards
    steps: list[str] = field(default_factory=list)
    trace: list[RowStep] = field(default_factory=list)   # each statement and the row after it

    @property
    def corrupted(self) -> bool:
        """The new leader's change is gone: the row holds a value computed from a stale read."""
        return self.final != self.new_written


def late_write(lab, fenced: bool, table: str = "accounts", start: int = 100, old_adds: int = 10,
               new_adds: int = 50, old_token: int = 1, new_token: int = 2) -> LateWrite:
    """The schedule of C29 on the lab's PostgreSQL, each leader a client of its own, and an
    observer that reads the row after every statement (``LateWrite.trace``)."""
    postgres_of(lab)
    key = "fenced" if fenced else "unfenced"
    trace: list[RowStep] = []
    with FencedTable(lab, table) as old, FencedTable(lab, table) as new, FencedTable(lab, table) as observer:
        began = time.monotonic()

        def record(who: str, action: str, token: int | None, accepted: bool | None) -> None:
            at = time.monotonic() - began   # when the statement returned; then the row as it is now
            value, on_row = observer.read(key)
            trace.append(RowStep(at, who, action, token, accepted, value, on_row))
        old.put(key, start)
        record("set-up", "put", 0, True)
        steps = [f"row {key!r} = {start}, token 0"]
        seen, _ = old.read(key)
        record("old leader", "read", None, None)
        planned = seen + old_adds
        steps.append(f"old leader (token {old_token}) reads {seen}, will write {planned}, then pauses")
        if fenced:
            taken = new.update(key, lambda value: value + new_adds, new_token)   # claims token 2 first, then writes
            record("new leader", "claim + write", new_token, taken)
        else:
            value, _ = new.read(key)
            record("new leader", "read", None, None)
            record("new leader", "write", None, new.write_unfenced(key, value + new_adds))
        written = trace[-1].value
        steps.append(f"its lease expires; new leader (token {new_token}) writes {written}")
        accepted = old.write(key, planned, old_token) if fenced else old.write_unfenced(key, planned)
        record("old leader", "late write", old_token if fenced else None, accepted)
        steps.append(f"old leader wakes and writes {planned}: {'accepted' if accepted else 'REFUSED by PostgreSQL'}")
        steps.append(f"row {key!r} = {trace[-1].value}, token {trace[-1].row_token}")
    return LateWrite(fenced, start, planned, written, accepted, trace[-1].value, steps, trace)


def late_write_plot(runs: list[LateWrite], axes=None):
    """One panel per run (unfenced above fenced), in the timeline style of lessons 04 and 07:
    the old leader's row (holding blue from its read; hatched while it pauses until its late
    write), the new leader's row, and the row in PostgreSQL, each segment its value and token
    as the observer read them, red where it holds a value computed from a stale read. The
    statements' marks: a read (black tick), a write taken (green dot) or refused (red x)."""
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(len(runs), 1, figsize=(10, 1.9 * len(runs) + 0.6), sharex=True, layout="constrained")
    axes = list(axes) if len(runs) > 1 else [axes]
    end = 1000 * max(run.trace[-1].at for run in runs) * 1.15 + 0.2
    rows = {"old leader": 0, "new leader": 1, "the row": 2}
    for ax, run in zip(axes, runs):
        old = [step for step in run.trace if step.who == "old leader"]
        new = [step for step in run.trace if step.who == "new leader"]
        read_at, late_at = 1000 * old[0].at, 1000 * old[-1].at
        ax.broken_barh([(read_at, late_at - read_at)], (-0.3, 0.6), facecolors=HOLDING_COLOUR, alpha=0.35)
        ax.broken_barh([(read_at, late_at - read_at)], (-0.42, 0.84), facecolors="none", edgecolors=PAUSE_COLOUR,
                       hatch="///")
        ax.broken_barh([(1000 * new[0].at, end - 1000 * new[0].at)], (0.7, 0.6), facecolors=HOLDING_COLOUR)
        for step in old + new:
            colour, marker = ((MARK_COLOUR, "|") if step.accepted is None else
                              (ACCEPTED_COLOUR, "o") if step.accepted else (REJECTED_COLOUR, "x"))
            ax.plot([1000 * step.at], [rows[step.who]], linestyle="none", marker=marker, markersize=12,
                    markeredgewidth=2.5, color=colour, zorder=4)
            wrote = (run.old_planned if step.who == "old leader" else run.new_written) if "write" in step.action else None
            said = (f"{step.action}" + (f" {wrote}" if wrote is not None else "")
                    + (f", token {step.token}" if step.token is not None else ""))
            ax.annotate(said, (1000 * step.at, rows[step.who] - 0.3), xytext=(3, 1), textcoords="offset points",
                        va="bottom", fontsize=8, color=TEXT_COLOUR)
        changes = [step for index, step in enumerate(run.trace)   # the row's states, each from when it began
                   if index == 0 or (step.value, step.row_token) != (run.trace[index - 1].value,
                                                                     run.trace[index - 1].row_token)]
        for index, step in enumerate(changes):
            until = 1000 * changes[index + 1].at if index + 1 < len(changes) else end
            stale = step.who == "old leader" and step.action == "late write" and step.accepted
            ax.broken_barh([(1000 * step.at, until - 1000 * step.at)], (1.7, 0.6),
                           facecolors=REJECTED_COLOUR if stale else WAITING_COLOUR, edgecolors=GUIDE_COLOUR)
            ax.annotate(f"{step.value} · {step.row_token}", (1000 * step.at, 2.0), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=8, color=TEXT_COLOUR)
        ax.set_yticks(range(3), ["old leader (token 1)", "new leader (token 2)", "the row: value · token"])
        ax.set_ylim(2.5, -0.5)
        ax.set_title(f"{'Fenced' if run.fenced else 'Unfenced'}: the row ends at {run.final}"
                     + (" (the new leader's +50 is lost)" if run.corrupted else ""), fontsize=10)
    axes[-1].set_xlim(0, end)
    axes[-1].set_xlabel("ms since the first statement (the old leader's pause is the schedule's: it waits for "
                        "the new leader)")
    axes[0].legend(handles=[Patch(color=HOLDING_COLOUR, label="leads (believes it does)"),
                            Patch(facecolor="none", edgecolor=PAUSE_COLOUR, hatch="///", label="paused"),
                            Line2D([], [], linestyle="none", marker="o", color=ACCEPTED_COLOUR, label="write taken"),
                            Line2D([], [], linestyle="none", marker="x", markeredgewidth=2.5, color=REJECTED_COLOUR,
                                   label="write refused"),
                            Patch(color=REJECTED_COLOUR, label="row from a stale read")],
                   loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return axes


# ---- C29 inside a transaction: the isolation level decides how PostgreSQL refuses -----------
ISOLATION_LEVELS = ("read committed", "repeatable read", "serializable")


def late_write_isolated(lab, isolation: str, table: str = "isolated") -> str:
    """The old leader (token 1) reads the row in a transaction at ``isolation``; the new leader
    (token 2) claims and writes it meanwhile (autocommit); then the old leader's fenced UPDATE,
    in the same transaction. Returns what PostgreSQL did with it: ``"matched no row"``,
    ``"accepted"``, or ``"serialization error, then ..."`` (SQLSTATE 40001, and what the same
    UPDATE did when retried in a new transaction)."""
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation {isolation!r}: use one of {ISOLATION_LEVELS}")
    postgres_of(lab)
    with FencedTable(lab, table) as new:
        new.put("row", 100)
        old = postgres_of(lab).connect(autocommit=False)
        try:
            old.execute(sql.SQL("SET TRANSACTION ISOLATION LEVEL " + isolation.upper()))
            old.execute(sql.SQL("SELECT value FROM {} WHERE key = 'row'").format(new.table)).fetchone()  # its snapshot
            new.update("row", lambda value: value + 50, 2)        # the new leader claims and writes: committed
            late = sql.SQL("UPDATE {} SET value = 110, token = 1 WHERE key = 'row' AND token <= 1").format(new.table)
            try:
                outcome = "accepted" if old.execute(late).rowcount == 1 else "matched no row"
                old.commit()
            except psycopg.errors.SerializationFailure:
                old.rollback()
                # the retry: a new transaction, whose snapshot sees the new leader's token
                old.execute(sql.SQL("SET TRANSACTION ISOLATION LEVEL " + isolation.upper()))
                retried = "accepted" if old.execute(late).rowcount == 1 else "matched no row"
                old.commit()
                outcome = f"serialization error, then {retried}"
        finally:
            old.close()
        new.drop()
    return outcome


# ---- C30: how long an advisory lock outlives its client ---------------------------------------
@dataclass
class AdvisoryHolds:
    """Seconds another session could not take the lock, measured from the client's SIGKILL."""
    crash_with_check: float      # client killed mid-query, client_connection_check_interval on
    crash_without_check: float   # the same, short keepalives only
    check_interval: float        # the interval used (s)
    keepalive_bound: float       # idle + interval x count of the keepalives set
    query_seconds: float         # how long the killed client's query was to run
    query_left: float            # what it still had to run when its client was killed (no check)

    def rows(self) -> list[dict]:
        return [
            {"fault": "client killed mid-query", "setting": f"check every {self.check_interval:g} s",
             "held (s)": f"{self.crash_with_check:.2f}"},
            {"fault": "client killed mid-query", "setting": f"keepalive ({self.keepalive_bound:g} s), no check",
             "held (s)": f"{self.crash_without_check:.2f}"},
        ]


def session_options(check_interval: float | None, keepalive: tuple[int, int, int] | None) -> str:
    """libpq's ``options``: server settings for the session (both are per session in PostgreSQL)."""
    settings = []
    if check_interval is not None:
        settings.append(f"client_connection_check_interval={int(check_interval * 1000)}ms")
    if keepalive is not None:
        idle, interval, count = keepalive
        settings += [f"tcp_keepalives_idle={idle}", f"tcp_keepalives_interval={interval}", f"tcp_keepalives_count={count}"]
    return " ".join(f"-c {setting}" for setting in settings)


def lock_is_free(observer, key: int) -> bool:
    """Take the lock and give it back at once: True if another session could have it now."""
    if observer.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:
        observer.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return True
    return False


# the client of hold_after_crash: log in (login as JSON, the password from PGPASSWORD), take
# the advisory lock, run the long query; it is killed before the query ends
CRASHING_CLIENT = """import json, sys, psycopg
with psycopg.connect(**json.loads(sys.argv[1]), autocommit=True) as connection:
    connection.execute(sys.argv[2])
    connection.execute(sys.argv[3])
"""


def hold_after_crash(lab, key: int, check_interval: float | None, keepalive,
                     query_seconds: float) -> tuple[float, float]:
    """A client process takes the lock, runs ``pg_sleep(query_seconds)`` and is SIGKILLed
    mid-query. Returns (seconds until another session could take the lock, seconds the query
    still had to run when the client was killed, by the server's clock). The client is Python
    with psycopg (libpq reads PGOPTIONS and PGPASSWORD), not psql: on the Docker backend the
    host may have no PostgreSQL programs at all."""
    service = postgres_of(lab)
    login = service.login()
    password = login.pop("password", "")
    env = dict(os.environ, PGPASSWORD=password, PGOPTIONS=session_options(check_interval, keepalive),
               PGCONNECT_TIMEOUT="5")
    query = f"SELECT {key}, pg_sleep({query_seconds})"   # the key tells this query apart in pg_stat_activity
    argv = [sys.executable, "-c", CRASHING_CLIENT, json.dumps(login), f"SELECT pg_advisory_lock({key})", query]
    client = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    running = "SELECT extract(epoch FROM clock_timestamp() - query_start) FROM pg_stat_activity WHERE query = %s"
    try:
        with service.connect() as observer:
            wait_until(lambda: observer.execute(running, (query,)).fetchone() is not None and not lock_is_free(observer, key),
                       "the client's query to run", 15)
            client.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            # read after the kill, so that what it says is left is never more than was left at the kill
            row = observer.execute(running, (query,)).fetchone()
            ran = query_seconds if row is None else float(row[0])
            wait_until(lambda: lock_is_free(observer, key), "the killed client's lock to be freed", query_seconds + 15, 0.01)
            return time.monotonic() - killed, max(0.0, query_seconds - ran)
    finally:
        client.kill()
        client.wait()


@shows_progress("PostgreSQL advisory locks held across a cut")
def advisory_holds(lab, check_interval: float = 0.2, keepalive: tuple[int, int, int] = (1, 1, 1),
                   query_seconds: float = 2.0) -> AdvisoryHolds:
    """The two holds of a killed client (about 2 x query_seconds of wall time)."""
    idle, interval, count = keepalive
    with_check, _ = hold_after_crash(lab, 3001, check_interval, None, query_seconds)
    without_check, query_left = hold_after_crash(lab, 3002, None, keepalive, query_seconds)
    return AdvisoryHolds(with_check, without_check, check_interval, idle + interval * count, query_seconds, query_left)


# ---- the benchmark ------------------------------------------------------------------------
def measure_fenced_update(lab, iterations: int = 300) -> dict:
    """p50/p99 of a fenced UPDATE (``... WHERE key = $k AND token <= $t``) against the same
    UPDATE without the token, taking turns on one connection; "ratio" is fenced p50 over
    unfenced p50 (target <= 1.2)."""
    with FencedTable(lab, "bench_fenced") as table:
        table.put("fenced", 0)
        table.put("unfenced", 0)
        counter = iter(range(10 ** 9))
        samples = take_turns({"fenced": lambda: table.write("fenced", next(counter), 1),
                              "unfenced": lambda: table.write_unfenced("unfenced", next(counter))},
                             iterations, warm_up=20)
        table.drop()
    fenced, unfenced = summarize(samples["fenced"]), summarize(samples["unfenced"])
    return {"fenced": fenced, "unfenced": unfenced, "ratio": round(fenced["p50_ms"] / unfenced["p50_ms"], 2)}
