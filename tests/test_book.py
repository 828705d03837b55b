"""The course book: a fast subset (the sandbox and 00) executed on real servers and rendered;
every page carries its figures as embedded PNGs, and the index links every page."""
import re

import pytest

from labkit.book import NOTEBOOKS, build, course_notebooks


def test_the_course_is_in_reading_order():
    names = [notebook.name for notebook in course_notebooks()]
    assert names[0] == "00_start_here.ipynb" and "sandbox.ipynb" in names
    numbered = [name for name in names if name[:2].isdigit()]
    assert numbered == sorted(numbered) and names[:len(numbered)] == numbered


@pytest.mark.slow
def test_a_fast_subset_builds_with_every_figure(tmp_path):
    pages = build([NOTEBOOKS / "sandbox.ipynb", NOTEBOOKS / "00_start_here.ipynb"], tmp_path, log=lambda _: None)
    for page in pages:
        assert page.error is None, f"{page.notebook.name}: {page.error}"
        assert page.figures >= 1, f"{page.notebook.name} made no figure when executed"
        assert page.embedded == page.figures, f"{page.notebook.name}: {page.figures} figures, {page.embedded} in HTML"
        assert not (tmp_path / page.notebook.name).exists()     # the executed notebook is not written anywhere
        assert 'id="labkit-read-aloud-' in page.html.read_text()  # read aloud's static copy (no widget manager)
    index = (tmp_path / "index.html").read_text()
    assert re.findall(r'href="([^"]+\.html)"', index) == ["sandbox.html", "00_start_here.html"]
