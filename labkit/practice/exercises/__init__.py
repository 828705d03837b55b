"""Auto-checked exercises: the learner writes a lock, labkit runs it on real servers
under contention and faults and says, in plain words, what held and what broke.

    from labkit.practice.exercises import check_zookeeper_lock, check_etcd_wait
    report = check_zookeeper_lock((acquire, release), lab)
    print(report.explain()); assert report.passed

See ``zookeeper_exercise`` and ``etcd_exercise`` for the interfaces, ``examples`` for a
right and several wrong solutions, ``pitfalls`` for the predict-then-run experiments.
``LESSON_EXERCISES`` names the one exercise of each lesson notebook (01–08), and
``lesson_examples`` holds their right and wrong solutions. The notebooks hold skeletons, not
solutions: ``ladder`` checks them, gives two hints, then the reference solution.
"""
from labkit.practice.exercises.client_deadline import check_client_deadline
from labkit.practice.exercises.etcd_cas import check_etcd_cas
from labkit.practice.exercises.etcd_exercise import check_etcd_wait
from labkit.practice.exercises.fenced_write import check_fenced_write
from labkit.practice.exercises.guarded_put import check_guarded_put
from labkit.practice.exercises.queue_depth import check_queue_depth
from labkit.practice.exercises.redis_unlock import check_redis_unlock
from labkit.practice.exercises.redlock_validity import check_redlock_validity
from labkit.practice.exercises.report import ExerciseError, PropertyVerdict, Report
from labkit.practice.exercises.zookeeper_exercise import check_zookeeper_lock

# lesson notebook number -> (checker, what the learner writes)
LESSON_EXERCISES = {
    "01": (check_redis_unlock, "unlock(client, name, my_value): delete the key only if it is still mine"),
    "02": (check_zookeeper_lock, "acquire(client, lock_path) and release(client, my_node): the recipe"),
    "03": (check_etcd_cas, "add_one(client, key): a compare-and-swap transaction, retried"),
    "04": (check_fenced_write, "fenced_put(client, name, token, value): the store refuses lower tokens"),
    "05": (check_guarded_put, "put_if_owner(client, lock_key, my_revision, key, value): write only while mine"),
    "06": (check_queue_depth, "waiters(client, lock_path): how many wait for the lock"),
    "07": (check_client_deadline, "stop_at(sent_at, replied_at, ttl, margin): the holder's own deadline"),
    "08": (check_redlock_validity, "validity_ms(ttl_ms, elapsed_ms): how long a Redlock holder may act"),
}

__all__ = ["check_zookeeper_lock", "check_etcd_wait", "check_redis_unlock", "check_etcd_cas", "check_fenced_write",
           "check_guarded_put", "check_queue_depth", "check_client_deadline", "check_redlock_validity",
           "LESSON_EXERCISES", "Report", "PropertyVerdict", "ExerciseError"]
