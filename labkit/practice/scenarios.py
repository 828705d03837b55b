"""Scenario interviews: one open design question for about 45 minutes, with follow-ups
on a clock and a rubric the learner sees only at the end, then scores against: each key
point at the level the answer reached (mid, senior, staff), minus the red flags it raised
(``labkit.practice.rubric``). The debrief shows the score per axis, names the red flags,
and lists the model answer's key points the answer missed.

    show_scenario("daily-job-once")          # ipywidgets panel; plain text without one
    interview = ScenarioInterview(scenario("redis-checkout-post-mortem"))
    interview.start(); interview.next_follow_up(); interview.finish()
    interview.score({0: "senior", 1: "staff", 4: "mid"}, red_flags=[1]); print(interview.debrief())

The texts live in ``scenarios.json`` next to this module (an instructor can add one
without touching code). Scores go to the practice journal (``labkit.practice.journal``:
a JSON file next to the notebook, not the notebook's metadata, which the kernel cannot
write safely), so a learner sees progress across attempts.

What can fail: ``UnknownScenario`` for an id not in the file; ``LabError`` when the
rubric is asked for before the interview is finished, or an item, level or red flag is
not in the rubric.
Nothing blocks: the clock is a daemon thread that runs only between Start and End.
"""
from __future__ import annotations

import html
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from labkit.errors import LabError
from labkit.practice.deck import widgets_available
from labkit.practice.journal import Journal
from labkit.practice.rubric import LEVELS, RedFlag, RubricItem, debrief, grade, item_from, rubric_text
from labkit.practice.worked_answers import WORKED_ANSWERS, AnswerLadder, answers_html, show_answer

DATA = Path(__file__).with_name("scenarios.json")


class UnknownScenario(LabError):
    """A scenario id that is not in scenarios.json."""


@dataclass(frozen=True)
class FollowUp:
    minute: int
    prompt: str


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    minutes: int
    prompt: str
    follow_ups: tuple[FollowUp, ...]
    rubric: tuple[RubricItem, ...]
    red_flags: tuple[RedFlag, ...] = ()

    @property
    def max_points(self) -> int:
        return sum(item.points for item in self.rubric)

    def rubric_text(self) -> str:
        return rubric_text(self.rubric, self.red_flags)


def load(path: Path = DATA) -> tuple[Scenario, ...]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return tuple(Scenario(item["id"], item["title"], int(item["minutes"]), item["prompt"],
                          tuple(FollowUp(int(f["minute"]), f["prompt"]) for f in item["follow_ups"]),
                          tuple(item_from(r, path.name) for r in item["rubric"]),
                          tuple(RedFlag(f["flag"], f["why"], int(f["points"])) for f in item.get("red_flags", ())))
                 for item in raw)


SCENARIOS = load()


def scenario(scenario_id: str) -> Scenario:
    for item in SCENARIOS:
        if item.id == scenario_id:
            return item
    raise UnknownScenario(f"no scenario {scenario_id!r}", hint="one of: " + ", ".join(s.id for s in SCENARIOS))


