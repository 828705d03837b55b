"""Small helpers of the lessons modules that need no servers."""
import pytest

from labkit.lessons.redis_vs_consensus import SLOWER_CHOICES, times_slower


pytestmark = pytest.mark.no_servers  # the Python-versions leg runs these

def test_a_measured_ratio_is_read_as_the_nearest_choice_on_a_log_scale():
    assert [times_slower(ratio) for ratio in (1.0, 1.3, 2.0, 4.4, 7.0, 31.0, 40.0, 500.0)] == [
        "about the same", "about the same", "2×", "2×", "10×", "10×", "100×", "100×"]
    assert {times_slower(ratio) for ratio in (1, 3, 10, 100)} == set(SLOWER_CHOICES)
