"""Read aloud in a real browser (Debian's Chromium through Playwright): the control's static
copy, the very HTML the course book embeds, loads the same module the JupyterLab widget runs.
``window.speechSynthesis`` is replaced by a recorder, so the test hears what would be said:
play queues the first section's sentences and no code, next moves on, pause stops, the speed
reaches the utterances, a finished section hands on to the next; without speech synthesis
the control says so. A picture of the control playing is kept in artifacts/read_aloud.png."""
import html
import json

import pytest

from labkit.book import NOTEBOOKS, ROOT
from labkit.widgets.read_aloud import as_state, static_html
from labkit.widgets.speech import lesson_sections

from helpers import CHROMIUM, CHROMIUM_ARGS, playwright_api

pytestmark = [pytest.mark.browser, pytest.mark.no_servers]   # browser: skipped without Chromium, failed where expected (tests/needs.py)
LESSON = NOTEBOOKS / "00_start_here.ipynb"

RECORDER = """
window.calls = [];
window.utterances = [];
window.SpeechSynthesisUtterance = class { constructor(text) { this.text = text; this.rate = 1; } };
Object.defineProperty(window, "speechSynthesis", { configurable: true, value: {
  speak(utterance) { window.calls.push(["speak", utterance.text, utterance.rate]); window.utterances.push(utterance); },
  pause() { window.calls.push(["pause"]); }, resume() { window.calls.push(["resume"]); },
  cancel() { window.calls.push(["cancel"]); }, getVoices() { return []; } } });
"""
NO_SPEECH = """
delete window.speechSynthesis; delete Window.prototype.speechSynthesis;
delete window.SpeechSynthesisUtterance;
"""


def first_heading(notebook):
    """The lesson's own title as its markdown writes it (what JupyterLab shows as the page's h1)."""
    first = next(cell for cell in json.loads(notebook.read_text())["cells"] if cell["cell_type"] == "markdown")
    return "".join(first["source"]).splitlines()[0].lstrip("#").strip()


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    sections = as_state(lesson_sections(LESSON))
    page = tmp_path_factory.mktemp("read_aloud") / "page.html"
    page.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"><title>read aloud</title></head><body>'
                    f"<h1>{html.escape(first_heading(LESSON))}</h1>"
                    + static_html(sections[0]["title"], sections) + "</body></html>", encoding="utf-8")
    return page, sections


@pytest.fixture(scope="module")
def browser():
    with playwright_api().sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_page(browser, page_file, script):
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(script)
    page.goto(page_file.as_uri())
    page.wait_for_selector(".labkit-read-aloud", timeout=15_000)
    return page, errors


def spoken_since(page, start):
    return [call for call in page.evaluate("window.calls")[start:] if call[0] == "speak"]


def test_play_next_pause_and_speed_with_a_recorded_synthesizer(browser, page_file):
    path, sections = page_file
    code = [line.strip() for cell in json.loads(LESSON.read_text())["cells"] if cell["cell_type"] == "code"
            for line in "".join(cell["source"]).splitlines() if line.strip()]
    page, errors = open_page(browser, path, RECORDER)
    control = page.locator(".labkit-read-aloud")
    assert "Section 1 of" in control.inner_text()

    page.get_by_role("button", name="▶ play").click()
    said = spoken_since(page, 0)
    assert [call[1] for call in said] == sections[0]["sentences"]
    assert not [line for line in code if any(line in call[1] for call in said)]
    assert page.evaluate("window.calls")[0] == ["cancel"]        # whatever spoke before is silenced first
    page.evaluate("window.utterances[2].onstart()")              # the engine reaches the third sentence
    assert page.locator(".labkit-read-text mark").inner_text().strip() == sections[0]["sentences"][2]
    assert page.locator("h1.labkit-reading").count() == 1        # the page's own heading is outlined
    (ROOT / "artifacts").mkdir(exist_ok=True)
    page.locator(".labkit-read-aloud").screenshot(path=str(ROOT / "artifacts" / "read_aloud.png"))

    before = len(page.evaluate("window.calls"))
    page.get_by_role("button", name="next »").click()
    assert page.evaluate("window.calls")[before] == ["cancel"]
    assert [call[1] for call in spoken_since(page, before)] == sections[1]["sentences"]
    assert control.get_attribute("data-section") == "1" and f"Section 2 of {len(sections)}" in control.inner_text()

    before = len(page.evaluate("window.calls"))
    page.locator(".labkit-read-aloud select").select_option("1.5")
    assert {call[2] for call in spoken_since(page, before)} == {1.5}

    # a finished section hands on to the next by itself
    before = len(page.evaluate("window.calls"))
    page.evaluate("window.utterances[window.utterances.length - 1].onend()")
    assert [call[1] for call in spoken_since(page, before)] == sections[2]["sentences"]
    assert control.get_attribute("data-section") == "2"

    before = len(page.evaluate("window.calls"))
    page.get_by_role("button", name="pause", exact=True).click()
    assert page.evaluate("window.calls")[before:] == [["cancel"]]
    assert control.get_attribute("data-playing") == "false"
    page.evaluate("window.utterances[window.utterances.length - 1].onend()")  # a late end of the cancelled queue
    assert len(page.evaluate("window.calls")) == before + 1 and control.get_attribute("data-section") == "2"

    page.get_by_role("button", name="« previous").click()
    assert control.get_attribute("data-section") == "1" and len(page.evaluate("window.calls")) == before + 1
    assert errors == []
    page.close()


def test_without_speech_synthesis_the_control_says_so(browser, page_file):
    path, sections = page_file
    page, errors = open_page(browser, path, NO_SPEECH)
    assert page.evaluate("'speechSynthesis' in window") is False
    missing = page.locator(".labkit-read-missing")
    assert "needs speech synthesis" in missing.inner_text()
    assert page.get_by_role("button", name="▶ play").is_disabled()
    page.get_by_role("button", name="next »").click()                # the text can still be read by eye
    assert sections[1]["sentences"][0] in page.locator(".labkit-read-text").inner_text()
    assert errors == []
    page.close()
