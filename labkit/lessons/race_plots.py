"""The plot of a batch of holder races (``holder_safety.RaceRun``): when each old holder gave
up against when the waiter acquired."""
from __future__ import annotations

from labkit.vocabulary import GUIDE_COLOUR, STATE_COLOURS


def plot_races(runs: list, ax=None):
    """One row per (recipe, topology, rule): each run's give-up (a holding-blue dot) and the
    waiter's grant (a red cross), in seconds after the fault. Safe rows have every dot left
    of every cross of its run; a run whose holder never gave up is drawn at the right edge."""
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(f"{run.recipe}, {run.topology}\n({run.rule})" for run in runs))
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.55 * len(labels) + 1.2), layout="constrained")
    right = max(max(run.acquired_ms, run.gave_up_ms or 0) for run in runs) / 1000 + 0.3
    for run in runs:
        row = labels.index(f"{run.recipe}, {run.topology}\n({run.rule})")
        gave_up = right if run.gave_up_ms is None else run.gave_up_ms / 1000
        ax.plot([gave_up, run.acquired_ms / 1000], [row, row], color=GUIDE_COLOUR, linewidth=0.8, zorder=1)
        ax.scatter([gave_up], [row], color=STATE_COLOURS["holding"] if run.safe else STATE_COLOURS["lost"],
                   marker="o", s=22, zorder=2)
        ax.scatter([run.acquired_ms / 1000], [row], color=STATE_COLOURS["lost"], marker="x", s=30, zorder=3)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, right + 0.1)
    ax.set_xlabel("seconds after the fault: o = the old holder gave up (red: after the grant), x = the waiter acquired")
    return ax
