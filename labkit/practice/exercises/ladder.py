"""Exercises without the answer: a skeleton to fill in, two hints, then the reference solution.

Each lesson's exercise cell holds a skeleton: the function's signature, a comment saying
what it must do, and ``...`` as its body. ``check_exercise`` runs the lesson's checker on it
on real servers and prints the checker's explanation of why it fails. The cell asserts
``report.passed or report.untouched``: an untouched skeleton shows its failure without
stopping "Run All" (the lesson's later experiments still run), and once the learner has
written a body the cell fails, with the checker's explanation, until the code passes.
Stuck? The ladder gives two hints, then the reference solution (``lesson_examples``,
``examples``):

    lesson.reveal_solution()  # a button: hint 1, hint 2, then the solution (text without widgets)
    lesson.show_solution()    # the same ladder in text: each call shows the next step

(``lesson = labkit.lesson("01")``: labkit/course binds the lesson's number; here it is the
``lesson`` argument, "01", or "09-etcd" for a lesson's second exercise.)

Unattended runs (nbval, ``./lab.sh book``): with ``LABKIT_EXERCISES=reference`` in the
environment (``notebooks/conftest.py`` sets it for every notebook test run), a cell whose
functions are still the untouched skeleton runs the checker twice: on the skeleton, which
must fail (else ``ExerciseError``: the checker could not tell), then on the reference
solution, whose report the cell asserts. So every unattended run checks both halves of
the exercise; a learner's own code is never swapped for the reference, flag or not.

Notebook 11 has two: ``"11-zookeeper"`` (the recipe) and ``"11-etcd"`` (the wait step).

What can fail: ``ExerciseError`` for a lesson with no exercise, or a skeleton that passes.
"""
from __future__ import annotations

import dis
import html
import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable

from labkit.errors import LabError
from labkit.practice.deck import widgets_available
from labkit.practice.exercises import examples
from labkit.practice.exercises import lesson_examples as ex
from labkit.practice.exercises.client_deadline import check_client_deadline
from labkit.practice.exercises.etcd_cas import check_etcd_cas
from labkit.practice.exercises.etcd_exercise import check_etcd_wait
from labkit.practice.exercises.fenced_sql import check_fenced_add
from labkit.practice.exercises.fenced_write import check_fenced_write
from labkit.practice.exercises.guarded_put import check_guarded_put
from labkit.practice.exercises.queue_depth import check_queue_depth
from labkit.practice.exercises.redis_unlock import check_redis_unlock
from labkit.practice.exercises.redlock_validity import check_redlock_validity
from labkit.practice.exercises.report import ExerciseError, Report
from labkit.practice.exercises.zookeeper_exercise import check_zookeeper_lock

FLAG = "LABKIT_EXERCISES"      # "reference": an untouched skeleton is followed by the reference solution


@dataclass(frozen=True)
class Exercise:
    lesson: str
    checker: Callable[..., Report]
    names: tuple[str, ...]                 # the functions the learner writes, as the notebook names them
    reference: tuple[Callable, ...]        # the reference solution, function for function
    hints: tuple[str, str]
    constants: tuple[tuple[str, str], ...] = ()   # (name, text) the solution defines first

    def solution_source(self) -> str:
        parts = [f'{name} = """{text}"""' for name, text in self.constants]
        for name, function in zip(self.names, self.reference):
            source = inspect.getsource(function)
            parts.append(source.replace(f"def {function.__name__}(", f"def {name}(", 1).rstrip())
        return "\n\n\n".join(parts)

    def learner_code(self, functions: tuple[Callable, ...]) -> Any:
        return functions[0] if len(functions) == 1 else tuple(functions)


