"""The ZooKeeper sequence restarts when the lock's parent is re-created; czxid does not.
On the real server, with a real Curator making the parent a container node."""
from __future__ import annotations

import pytest

from labkit.lessons.fencing_edges import sequence_restart


@pytest.mark.slow
@pytest.mark.curator("the re-created container parent (Curator makes it)")
def test_the_sequence_restarts_with_a_re_created_container_parent_and_czxid_keeps_growing(lab):
    facts = sequence_restart(lab)
    print(facts)
    assert facts.parent_deleted_after_s < 10              # the server deleted the empty container
    assert facts.parent_czxids[1] > facts.parent_czxids[0]   # and Curator made a new one
    assert [hold.sequence for hold in facts.before] == [0, 1, 2]
    assert [hold.sequence for hold in facts.after] == [0, 1]   # the parent's counter started again
    assert facts.sequence_went_back and facts.czxid_kept_growing
