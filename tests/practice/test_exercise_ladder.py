"""Exercises without the answer: each lesson's exercise cell holds a skeleton (no solution in
the notebook), a hint ladder gives two hints before the reference solution, and the
unattended flag makes a notebook run check the skeleton fails and the reference passes.
The skeletons and references on real servers: tests/practice/test_practice_exercises.py."""
import ast
import json
import re
from pathlib import Path

import pytest

from labkit.errors import LabError
from labkit.practice.exercises import ladder
from labkit.practice.exercises.ladder import (EXERCISES, FLAG, Exercise, ExerciseError, SolutionLadder, check_exercise,
                                              is_skeleton, reveal_solution, show_solution)
from labkit.practice.exercises.report import Report

pytestmark = pytest.mark.no_servers

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def exercise_cell(lesson: str) -> tuple[str, str, str]:
    """(the id of the cell before it, the exercise cell's source, the next cell's) in the
    notebook of ``lesson`` ("01" ... "08", "11-zookeeper", "11-etcd")."""
    [notebook] = NOTEBOOKS.glob(f"{lesson[:2]}_*.ipynb")
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    part = lesson.partition("-")[2]

    def asks(source: str) -> bool:   # the old shape, or through labkit/course's handle
        return f'check_exercise("{lesson}"' in source or ("lesson.check_exercise(" in source and (
            f'part="{part}"' in source if part else "part=" not in source))

    [index] = [number for number, cell in enumerate(cells) if cell["cell_type"] == "code" and asks("".join(cell["source"]))]
    return cells[index - 1]["id"], "".join(cells[index]["source"]), "".join(cells[index + 1]["source"])


def skeleton_functions(lesson: str) -> list:
    """The functions the notebook's exercise cell defines, compiled as the notebook has them."""
    _, source, _ = exercise_cell(lesson)
    definitions = [node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]
    namespace: dict = {}
    exec(compile(ast.Module(body=definitions, type_ignores=[]), f"<lesson {lesson}>", "exec"), namespace)
    return [namespace[node.name] for node in definitions]


@pytest.fixture(autouse=True)
def fresh_ladder(monkeypatch):
    monkeypatch.setattr(ladder, "_shown", {})
    monkeypatch.delenv(FLAG, raising=False)


@pytest.mark.parametrize("lesson", sorted(EXERCISES))
def test_the_notebook_cell_holds_a_skeleton_and_the_hints_come_first(lesson):
    before, source, after = exercise_cell(lesson)
    functions = skeleton_functions(lesson)
    assert [function.__name__ for function in functions] == list(EXERCISES[lesson].names)
    assert all(is_skeleton(function) for function in functions), f"lesson {lesson}'s cell gives the answer away"
    assert re.search(r"assert (\w+)\.passed or \1\.untouched", source + "\n" + after), "the cell must fail a learner's code that fails"
    assert before == f"exercise-{lesson}-hints", "the hint ladder's cell comes right before the exercise"


@pytest.mark.parametrize("lesson", sorted(EXERCISES))
def test_the_reference_solution_compiles_into_the_names_the_notebook_uses(lesson):
    namespace: dict = {}
    exec(EXERCISES[lesson].solution_source(), namespace)
    for name in EXERCISES[lesson].names:
        assert callable(namespace[name]) and not is_skeleton(namespace[name])


def test_two_hints_then_the_solution_in_text(capsys):
    first, second, solution, again = (show_solution("01") for _ in range(4))
    out = capsys.readouterr().out
    assert (first, second) == EXERCISES["01"].hints
    assert "def unlock(" in solution and "COMPARE_AND_DELETE" in solution and again == solution
    assert out.index("hint 1 of 2") < out.index("hint 2 of 2") < out.index("the reference solution")
    with pytest.raises(ExerciseError, match="no exercise"):
        show_solution("00")


def test_the_reveal_button_climbs_the_same_ladder():
    panel = reveal_solution("04", widgets=True)
    assert isinstance(panel, SolutionLadder) and panel.shown.value == ""
    panel.button.click()
    assert EXERCISES["04"].hints[0] in panel.shown.value and "def fenced_put" not in panel.shown.value
    panel.button.click()
    assert EXERCISES["04"].hints[1].split(":")[0] in panel.shown.value and "<pre>" not in panel.shown.value
    assert panel.button.description == "Show the reference solution"
    panel.button.click()
    assert "def fenced_put(" in panel.shown.value and panel.button.disabled


def test_without_widgets_the_reveal_cell_shows_nothing_of_the_answer(capsys):
    assert reveal_solution("02", widgets=False) is None
    out = capsys.readouterr().out
    assert "lesson.show_solution()" in out and "ephemeral" not in out


def test_a_skeleton_is_a_body_that_does_nothing():
    def dots(a, b): ...

    def passes(a):
        pass

    def documented(a):
        """Only a docstring."""

    def works(a):
        return a + 1

    assert is_skeleton(dots) and is_skeleton(passes) and is_skeleton(documented)
    assert not is_skeleton(works) and not is_skeleton(len)


# ---- check_exercise's logic, with a checker that needs no server ----------------------------------------
def judge_by_answer(function, lab):
    report = Report("fake exercise", properties=("answers 42",))
    answer = function()
    report.judge("answers 42", answer == 42, f"said {answer!r}", None if answer == 42 else "wrong answer")
    return report


def right():
    return 42


def skeleton():
    ...


def wrong():
    return 41


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(EXERCISES, "99", Exercise("99", judge_by_answer, ("answer",), (right,), ("one", "two")))


def test_the_skeleton_fails_with_the_checkers_words_and_does_not_stop_run_all(fake, capsys):
    report = check_exercise("99", skeleton, lab=None)
    assert not report.passed and report.untouched and report.causes == ["wrong answer"]
    assert "said None" in capsys.readouterr().out


def test_the_learners_own_code_is_judged_never_replaced(fake, monkeypatch):
    monkeypatch.setenv(FLAG, "reference")
    report = check_exercise("99", wrong, lab=None)
    assert not report.passed and not report.untouched


def test_unattended_the_skeleton_must_fail_and_the_reference_is_checked(fake, monkeypatch, capsys):
    monkeypatch.setenv(FLAG, "reference")
    report = check_exercise("99", skeleton, lab=None)
    assert report.passed and not report.untouched
    out = capsys.readouterr().out
    assert out.index("said None") < out.index("skeleton is untouched") < out.index("said 42")


def test_a_checker_that_passes_the_skeleton_is_an_error(monkeypatch):
    monkeypatch.setitem(EXERCISES, "98", Exercise("98", lambda function, lab: judge_by_answer(lambda: 42, lab),
                                                  ("answer",), (right,), ("one", "two")))
    with pytest.raises(ExerciseError, match="cannot tell"):
        check_exercise("98", skeleton, lab=None)


def test_unattended_a_failing_reference_raises_with_the_checkers_explanation(monkeypatch):
    # nbval's report shows a failing cell's error, not what the cell printed
    monkeypatch.setenv(FLAG, "reference")
    monkeypatch.setitem(EXERCISES, "97", Exercise("97", judge_by_answer, ("answer",), (wrong,), ("one", "two")))
    with pytest.raises(LabError, match=r"(?s)reference solution failed its checker.*said 41"):
        check_exercise("97", skeleton, lab=None)
