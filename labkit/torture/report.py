"""What a torture run leaves: a result object for notebooks, and a report folder.

``TortureResult`` shows its verdicts as text (``repr``) and as HTML with the pictures (a
notebook displays it inline); ``show()`` draws the figures; ``save(folder)`` writes
``report.json`` (parameters, schedules, what each fault did, verdicts, numbers, every
event and every write: enough to judge the run again or replay its schedule),
``trial-N.png`` and ``report.html``. What can fail: ``save`` raises OSError for a folder
that cannot be written.
"""
from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from labkit.record.plots import fault_bands, hold_timeline, latency_over_time
from labkit.record.history import History
from labkit.torture.nemesis import Executed
from labkit.torture.schedule import Step
from labkit.torture.verdict import Judgement


@dataclass
class Trial:
    """One run of the workload under one schedule, and its verdicts."""

    number: int
    seed: int
    schedule: list[Step]
    executed: list[Executed]
    history: History
    writes: list[Any]
    judgement: Judgement
    start: float
    end: float
    problems: dict[str, int] = field(default_factory=dict)
    rejoined: int = 0

    @property
    def ok(self) -> bool:
        return self.judgement.ok

    def summary(self) -> str:
        numbers = self.judgement.numbers()
        safety = self.judgement.safety.lower()
        exclusion = f"{safety} OK" if self.judgement.mutual_exclusion.ok else \
            f"{safety} VIOLATED ({numbers['overlaps'] or self.judgement.mutual_exclusion.summary})"
        linear = {True: "linearizable", False: "NOT linearizable", None: "linearizability unknown"}[
            self.judgement.linearizability.ok] if self.judgement.linearizability_judged else "linearizability not judged"
        return (f"trial {self.number} (seed {self.seed}): {exclusion}, {linear}; {numbers['acquires']} acquires, "
                f"{numbers['stale_writes_rejected']} stale writes rejected, held {100 * numbers['held_share']:.0f}%, "
                f"longest gap {numbers['longest_gap_s']:.2f} s")

    def fault_periods(self) -> list[tuple[float, float, str]]:
        return [(done.start, done.end, f"{done.step.nemesis} {done.target}") for done in self.executed
                if not done.skipped]

    def figure(self) -> Figure:
        """The timeline of holds with the faults shaded, and acquire waits over time."""
        clients = len(self.history.clients())
        if not clients:
            figure = Figure(figsize=(8, 1.5))
            figure.text(0.02, 0.5, f"Trial {self.number}: no client event was recorded (did the clients start?)")
            return figure
        figure = Figure(figsize=(11, 2.5 + 0.45 * clients + 2.5), layout="constrained")
        timeline, waits = figure.subplots(2, 1, sharex=True, height_ratios=[0.45 * clients + 1.5, 2.0])
        origin = self.history.events()[0].time
        hold_timeline(self.history, ax=timeline,
                      title=f"Trial {self.number} (seed {self.seed}): holds, with the nemesis's faults shaded")
        fault_bands(timeline, self.fault_periods(), origin, labels=False)
        shift = self.start - origin  # latencies are counted from the workload's start
        points = [(at + shift, seconds) for at, seconds in self.judgement.latencies]
        if points:
            latency_over_time(points, ax=waits)
            fault_bands(waits, self.fault_periods(), origin)
        timeline.set_xlabel("")
        return figure

    def to_dict(self) -> dict[str, Any]:
        judgement = self.judgement
        first = judgement.mutual_exclusion.overlaps[0].explain(self.start) if judgement.mutual_exclusion.overlaps else ""
        return {"number": self.number, "seed": self.seed, "ok": self.ok, "start": self.start, "end": self.end,
                "schedule": [step.to_dict() for step in self.schedule],
                "executed": [done.to_dict() for done in self.executed],
                "verdicts": {"mutual_exclusion": {"ok": judgement.mutual_exclusion.ok,
                                                  "summary": judgement.mutual_exclusion.summary, "first": first},
                             "linearizability": {"ok": judgement.linearizability.ok,
                                                 "explanation": judgement.linearizability.explanation},
                             "availability": judgement.availability.describe(),
                             "in_words": judgement.lines()},
                "numbers": judgement.numbers(), "loop_problems": self.problems, "rejoined": self.rejoined,
                "events": [event.to_dict() for event in self.history.events()],
                "writes": [dict(vars(write)) for write in self.writes]}