@dataclass
class ScenarioInterview:
    """One attempt: ``start()``, ``next_follow_up()`` when the clock says so (``due()``),
    ``finish()`` reveals the rubric, ``score(points_met)`` keeps the result."""

    scenario: Scenario
    clock: Callable[[], float] = time.monotonic
    journal: Journal = field(default_factory=Journal)
    minutes: float | None = None                  # defaults to the scenario's own
    started_at: float | None = None
    finished_at: float | None = None
    asked: list[FollowUp] = field(default_factory=list)
    result: dict | None = None

    def __post_init__(self):
        if self.minutes is None:
            self.minutes = self.scenario.minutes

    def start(self) -> str:
        if self.started_at is None:
            self.started_at = self.clock()
        return self.scenario.prompt

    def elapsed_minutes(self) -> float:
        if self.started_at is None:
            return 0.0
        return ((self.finished_at or self.clock()) - self.started_at) / 60

    def time_left_minutes(self) -> float:
        return max(0.0, self.minutes - self.elapsed_minutes())

    def due(self) -> list[FollowUp]:
        """Follow-ups whose minute has come (scaled to ``minutes``) and not yet asked."""
        scale = self.minutes / self.scenario.minutes
        return [f for f in self.scenario.follow_ups[len(self.asked):] if f.minute * scale <= self.elapsed_minutes()]

    def next_follow_up(self) -> FollowUp | None:
        """The next follow-up now, due or not (an interviewer may move on early); None at the end."""
        if self.started_at is None:
            raise LabError("the interview has not started", hint="interview.start() first")
        remaining = self.scenario.follow_ups[len(self.asked):]
        if not remaining:
            return None
        self.asked.append(remaining[0])
        return remaining[0]

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def finish(self) -> str:
        """Stop the clock and reveal the rubric."""
        if self.started_at is None:
            self.start()
        if self.finished_at is None:
            self.finished_at = self.clock()
        return self.scenario.rubric_text()

    def rubric(self) -> tuple[RubricItem, ...]:
        if not self.finished:
            raise LabError("the rubric is shown at the end", hint="answer first, then interview.finish()")
        return self.scenario.rubric

    def score(self, levels, red_flags: Iterable[int] = ()) -> dict:
        """Score against the rubric and journal it: ``levels`` is {item number: "mid" | "senior" |
        "staff"} (or a list with one level or None per item), ``red_flags`` the numbers of the
        red flags the answer raised."""
        graded = grade(self.rubric(), self.scenario.red_flags, levels, red_flags)
        self.result = self.journal.add("scenario", scenario=self.scenario.id, **graded,
                                       minutes=round(self.elapsed_minutes(), 1),
                                       follow_ups_asked=len(self.asked))
        return self.result

    def worked_answer(self, level: str, mine: str) -> str:
        """After ``finish``: the worked answer at ``level`` (mid, senior, staff), once ``mine``,
        your own answer, is written (``labkit.practice.worked_answers``)."""
        if not self.finished:
            raise LabError("the worked answers come at the end", hint="answer first, then interview.finish()")
        return show_answer(self.scenario.id, level, mine)

    def debrief(self) -> str:
        """After ``score``: the score per axis, the red flags named, the key points missed."""
        if self.result is None:
            raise LabError("nothing scored yet", hint="interview.score({item number: level, ...}) first")
        return debrief(self.scenario.rubric, self.scenario.red_flags, self.result)

    def history(self) -> list[dict]:
        """Earlier scores for this scenario, oldest first."""
        return [entry for entry in self.journal.entries("scenario") if entry.get("scenario") == self.scenario.id]

    def summary(self) -> str:
        if self.result is None:
            return f"{self.scenario.title}: not scored yet"
        tries = ", ".join(f"{e['points']}/{e['max_points']}" for e in self.history())
        return (f"{self.scenario.title}: {self.result['points']}/{self.result['max_points']} points in "
                f"{self.result['minutes']:.0f} min (all attempts: {tries})")


def show_scenario(scenario_id: str, minutes: float | None = None, widgets: bool | None = None,
                  journal: Journal | None = None):
    """The panel for one scenario; without a widget front-end, the text and how to go on."""
    interview = ScenarioInterview(scenario(scenario_id), journal=journal or Journal(), minutes=minutes)
    if widgets is None:
        widgets = widgets_available()
    if widgets:
        return ScenarioPanel(interview)
    item = interview.scenario
    print(f"{item.title} ({interview.minutes:g} minutes)\n\n{item.prompt}\n")
    print(f"Follow-ups come at minutes {', '.join(str(f.minute) for f in item.follow_ups)} of {item.minutes}.")
    print("In code: interview.start(); interview.next_follow_up(); print(interview.finish()); "
          "interview.score({item number: 'mid' | 'senior' | 'staff'}, red_flags=[numbers]); "
          "print(interview.debrief()); interview.worked_answer('senior', mine=your_answer)")
    return interview


