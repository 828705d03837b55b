"""The course layer: one handle per lesson, so that a notebook names its number once.

    import labkit
    lesson = labkit.lesson("04")      # in the notebook's first code cell
    lesson.read_aloud()               # the read-aloud control for notebooks/04_*.ipynb
    lab = lesson.lab()                # the lab in the lesson's shape (lesson04.SHAPE); lab(**changes) to vary it
    answer = lesson.predict("...?", choices=[...], default=...)    # then answer.reveal(...)
    lesson.reveal_solution()          # the exercise's ladder: two hints, then the solution
    report = lesson.check_exercise(fenced_put, lab=lab)            # part="etcd" for a lesson with two exercises
    lesson.cards()                    # a Deck of the cards whose answers this lesson proves
    lesson.your_predictions()         # the calibration summary of this lesson's predictions
    lesson.pause_past_timeout(lab, ...)   # any other name: the lesson's experiment, from labkit/course/lesson04.py

Each lesson has one facade module, ``labkit/course/lessonNN.py``: its ``SHAPE`` (the servers
``lesson.lab()`` starts) and, re-exported by name, every experiment, recipe, checker and plot
its notebook calls. A new lesson adds one such file; a name the notebook needs goes there.
What can fail: ``labkit.lesson("99")`` raises LessonNotFound (no notebook or no facade of that
number), and a name the facade does not hold raises AttributeError naming the facade file."""
from labkit.course.lesson import Lesson, lesson

__all__ = ["Lesson", "lesson"]