@dataclass
class TortureResult:
    """Every trial of a torture run. ``ok``: every verdict of every trial holds."""

    parameters: dict[str, Any]
    trials: list[Trial]
    folder: Path | None = None

    @property
    def ok(self) -> bool:
        return bool(self.trials) and all(trial.ok for trial in self.trials)

    def title(self) -> str:
        p = self.parameters
        holders = f" ({p['holders']} holders)" if p.get("holders", 1) != 1 else ""
        return (f"{p['recipe']}{holders}, {p['clients']} clients, {p['duration']:g} s, nemesis {','.join(p['nemeses']) or 'none'}, "
                f"seed {p['seed']}, {'fenced' if p['fenced'] else 'unfenced'}")

    def __repr__(self) -> str:
        verdict = "every check held" if self.ok else "VIOLATIONS FOUND"
        lines = [f"<TortureResult {self.title()}: {verdict} ({len(self.trials)} trial(s))"]
        for trial in self.trials:
            lines.append("  " + trial.summary())
            if not trial.ok:
                lines += ["    " + line for line in trial.judgement.lines()[:2]]
        return "\n".join(lines) + ">"

    def _repr_html_(self) -> str:
        return self.html(embed=True)

    def show(self) -> list[Figure]:
        """Draw every trial's figure (inline in a notebook); returns the figures."""
        figures = [trial.figure() for trial in self.trials]
        try:
            from IPython.display import display
        except ImportError:  # not in IPython: the caller saves or shows them
            return figures
        for figure in figures:
            display(figure)
        return figures

    def to_dict(self) -> dict[str, Any]:
        return {"parameters": self.parameters, "ok": self.ok, "trials": [trial.to_dict() for trial in self.trials]}

    def save(self, folder: str | Path) -> Path:
        """Write report.json, trial-N.png and report.html into ``folder`` (made if needed)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.json").write_text(json.dumps(self.to_dict(), indent=1, default=str))
        for trial in self.trials:
            trial.figure().savefig(folder / f"trial-{trial.number}.png", dpi=90)
        page = (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Torture: {html.escape(self.title())}"
                f"</title></head>\n<body>{self.html(embed=False)}</body></html>\n")
        (folder / "report.html").write_text(page, encoding="utf-8")
        self.folder = folder
        return folder

    def html(self, embed: bool) -> str:
        """The report as a small HTML page; ``embed``: pictures inline (for notebooks)."""
        parts = [f"<h3>Torture: {html.escape(self.title())}</h3>",
                 f"<p><b>{'Every check held.' if self.ok else 'Violations found.'}</b></p>"]
        for trial in self.trials:
            parts.append(f"<h4>Trial {trial.number} (seed {trial.seed})</h4><ul>"
                         + "".join(f"<li>{html.escape(line)}</li>" for line in trial.judgement.lines()) + "</ul>")
            source = _png_data(trial.figure()) if embed else f"trial-{trial.number}.png"
            parts.append(f'<img src="{source}" style="max-width:100%">')
            rows = "".join(f"<tr><td>{done.step.at:.1f}</td><td>{done.start - trial.start:.1f}</td>"
                           f"<td>{html.escape(done.step.nemesis)}</td><td>{html.escape(done.step.target)}</td>"
                           f"<td>{html.escape(done.target)}</td><td>{done.end - done.start:.1f}</td>"
                           f"<td>{html.escape(done.note)}</td></tr>" for done in trial.executed)
            parts.append("<table><tr><th>planned t (s)</th><th>done t (s)</th><th>nemesis</th><th>aimed at</th>"
                         f"<th>hit</th><th>lasted (s)</th><th>note</th></tr>{rows}</table>")
            numbers = trial.judgement.numbers()
            parts.append("<p>" + ", ".join(f"{key}: {value}" for key, value in numbers.items()) + "</p>")
        replay = "labkit torture --replay report.json" if self.folder is None else \
            f"labkit torture --replay {html.escape(str(self.folder))}"
        parts.append(f"<p>Replay the same schedule: <code>{replay}</code></p>")
        return "<div>" + "\n".join(parts) + "</div>"


def _png_data(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
