"""The checkers on crafted histories: real overlaps are found, none are invented."""
from __future__ import annotations

import pytest

from labkit.record.checker import check_fifo, check_mutual_exclusion, check_wakeups
from labkit.record.events import Event
from labkit.record.fencing import StoreWrite
from labkit.record.history import FAULT_CLIENT, History

pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these


def store_log(*rows: tuple) -> list[StoreWrite]:
    """Rows of (time, client, token, accepted), in the order the store ran them."""
    return [StoreWrite(time, client, token, accepted, "v", True, None, "") for time, client, token, accepted in rows]


def crafted(*rows: tuple) -> History:
    return History(Event(row[0], row[1], row[2], row[3] if len(row) > 3 else {}) for row in rows)


def test_sequential_holds_with_close_timestamps_are_not_overlaps():
    # b's first write is a microsecond after a's last: close in time, but in order
    verdict = check_mutual_exclusion(store_log(
        (1.000000, "a", 5, True), (1.000100, "a", 5, True),
        (1.000101, "b", 6, True), (1.000102, "b", 6, True), (1.000103, "c", 7, True)))
    assert verdict.ok, verdict.explain()
    assert verdict.overlaps == []
    assert "5 accepted writes by 3 holds" in verdict.explain()


def test_interleaved_writes_are_an_overlap_with_evidence():
    verdict = check_mutual_exclusion(store_log(
        (10.0, "a", 5, True), (10.2, "b", 6, True), (10.4, "a", 5, True), (10.6, "b", 6, True)))
    assert not verdict.ok
    (overlap,) = verdict.overlaps
    assert {overlap.first_client, overlap.second_client} == {"a", "b"}
    assert {overlap.first_token, overlap.second_token} == {5, 6}
    assert overlap.times == (10.0, 10.2, 10.4)
    text = verdict.explain()
    assert "VIOLATED" in text and "a (token 5) wrote at t=0.000 s" in text and "b (token 6) wrote at t=0.200 s" in text


def test_a_stale_write_after_the_new_holders_write_is_an_overlap():
    # a paused before writing anything; b took over and wrote; a woke and wrote
    verdict = check_mutual_exclusion(store_log((1.0, "b", 6, True), (2.0, "a", 5, True)))
    assert not verdict.ok
    (overlap,) = verdict.overlaps
    assert overlap.pattern == "stale token"
    assert (overlap.first_client, overlap.second_client) == ("a", "b")
    assert "older token" in verdict.explain()


def test_a_rejected_stale_write_did_no_damage():
    verdict = check_mutual_exclusion(store_log((1.0, "a", 5, True), (2.0, "b", 6, True), (3.0, "a", 5, False)))
    assert verdict.ok, verdict.explain()
    assert "1 rejected by fencing" in verdict.summary


def test_one_pair_is_reported_once_even_with_many_interleavings():
    rows = [(float(i), "a" if i % 2 == 0 else "b", 5 if i % 2 == 0 else 6, True) for i in range(10)]
    verdict = check_mutual_exclusion(store_log(*rows))
    assert len(verdict.overlaps) == 1


def test_dict_rows_and_history_write_events_are_accepted():
    rows = [{"time": 1.0, "client": "a", "token": 1, "accepted": True},
            {"time": 2.0, "client": "b", "token": 2, "accepted": True}]
    assert check_mutual_exclusion(rows).ok
    history = crafted((1.0, "a", "write", {"token": 1, "accepted": True}),
                      (2.0, "b", "write", {"token": 2, "accepted": True}),
                      (3.0, "a", "write", {"token": 1, "accepted": True}))
    assert not check_mutual_exclusion(history).ok


def test_tokenless_writes_are_split_into_holds_by_the_history():
    # a holds twice around b's hold (a Redis lock: no tokens): not an overlap
    history = crafted((0.9, "a", "acquired"), (1.5, "a", "released"), (1.9, "b", "acquired"),
                      (2.5, "b", "released"), (2.9, "a", "acquired"))
    writes = store_log((1.0, "a", None, True), (2.0, "b", None, True), (3.0, "a", None, True))
    assert check_mutual_exclusion(writes, history=history).ok
    # the same writes while a never let go: an overlap
    still_holding = crafted((0.9, "a", "acquired"), (1.9, "b", "acquired"))
    verdict = check_mutual_exclusion(writes, history=still_holding)
    assert not verdict.ok and "a (hold 1)" in verdict.explain()
    with pytest.raises(ValueError, match="no fencing token"):
        check_mutual_exclusion(writes)


def test_fifo_in_creation_order():
    history = crafted((1.0, "a", "created", {"sequence": 1}), (1.1, "b", "created", {"sequence": 2}),
                      (1.2, "c", "created", {"sequence": 3}), (1.3, "a", "acquired"), (2.0, "a", "released"),
                      (2.1, "b", "acquired"), (3.0, "b", "released"), (3.1, "c", "acquired"))
    verdict = check_fifo(history)
    assert verdict.ok, verdict.explain()


def test_fifo_violated_when_a_younger_entry_jumps_the_queue():
    history = crafted((1.0, "a", "created", {"sequence": 1}), (1.1, "b", "created", {"sequence": 2}),
                      (1.2, "c", "created", {"sequence": 3}), (1.3, "a", "acquired"), (2.0, "a", "released"),
                      (2.1, "c", "acquired"), (3.0, "c", "released"), (3.1, "b", "acquired"))
    verdict = check_fifo(history)
    assert not verdict.ok
    assert any("c (entry 3) acquired" in problem and "b (entry 2, older) was still waiting" in problem
               for problem in verdict.problems)
    assert any("b (entry 2) was served after c" in problem for problem in verdict.problems)


def test_fifo_allows_passing_a_waiter_that_was_killed_or_gave_up():
    history = crafted((1.0, "a", "created", {"sequence": 1}), (1.1, "b", "created", {"sequence": 2}),
                      (1.2, "c", "created", {"sequence": 3}), (1.3, "a", "acquired"),
                      (1.5, FAULT_CLIENT, "fault", {"what": "kill", "target": "b"}),
                      (2.0, "a", "released"), (2.1, "c", "acquired"))
    assert check_fifo(history).ok
    with pytest.raises(ValueError, match="no 'created' events"):
        check_fifo(crafted((1.0, "a", "acquired")))


def test_check_wakeups_exact_and_herd():
    one_each = crafted((0.0, "a", "acquired"), (1.0, "a", "released"), (1.001, "b", "woke"), (1.01, "b", "acquired"),
                       (2.0, "b", "released"), (2.001, "c", "woke"), (2.01, "c", "acquired"))
    assert check_wakeups(one_each).ok
    herd = crafted((0.0, "a", "acquired"), (1.0, "a", "released"), (1.001, "b", "woke"), (1.002, "c", "woke"),
                   (1.01, "b", "acquired"), (2.0, "b", "released"), (2.001, "c", "woke"), (2.01, "c", "acquired"))
    verdict = check_wakeups(herd, expected_per_release=1)
    assert not verdict.ok and verdict.problems == ["hand-off 1: 2 waiter(s) woke, expected 1"]
    assert check_wakeups(herd, expected_per_release=[2, 1]).ok
    assert not check_wakeups(crafted((0.0, "a", "acquired"))).ok


def test_an_empty_record_proves_nothing():
    verdict = check_mutual_exclusion([])
    assert not verdict.ok and "nothing to judge" in verdict.explain()
    assert not check_mutual_exclusion(store_log((1.0, "a", 5, False))).ok
