"""The scale run's targets, computed from given numbers (no servers): the etcd hand-off is
also held against the op that starts from quiet (issue 36: p50 <= 1.5x that op)."""
from labkit.bench.scale.report import QUIET_TARGET, scale_targets


def results(handoff_p50: float, quiet_p50: float) -> dict:
    return {"counts": [1000], "uncontended": {"etcd EtcdMutex": {"p50_ms": 2.0}},
            "uncontended_after_quiet": {"etcd EtcdMutex": {"p50_ms": quiet_p50}},
            "handoff": [{"scenario": "etcd EtcdMutex", "n": 1000, "herd": False, "wakeups": [1, 1],
                         "handoff_p50_ms": handoff_p50, "left_behind": []}]}


def quiet_target(found: list[dict]) -> dict:
    return next(target for target in found if "of quiet" in target["target"])


def test_the_etcd_hand_off_is_held_against_the_op_after_quiet():
    assert quiet_target(scale_targets(results(handoff_p50=3.0, quiet_p50=2.0)))["met"] is (3.0 / 2.0 <= QUIET_TARGET)
    missed = quiet_target(scale_targets(results(handoff_p50=3.2, quiet_p50=2.0)))
    assert missed["met"] is False and "1.6x" in missed["measured"], missed


def test_no_quiet_yardstick_no_such_target():
    plain = results(handoff_p50=3.0, quiet_p50=2.0)
    del plain["uncontended_after_quiet"]
    assert not [target for target in scale_targets(plain) if "of quiet" in target["target"]]
