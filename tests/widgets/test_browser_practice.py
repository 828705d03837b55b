"""Practice in a real browser (issue #27): Jupyter Lab on 127.0.0.1, Debian's Chromium driven by
Playwright, as tests/widgets/test_browser.py does.

- Lesson 00 run cell by cell: two of its four predictions answered in their widgets (a choice
  clicked, then "Lock in"), the other two left alone; the "your predictions" cell at the end
  reads 4 asked, 2 made, 2 skipped, and its right count matches the widgets' verdicts.
- An exercise's reveal: the hint cell of lesson 01 alone, its button clicked three times:
  hint 1, hint 2, then the reference solution.
- A scenario's worked answers (issue #37): hidden while the learner's box is empty (the button
  is off), then mid, senior, staff in that order; and the book's static copy keeps each level
  shut until something is written in its box (book.js, from disk).

Screenshots go to artifacts/. Skips like tests/widgets/test_browser.py without Chromium or Playwright.
"""
import contextlib
import json
import re

import nbformat
import pytest

from test_browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, REPO, open_lab, run_cell, serve_jupyter
from test_browser import pytestmark  # noqa: F401  (browser, slow: tests/needs.py skips it without Chromium)

from helpers import chromium_browser, open_watched, playwright_api
from labkit.practice.exercises.ladder import EXERCISES
from labkit.practice.worked_answers import WORDS_FIRST, answers_html, worked_answers

LESSON = REPO / "notebooks" / "00_start_here.ipynb"
# the two predictions of lesson 00 answered, and the choice clicked in each
ANSWERS = {"Which system gives no fencing token for its first lock?": "Redis",
           "After the close and the revoke, when does the observer see the node and the key go?":
               "never: nobody called release()"}
SURE_OF = "Which system gives no fencing token for its first lock?"     # locked in 90 % sure


def predict_cells(path) -> dict[str, int]:
    """{question: index of the cell that asks it} in the notebook at ``path``."""
    found = {}
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        match = re.search(r'predict\(\s*"([^"]+)"', "".join(cell["source"]))
        if cell["cell_type"] == "code" and match:
            found[match.group(1)] = index
    return found


def open_notebook(playwright, url):
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    open_lab(page, url)
    return browser, page