class ScenarioPanel:
    """Start (the clock runs), Next follow-up, End: show the rubric; pick a level per item,
    tick the red flags said, Save: the debrief."""

    def __init__(self, interview: ScenarioInterview):
        import ipywidgets as widgets

        self.interview = interview
        item = interview.scenario
        self.prompt = widgets.HTML(f"<h4>{html.escape(item.title)}</h4><p><i>{interview.minutes:g} minutes. "
                                   "Press Start, answer aloud or on paper; follow-ups come on the clock.</i></p>")
        self.clock_label = widgets.Label()
        self.follow_ups = widgets.HTML()
        self.start_button = widgets.Button(description="Start", button_style="primary", icon="play")
        self.next_button = widgets.Button(description="Next follow-up", disabled=True)
        self.end_button = widgets.Button(description="End: show the rubric", button_style="warning", disabled=True)
        self.rubric_box = widgets.VBox()
        self.levels: list = []
        self.ladder = None
        self.flags: list = []
        self.save_button = widgets.Button(description="Save my score", button_style="success", disabled=True)
        self.result = widgets.HTML()
        self.start_button.on_click(lambda _: self.start())
        self.next_button.on_click(lambda _: self.ask_next())
        self.end_button.on_click(lambda _: self.end())
        self.save_button.on_click(lambda _: self.save())
        buttons = widgets.HBox([self.start_button, self.next_button, self.end_button])
        self.box = widgets.VBox([self.prompt, buttons, self.clock_label, self.follow_ups, self.rubric_box,
                                 self.save_button, self.result])
        self._stop = threading.Event()
        self._widgets = widgets

    def start(self) -> None:
        prompt = self.interview.start()
        self.prompt.value += f"<p>{html.escape(prompt)}</p>"
        self.start_button.disabled = True
        self.next_button.disabled = self.end_button.disabled = False
        threading.Thread(target=self._tick, name="scenario-clock", daemon=True).start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self.refresh()

    def refresh(self) -> None:
        left = self.interview.time_left_minutes()
        due = self.interview.due()
        self.clock_label.value = (f"{self.interview.elapsed_minutes():.1f} min gone, {left:.1f} left"
                                  + (" — a follow-up is due" if due else "") + (" — time is up" if left == 0 else ""))

    def ask_next(self) -> None:
        follow_up = self.interview.next_follow_up()
        if follow_up is None:
            self.next_button.disabled = True
            return
        self.follow_ups.value += f"<p><b>Follow-up {len(self.interview.asked)}:</b> {html.escape(follow_up.prompt)}</p>"
        self.refresh()

    def end(self) -> None:
        self.interview.finish()
        self._stop.set()
        self.next_button.disabled = self.end_button.disabled = True
        w = self._widgets
        self.levels = [w.ToggleButtons(options=["not covered", *LEVELS], value="not covered",
                                       style={"button_width": "100px"}) for _ in self.interview.rubric()]
        self.flags = [w.Checkbox(description=f"-{flag.points} pt: {flag.flag}", indent=False,
                                 layout=w.Layout(width="100%")) for flag in self.interview.scenario.red_flags]
        rows = []
        for number, (item, choice) in enumerate(zip(self.interview.rubric(), self.levels)):
            said = "".join(f"<li><b>{level}</b>: {html.escape(item.levels[level])}</li>" for level in LEVELS)
            rows += [w.HTML(f"<p><b>[{number}] {html.escape(item.point)}</b> <i>({html.escape(item.axis)})</i></p>"
                            f"<ul>{said}</ul>"), choice]
        self.rubric_box.children = ([w.HTML("<b>Rubric</b>: for each key point, the level your answer reached.")]
                                    + rows + [w.HTML("<b>Red flags</b>: tick each one you said.")] + self.flags)
        self.save_button.disabled = False
        if self.interview.scenario.id in WORKED_ANSWERS:
            self.ladder = AnswerLadder(self.interview.scenario.id)
            self.rubric_box.children += (w.HTML("<b>Worked answers</b>: write what you said, then compare."),
                                         self.ladder.box)
        self.refresh()

    def save(self) -> None:
        self.interview.score({number: choice.value for number, choice in enumerate(self.levels)
                              if choice.value in LEVELS},
                             [number for number, check in enumerate(self.flags) if check.value])
        self.save_button.disabled = True
        self.result.value = (f"<p>{html.escape(self.interview.summary())}</p>"
                             f"<pre>{html.escape(self.interview.debrief())}</pre>")

    def close(self) -> None:
        self._stop.set()

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        item = self.interview.scenario
        follow_ups = "".join(f"<li>minute {f.minute}: {html.escape(f.prompt)}</li>" for f in item.follow_ups)
        answers = answers_html(item.id) if item.id in WORKED_ANSWERS else ""
        # the book's static copy (JupyterLab draws the widget): the prompt, the follow-ups, the hidden answers
        bundle["text/html"] = (f"<h4>{html.escape(item.title)} ({item.minutes} minutes)</h4><p>{html.escape(item.prompt)}"
                               f"</p><p>Follow-ups:</p><ol>{follow_ups}</ol>{answers}")
        return bundle

