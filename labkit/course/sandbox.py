"""The lock recipe in a sandbox: what notebooks/sandbox.ipynb calls, as ``lesson.<name>``.

The notebook starts with ``lesson = labkit.lesson("sandbox")``; labkit/course/lesson.py adds what
every lesson has (its lab, read aloud, the exercise, the cards, the calibration summary).
Every name here is a re-export: the experiments live in labkit.lessons, the recipes in
labkit.locks, the checkers in labkit.record."""
from labkit.practice.predict import predict
from labkit.practice.sandbox import evaluate, MutualExclusionViolated, Sandbox, STRATEGIES, View
from labkit.practice.sandbox_widget import sandbox_widget

__all__ = ["evaluate", "MutualExclusionViolated", "predict", "Sandbox", "sandbox_widget", "STRATEGIES",
           "View"]
