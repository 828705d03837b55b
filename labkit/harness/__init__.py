"""The harness several rooms drive experiments with: ``handoff`` (N contenders, one
release at a time, each once the waiters are settled: the one wakeup count of the lessons,
the bench, the pitfalls and the bench at scale), ``queue`` (lock client processes that
queue in a known order and are served in turn: the lessons, the health census) and
``frozen_holder`` (a holder frozen past its lease while a successor takes the lock, then its
late write: notebooks 01, 04 and 08). Lessons import it; it imports no lesson (docs/ARCHITECTURE.md)."""