@contextlib.contextmanager
def widget_of_one_cell(tmp_path, notebook, name: str):
    """Save ``notebook`` as ``<name>.ipynb``, open it in JupyterLab and run its one cell; yield
    (page, the cell's output area, its button) once the button shows. A screenshot goes to
    ARTIFACTS: ``<name>.png`` after the block, ``<name>_failure.png`` when it raised."""
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(notebook, path)
    ARTIFACTS.mkdir(exist_ok=True)
    with serve_jupyter(tmp_path, [path]) as [url], playwright_api().sync_playwright() as playwright:
        browser, page = open_notebook(playwright, url)
        try:
            run_cell(page, 0, 1)
            output = page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".jp-OutputArea")
            button = output.locator("button")
            button.wait_for(timeout=30_000)
            yield page, output, button
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"{name}_failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def test_two_predictions_answered_in_a_lesson_show_in_its_summary(tmp_path):
    asked_in = predict_cells(LESSON)
    assert set(ANSWERS) <= set(asked_in) and len(asked_in) == 4, asked_in
    count = len(json.loads(LESSON.read_text(encoding="utf-8"))["cells"])
    ARTIFACTS.mkdir(exist_ok=True)
    with serve_jupyter(tmp_path, [LESSON]) as [url], playwright_api().sync_playwright() as playwright:
        browser, page = open_notebook(playwright, url)
        cells = page.locator(".jp-Notebook .jp-Cell")
        try:
            for index in range(count):
                run_cell(page, index, count)
                question = next((q for q, at in asked_in.items() if at == index), None)
                if question in ANSWERS:
                    cell = cells.nth(index)
                    cell.locator(".widget-radio-box label", has_text=ANSWERS[question]).click()
                    sure = "90 %" if question == SURE_OF else ""
                    if sure:                # how sure: one answer says 90 %, the other says nothing
                        cell.locator("button", has_text=sure).click()
                    cell.locator("button", has_text="Lock in").click()
                    cell.get_by_text(f"Locked in: {ANSWERS[question]}{', ' + sure + ' sure' if sure else ''}"
                                     ).wait_for(timeout=30_000)
            summary = cells.nth(count - 1).locator(".jp-OutputArea").inner_text()
            verdicts = [cells.nth(at).locator(".jp-OutputArea").inner_text() for at in asked_in.values()]
            page.screenshot(path=str(ARTIFACTS / "lesson_predictions.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "lesson_predictions_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    right = sum(1 for text in verdicts if "You predicted" in text and ": right." in text)
    assert sum("You predicted" in text for text in verdicts) == 2, verdicts
    assert sum("Skipped" in text for text in verdicts) == 2, verdicts
    assert f"lesson 00: 4 asked, 2 made, {right} right" in summary, summary
    assert f"{2 - right} wrong, 2 skipped" in summary, summary
    sure_right = ": right." in verdicts[list(asked_in).index(SURE_OF)]
    # the 90 % answer is the one rated guess: its Brier score is (0.9 - 1)² or (0.9 - 0)²
    assert f"Brier score {0.01 if sure_right else 0.81:.3f} over 1 rated guess" in summary, summary
    assert "1 more guess said no confidence" in summary, summary


def test_an_exercise_reveal_shows_two_hints_then_the_solution(tmp_path):
    lesson = json.loads((REPO / "notebooks" / "01_redis_vs_consensus.ipynb").read_text(encoding="utf-8"))
    [hints_cell] = [cell for cell in lesson["cells"] if cell["id"] == "exercise-01-hints"]
    notebook = nbformat.v4.new_notebook(metadata=lesson["metadata"])    # its kernel: no "select a kernel" dialog
    # the lesson's handle first (labkit/course): the hints cell calls lesson.reveal_solution()
    notebook.cells = [nbformat.v4.new_code_cell('import labkit\nlesson = labkit.lesson("01")\n'
                                                + "".join(hints_cell["source"]))]
    first, second = EXERCISES["01"].hints
    with widget_of_one_cell(tmp_path, notebook, "exercise_reveal") as (page, output, button):
        assert "def unlock" not in output.inner_text()
        shown = []
        for label in ("Show hint 1 of 2", "Show hint 2 of 2", "Show the reference solution"):
            page.wait_for_function("([el, label]) => el.innerText.includes(label)",
                                   arg=[button.element_handle(), label], timeout=30_000)
            button.click()
            page.wait_for_function("([el, n]) => el.querySelectorAll('b').length >= n",
                                   arg=[output.element_handle(), len(shown) + 1], timeout=30_000)
            shown.append(output.inner_text())
    assert first[:60] in shown[0] and second[:40] not in shown[0] and "def unlock" not in shown[0]
    assert second[:40] in shown[1] and "def unlock" not in shown[1]
    assert "def unlock(client, name, my_value):" in shown[2] and "COMPARE_AND_DELETE" in shown[2]


MINE = ("I would claim the day with a unique row, fence each invoice with a token the database checks, "
        "and page billing at five if no completion record exists.")


def test_worked_answers_stay_hidden_until_the_learner_wrote_then_show_in_order(tmp_path):
    notebook = nbformat.v4.new_notebook(metadata=json.loads((REPO / "notebooks" / "01_redis_vs_consensus.ipynb")
                                                            .read_text(encoding="utf-8"))["metadata"])
    notebook.cells = [nbformat.v4.new_code_cell('from labkit.practice.worked_answers import reveal_answers\n'
                                                'reveal_answers("daily-job-once")')]
    answers = worked_answers("daily-job-once")
    with widget_of_one_cell(tmp_path, notebook, "worked_answers") as (page, output, button):
        before = output.inner_text()
        disabled_before = button.is_disabled()
        output.locator("textarea").fill(MINE)
        page.wait_for_function("el => !el.disabled", arg=button.element_handle(), timeout=30_000)
        for shown in range(1, 4):
            button.click()
            page.wait_for_function("([el, n]) => el.querySelectorAll('ol').length >= n",
                                   arg=[output.element_handle(), shown], timeout=30_000)
        after = output.inner_text()
    assert disabled_before and f"Write {WORDS_FIRST} words first" in before
    assert not any(answer.says[0][:40] in before for answer in answers.values())
    at = [after.index(answers[level].says[0][:40]) for level in ("mid", "senior", "staff")]
    assert at == sorted(at), "mid, then senior, then staff"


def test_the_books_copy_opens_a_worked_answer_only_after_the_box_holds_words(tmp_path):
    (tmp_path / "book.js").write_text((REPO / "labkit" / "book" / "book.js").read_text(encoding="utf-8"))
    page_file = tmp_path / "answers.html"
    page_file.write_text(f"<html><body>{answers_html('expiry-storm-incident')}<script src='book.js'></script>"
                         "</body></html>", encoding="utf-8")
    first = worked_answers("expiry-storm-incident")["mid"].says[0][:40]
    with chromium_browser() as browser:
        page, _, errors = open_watched(browser, page_file)
        summary = page.locator("details.worked-answer summary").first
        summary.click()
        shut = not page.locator("details.worked-answer").first.evaluate("el => el.open")
        hidden = not page.get_by_text(first).is_visible()
        page.fill("textarea.worked-mine", MINE)
        summary.click()
        opened = page.locator("details.worked-answer").first.evaluate("el => el.open")
        shown = page.get_by_text(first).is_visible()
    assert not errors, errors
    assert shut and hidden, "a click with an empty box must not open the answer"
    assert opened and shown
