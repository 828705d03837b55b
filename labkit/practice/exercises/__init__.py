"""Auto-checked exercises: the learner writes a lock, labkit runs it on real servers
under contention and faults and says, in plain words, what held and what broke.

    from labkit.practice.exercises import check_zookeeper_lock, check_etcd_wait
    report = check_zookeeper_lock((acquire, release), lab)
    print(report.explain()); assert report.passed

See ``zookeeper_exercise`` and ``etcd_exercise`` for the interfaces, ``examples`` for a
right and several wrong solutions, ``pitfalls`` for the predict-then-run experiments.
"""
from labkit.practice.exercises.etcd_exercise import check_etcd_wait
from labkit.practice.exercises.report import ExerciseError, PropertyVerdict, Report
from labkit.practice.exercises.zookeeper_exercise import check_zookeeper_lock

__all__ = ["check_zookeeper_lock", "check_etcd_wait", "Report", "PropertyVerdict", "ExerciseError"]
