"""A timed mock interview on screen: ``labkit.practice.cards.MockInterview`` with buttons and a clock.

    interview = Deck().mock_interview(n=5, seconds_per_card=90)
    show_mock_interview(interview)      # a panel; plain text instructions without a widget front-end

The panel asks one card at a time: "Next question" starts its clock, "Reveal" shows the
answer and the notebook section that proves it, "I got it" / "I missed it" grade it (in
the deck too, so the score carries over to the practice cards). Going over time is not an
error: the summary lists the cards answered late.

What can fail: nothing at display time; the clock is a daemon thread that runs only while
a card is open and stops when it is graded.
"""
from __future__ import annotations

import html
import threading

from labkit.practice.deck import MockInterview, senior_parts_html, widgets_available


class MockInterviewPanel:
    """Buttons and a clock for a ``MockInterview``."""

    def __init__(self, interview: MockInterview):
        import ipywidgets as widgets

        self.interview = interview
        self.question = widgets.HTML(f"<b>Mock interview:</b> {len(interview.cards)} questions, "
                                     f"{interview.seconds_per_card:.0f} s each. Answer aloud, then grade yourself.")
        self.clock = widgets.Label()
        self.answer = widgets.HTML()
        self.next_button = widgets.Button(description="Next question", button_style="primary")
        self.reveal_button = widgets.Button(description="Reveal", icon="eye", disabled=True)
        self.got_it_button = widgets.Button(description="I got it", button_style="success", disabled=True)
        self.missed_button = widgets.Button(description="I missed it", button_style="warning", disabled=True)
        self.next_button.on_click(lambda _: self.ask_next())
        self.reveal_button.on_click(lambda _: self.reveal())
        self.got_it_button.on_click(lambda _: self.grade(True))
        self.missed_button.on_click(lambda _: self.grade(False))
        buttons = widgets.HBox([self.next_button, self.reveal_button, self.got_it_button, self.missed_button])
        self.box = widgets.VBox([self.question, self.clock, buttons, self.answer])
        self._stop_clock = threading.Event()

    def ask_next(self) -> None:
        card = self.interview.next_card()
        if card is None:
            self._finish()
            return
        number = len(self.interview.results) + 1
        self.question.value = f"<b>Question {number} of {len(self.interview.cards)}:</b> {html.escape(card.question)}"
        self.answer.value = ""
        self.next_button.disabled = True
        self.reveal_button.disabled = False
        self.got_it_button.disabled = self.missed_button.disabled = True
        self._start_clock()

    def reveal(self) -> None:
        card = self.interview.current
        if card is None:
            return
        self.answer.value = f"<p>{html.escape(card.answer)}</p>{senior_parts_html(card)}{card.links_html()}"
        self.got_it_button.disabled = self.missed_button.disabled = False

    def grade(self, correct: bool) -> None:
        if self.interview.current is None or self.got_it_button.disabled:
            return                                    # grade only a revealed, open card
        self._stop_clock.set()
        result = self.interview.answer(correct)
        late = " (over time)" if result.over_time else ""
        self.clock.value = f"{'right' if correct else 'missed'} in {result.seconds:.0f} s{late}"
        self.reveal_button.disabled = self.got_it_button.disabled = self.missed_button.disabled = True
        self.next_button.disabled = False
        if self.interview.done:
            self._finish()

    def _finish(self) -> None:
        self._stop_clock.set()
        self.next_button.disabled = True
        self.question.value = "<b>Interview over.</b>"
        self.answer.value = "<pre>" + html.escape(self.interview.summary()) + "</pre>"

    def _start_clock(self) -> None:
        stop = self._stop_clock = threading.Event()

        def tick() -> None:
            while self.interview.current is not None:
                left = self.interview.time_left()
                self.clock.value = f"{left:.0f} s left" if left > 0 else "time is up: finish your sentence"
                if stop.wait(1.0):                    # one update a second, until the card is graded
                    return

        threading.Thread(target=tick, name="mock-interview-clock", daemon=True).start()

    def _repr_mimebundle_(self, **kwargs):
        return self.box._repr_mimebundle_(**kwargs)


def show_mock_interview(interview: MockInterview, widgets: bool | None = None):
    """The panel, or (without a widget front-end) the same interview driven by hand."""
    if widgets is None:
        widgets = widgets_available()
    if widgets:
        return MockInterviewPanel(interview)
    print(f"Mock interview: {len(interview.cards)} questions, {interview.seconds_per_card:.0f} s each.\n"
          "  card = interview.next_card(); print(card.question)   # starts the clock; answer aloud\n"
          "  print(card.answer)                                   # then check yourself\n"
          "  interview.answer(True)  # or False: stops the clock and grades the card\n"
          "  print(interview.summary())                           # when done")
    return None