EXERCISES = {exercise.lesson: exercise for exercise in (
    Exercise("01", check_redis_unlock, ("unlock",), (ex.redis_unlock,), (
        "A GET, then a DEL, are two commands: between them your key can expire and another client can take "
        "the lock. What does Redis run as one step?",
        "Send a Lua script with client.eval(script, 1, name, my_value): inside it, compare "
        "redis.call('GET', KEYS[1]) with ARGV[1] and call DEL only when they are equal."),
        (("COMPARE_AND_DELETE", ex.COMPARE_AND_DELETE),)),
    Exercise("02", check_zookeeper_lock, ("acquire", "release"),
             (examples.zookeeper_acquire, examples.zookeeper_release), (
        "Create your node with ephemeral=True and sequence=True under lock_path; list the children sorted by "
        "their 10-digit suffix: if yours is first, you hold the lock. release deletes your node.",
        "Otherwise watch only the node just before yours (client.exists(path, watch=...)) and wait for it to "
        "fire; then list the children again, because the node that went may be a waiter that died, not the "
        "holder. If your own node is gone, your session expired: raise.")),
    Exercise("03", check_etcd_cas, ("add_one",), (ex.etcd_add_one,), (
        "client.get(key) returns the value and its metadata; meta.mod_revision is the revision of the key's "
        "last write. Write only if it has not changed since your read.",
        "client.transaction(compare=[client.transactions.mod(key) == meta.mod_revision], "
        "success=[client.transactions.put(key, new_value)], failure=[]) returns (succeeded, responses); when "
        "succeeded is False somebody wrote in between: read again and retry, in a loop.")),
    Exercise("04", check_fenced_write, ("fenced_put",), (ex.fenced_put,), (
        "Comparing the token in Python, then writing, is two steps: a newer holder can write in between. "
        "Do the comparison and both writes inside one Lua script (client.eval).",
        "In the script: highest = tonumber(redis.call('GET', KEYS[2])); if highest ~= nil and the token is "
        "lower, return 0; else SET KEYS[2] to the token and KEYS[1] to the value and return 1. Call it with "
        "the two keys f'{name}:value' and f'{name}:highest-token'."),
        (("FENCED_PUT", ex.FENCED_PUT),)),
    Exercise("05", check_guarded_put, ("put_if_owner",), (ex.put_if_owner,), (
        "A get of the lock key, then a put, are two requests: the lease can be revoked between them. etcd can "
        "compare and write in one transaction.",
        "compare=[client.transactions.create(lock_key) == my_revision], success=[client.transactions.put(key, "
        "value)], failure=[]; return the first item client.transaction returns.")),
    Exercise("06", check_queue_depth, ("waiters",), (ex.waiters,), (
        "Every contender is one child node of lock_path. Which one of them is not waiting?",
        "The lowest child holds the lock: count the children (client.get_children(lock_path)) minus one, "
        "never below zero.")),
    Exercise("07", check_client_deadline, ("stop_at",), (ex.stop_at,), (
        "When did the server restart the lease's timer for the keep-alive you sent? Not before you sent it, "
        "and not after its reply reached you.",
        "Count from the send: the server received the request at or after sent_at, so the lease lasts until "
        "sent_at + ttl at the earliest; stop a margin before that.")),
    Exercise("08", check_redlock_validity, ("validity_ms",), (ex.validity_ms,), (
        "The keys started expiring on the first instance while you were still asking the others: take the "
        "time the acquire took (elapsed_ms) off the TTL.",
        "Then take off the drift allowance for instances whose clocks run a little fast: 1 % of the TTL "
        "plus 2 ms.")),
    Exercise("10", check_fenced_add, ("fenced_add",), (ex.fenced_add,), (
        "A fenced UPDATE refuses an older token, but a read-modify-write reads first: between your SELECT and "
        "your UPDATE the row still carries the old token. What could you change in the row before you read it?",
        "Start the transaction with a claim: UPDATE {table} SET token = %s WHERE key = %s AND token <= %s. If "
        "it matched no row (rowcount 0), return False; else read the value and write value + delta, all "
        "inside one `with conn.transaction():`.")),
    Exercise("11-zookeeper", check_zookeeper_lock, ("acquire", "release"),
             (examples.zookeeper_acquire, examples.zookeeper_release), (
        "Four steps: join the queue with an ephemeral sequential node; the lowest node holds; otherwise "
        "wait on one node; when it goes, look again. Which node, and why look again?",
        "Watch the node just before yours (client.exists(path, watch=...)), not the parent: a parent watch "
        "wakes every waiter on every release. After it fires, list the children again: the node that went "
        "may be a waiter whose session ended while the holder still holds.")),
    Exercise("11-etcd", check_etcd_wait, ("wait_for_turn",), (examples.etcd_wait_for_turn,), (
        "Wait on one key only: not the holder's (each release would wake every waiter), but the youngest "
        "key older than yours, the one just ahead of you in etcd.queue(prefix).",
        "When etcd.wait_for_delete(that key) returns, do not return yet: list the queue again, because the "
        "key that went may belong to a waiter whose lease ended; return only when no key older than yours "
        "is left.")),
)}

STEPS = ("hint 1 of 2", "hint 2 of 2", "the reference solution")
_shown: dict[str, int] = {}           # lesson -> steps of the ladder shown in this kernel


def exercise(lesson: str) -> Exercise:
    if lesson not in EXERCISES:
        raise ExerciseError(f"lesson {lesson!r} has no exercise", hint="one of: " + ", ".join(EXERCISES))
    return EXERCISES[lesson]


def next_step(lesson: str) -> tuple[str, str]:
    """(what it is, its text): the next rung of the ladder; the solution stays on the last."""
    item = exercise(lesson)
    step = min(_shown.get(lesson, 0), len(STEPS) - 1)
    _shown[lesson] = step + 1
    return STEPS[step], (item.hints[step] if step < len(item.hints) else item.solution_source())


