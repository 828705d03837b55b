"""The lesson 10 exercise (labkit/practice/exercises/fenced_sql.py) on a real PostgreSQL: the
reference fenced_add, which claims the row before it reads, passes all three properties; the
mistakes whose verdict no timing decides are each named (no token check, an equal token
refused, a True for an addition never made, an error raised, an addition that never reads
the row so the old holder could not be put in between); the watched connection runs its
callback once, after the first SELECT, whether the query is text or psycopg's sql; what is
no function is refused before anything runs, and a lab without PostgreSQL says so.

The no-claim mistake (lesson_examples.fenced_add_without_claim) too: the checker waits until
the old holder's write has ended or waits on the row's lock, so no timing decides it (with a
0.5 s join it could pass on a loaded machine: the test ran beside two CPU hogs)."""
from __future__ import annotations

import pytest
from psycopg import sql

from labkit.practice.exercises import lesson_examples as ex
from labkit.practice.exercises.fenced_sql import PROPERTIES, WatchedConnection, check_fenced_add
from labkit.practice.exercises.report import ExerciseError
from labkit.record.fenced_table import FencedTable, NoPostgres


@pytest.fixture(scope="module")
def postgres_lab(lab_of):
    return lab_of(zookeeper=0, etcd=0, redis=False, postgres=True)


def without_token_check(conn, table, key, delta, token):
    with conn.transaction():
        (value,) = conn.execute(f"SELECT value FROM {table} WHERE key = %s", (key,)).fetchone()
        return conn.execute(f"UPDATE {table} SET value = %s, token = %s WHERE key = %s",
                            (value + delta, token, key)).rowcount == 1


def refusing_an_equal_token(conn, table, key, delta, token):
    with conn.transaction():
        if conn.execute(f"UPDATE {table} SET token = %s WHERE key = %s AND token < %s", (token, key, token)).rowcount != 1:
            return False
        (value,) = conn.execute(f"SELECT value FROM {table} WHERE key = %s", (key,)).fetchone()
        conn.execute(f"UPDATE {table} SET value = %s WHERE key = %s", (value + delta, key))
    return True


def always_true(conn, table, key, delta, token):
    ex.fenced_add(conn, table, key, delta, token)
    return True


def raising(conn, table, key, delta, token):
    raise ZeroDivisionError("the learner's bug")


def in_one_update(conn, table, key, delta, token):
    return conn.execute(f"UPDATE {table} SET value = value + %s, token = %s WHERE key = %s AND token <= %s",
                        (delta, token, key, token)).rowcount == 1


def test_the_reference_claims_before_it_reads_and_passes(postgres_lab):
    report = check_fenced_add(ex.fenced_add, postgres_lab)
    assert report.passed, report.explain()
    assert list(report.verdicts) == list(PROPERTIES) and len(report.scenarios) == 3
    assert "refused by PostgreSQL" in report["claims before it reads"].words


@pytest.mark.parametrize("fenced_add, prop, cause, words", [
    (without_token_check, "refuses an older token", "no token check", "the UPDATE must say AND token <= %s"),
    (refusing_an_equal_token, "accepts the holder's additions", "refuses equal token", "an equal token is the holder's own"),
    (always_true, "refuses an older token", "wrong answer", "but fenced_add returned True"),
    (raising, "refuses an older token", "raised", "fenced_add raised ZeroDivisionError: the learner's bug"),
    (in_one_update, "claims before it reads", "no read", "fenced_add never read the row"),
    (ex.fenced_add_without_claim, "claims before it reads", "no claim", "the old holder (token 1) wrote 110"),
], ids=["no-token-check", "equal-token", "always-true", "raises", "no-read", "no-claim"])
def test_each_mistake_is_named(postgres_lab, fenced_add, prop, cause, words):
    report = check_fenced_add(fenced_add, postgres_lab)
    verdict = report[prop]
    assert not report.passed and not verdict.held and cause in verdict.causes, report.explain()
    assert words in verdict.words, report.explain()


def test_the_checker_leaves_no_table_behind(postgres_lab):
    tables = lambda conn: {row[0] for row in conn.execute(  # noqa: E731
        "SELECT tablename FROM pg_tables WHERE tablename LIKE 'exercise_%'").fetchall()}
    with FencedTable(postgres_lab, "exercise_probe") as probe:
        before = tables(probe.conn)
        check_fenced_add(ex.fenced_add, postgres_lab)
        assert tables(probe.conn) == before
        probe.drop()


def test_the_watched_connection_calls_back_once_after_the_first_select(postgres_lab):
    with FencedTable(postgres_lab, "watched_rows") as table:
        try:
            table.put("row", 7, 1)
            calls = []
            conn = WatchedConnection(table.conn, after_first_read=lambda: calls.append(table.read("row")))
            conn.execute("UPDATE watched_rows SET token = 2 WHERE key = 'row'")
            assert calls == [] and not conn.read_seen, "an UPDATE is no read"
            query = sql.SQL("  select value FROM {} WHERE key = %s").format(sql.Identifier("watched_rows"))
            assert conn.execute(query, ("row",)).fetchone() == (7,)
            assert calls == [(7, 2)] and conn.read_seen
            conn.execute("SELECT 1")
            assert calls == [(7, 2)], "once"
        finally:
            table.drop()


def test_what_is_no_function_or_no_database_is_refused_before_anything_runs(lab):
    with pytest.raises(ExerciseError, match="is not a function"):
        check_fenced_add("fenced_add", lab)
    with pytest.raises(NoPostgres, match="no PostgreSQL"):
        check_fenced_add(ex.fenced_add, lab)