def show_solution(lesson: str) -> str:
    """The ladder in text: the first call prints hint 1, the second hint 2, then the solution."""
    what, text = next_step(lesson)
    print(f"Lesson {lesson}, {what}:\n\n{text}")
    if what != STEPS[-1]:
        print(f"\n(call {show_solution_call(lesson)} again for the {STEPS[_shown[lesson]]})")
    return text


def show_solution_call(lesson: str) -> str:
    """How a notebook climbs the ladder in text: through its lesson handle (labkit/course),
    ``part`` naming a lesson's second exercise ("11-etcd": ``lesson.show_solution("etcd")``)."""
    part = lesson.partition("-")[2]
    return f'lesson.show_solution("{part}")' if part else "lesson.show_solution()"


def is_skeleton(function: Callable) -> bool:
    """True for a function whose body does nothing (``...``, ``pass`` or a docstring only):
    its bytecode only returns None."""
    code = getattr(function, "__code__", None)
    if code is None:
        return False
    return all(step.opname in _NOTHING_OPS and (step.opname not in ("LOAD_CONST", "RETURN_CONST") or step.argval is None)
               for step in dis.get_instructions(code))


_NOTHING_OPS = {"RESUME", "NOP", "LOAD_CONST", "RETURN_CONST", "RETURN_VALUE", "CACHE"}


def unattended() -> bool:
    return os.environ.get(FLAG, "") == "reference"


def check_exercise(lesson: str, *functions: Callable, lab: Any, **options: Any) -> Report:
    """Run lesson ``lesson``'s checker on the learner's ``functions`` and print its explanation.
    Unattended (``LABKIT_EXERCISES=reference``) on an untouched skeleton: check that the
    skeleton fails, then check and return the reference solution (LabError with the checker's
    explanation if it fails)."""
    item = exercise(lesson)
    report = item.checker(item.learner_code(functions), lab, **options)
    print(report.explain())
    skeleton = all(is_skeleton(function) for function in functions)
    if skeleton and report.passed:
        raise ExerciseError(f"lesson {lesson}'s checker passed the empty skeleton: it cannot tell right from wrong",
                            hint="the checker needs a case the skeleton fails")
    if not (skeleton and unattended()):
        report.untouched = skeleton
        if skeleton:
            print(f"\nThis is the skeleton, untouched: write the body and run the cell again (until then it does "
                  f"not stop Run All). Stuck? The panel above the cell, or {show_solution_call(lesson)}: two hints, "
                  "then the solution.")
        elif not report.passed:
            print(f"\nNot passed yet. Stuck? The panel above the cell, or {show_solution_call(lesson)}: two hints, "
                  "then the solution.")
        return report
    print(f"\n{FLAG}=reference and the skeleton is untouched: it failed as it should ({', '.join(report.causes)}). "
          "The reference solution, checked the same way:\n")
    reference = item.checker(item.learner_code(item.reference), lab, **options)
    explanation = reference.explain()
    print(explanation)
    if not reference.passed:
        # the run's report (nbval's) shows a failing cell's error, not what it printed: say it here
        raise LabError(f"lesson {lesson}'s reference solution failed its checker:\n{explanation}",
                       hint="the checker or the reference is wrong, or the machine was too loaded for its patience")
    return reference


def reveal_solution(lesson: str, widgets: bool | None = None):
    """The ladder as a button (hint 1, hint 2, the solution); without widgets, how to climb it."""
    exercise(lesson)
    if widgets is None:
        widgets = widgets_available()
    if not widgets:
        print(f"Stuck on the exercise below? {show_solution_call(lesson)} gives hint 1; call it again for hint 2, "
              "then the reference solution.")
        return None
    return SolutionLadder(lesson)


class SolutionLadder:
    """One button that climbs the ladder: each click shows the next hint, the last the solution."""

    def __init__(self, lesson: str):
        import ipywidgets as widgets

        self.lesson = lesson
        self.button = widgets.Button(description=f"Show {STEPS[min(_shown.get(lesson, 0), 2)]}", icon="lightbulb-o",
                                     layout=widgets.Layout(width="auto"))
        self.shown = widgets.HTML()
        self.button.on_click(lambda _: self.climb())
        self.box = widgets.VBox([widgets.HTML("<i>Stuck? Two hints, then the reference solution.</i>"),
                                 self.button, self.shown])

    def climb(self) -> None:
        what, text = next_step(self.lesson)
        body = f"<pre>{html.escape(text)}</pre>" if what == STEPS[-1] else f"<p>{html.escape(text)}</p>"
        self.shown.value += f"<p><b>{html.escape(what.capitalize())}</b></p>{body}"
        if what == STEPS[-1]:
            self.button.disabled = True
            self.button.description = "Solution shown"
        else:
            self.button.description = f"Show {STEPS[_shown[self.lesson]]}"

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)
