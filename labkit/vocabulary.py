"""The lab's words, defined once: what an event can say, which events end a phase, the
states a lock client is in, the faults a learner can inject, and the colour of each state.

Recipes, client processes, the history, the checkers, the plots, the widgets and the
health dashboard all read these names from here, so that a timeline, a panel and a
verdict can never disagree about what "waiting" or "lost" means. Nothing here imports
anything: it is the lowest room of labkit.
"""
from __future__ import annotations

# ---- events ---------------------------------------------------------------------------
# What each kind means. Recipes put the listed detail keys into the event.
KINDS = {
    "requested": "the client asked for the lock",
    "created": "its queue entry exists on the server (detail: node/key, sequence or revision)",
    "watch": "it waits on something (detail: target, what='predecessor'|'parent'|'key'; a semaphore: "
             "'slot' for the head of the line, 'line' for the waiters behind it)",
    "woke": "a watch fired and it re-checks (detail: reason, target)",
    "acquired": "it now holds the lock (detail: token)",
    "released": "it let go on purpose (detail: token)",
    "lost": "it no longer holds the lock and did not let go (detail: reason)",
    "suspended": "connection trouble: it may not hold the lock any more, stop writing",
    "reconnected": "the connection came back with the session intact",
    "write": "it wrote to the protected resource (detail: token, accepted)",
    "fault": "a fault was injected (detail: what, target)",
    "timeout": "it gave up waiting (detail: waited)",
    "error": "something failed (detail: message)",
}

# ---- phases: which events end one -------------------------------------------------------
# A hold (acquired ...) ends when the client lets go or loses the lock.
HOLD_ENDS = ("released", "lost")
# A wait (requested ...) ends when the client holds, gives up, loses its session or fails.
WAIT_ENDS = ("acquired", "timeout", "lost", "error")

# ---- lock client states ---------------------------------------------------------------
# A client process is starting, then idle, waiting, holding or lost; a fault makes it
# paused, and it ends stopped (asked to) or dead (killed, or crashed).
CLIENT_STATES = ("starting", "idle", "waiting", "holding", "lost", "paused", "stopped", "dead")
# The state a client is in after each of its lock events ("suspended" changes nothing:
# a holder that lost its connection may still hold the lock).
STATE_AFTER = {"requested": "waiting", "created": "waiting", "watch": "waiting", "woke": "waiting",
               "acquired": "holding", "released": "idle", "timeout": "idle", "lost": "lost"}

# ---- faults -----------------------------------------------------------------------------
# The ``what`` of a "fault" event, and what it does.
FAULTS = {
    "pause": "SIGSTOP a process for some seconds (a stand-in for a long GC pause)",
    "resume": "SIGCONT a paused process",
    "kill": "SIGKILL a process: it cannot say goodbye",
    "restart": "stop a server and start it again on its data",
    "expire_session": "ZooKeeper ends a client's session now (its ephemeral nodes go)",
    "revoke_lease": "etcd revokes a client's lease now (its keys go)",
    "stop_keepalive": "a client stops refreshing its lease: it expires after its TTL",
    "kill_leader": "SIGKILL the current leader of an ensemble",
    # network faults (labkit.up(network=True)): two events each, phase="start" and "end"
    "partition": "cut every link between two or more sides of the lab, both ways",
    "isolate": "cut one node or client from every other, both ways",
    "cut": "cut the link between two ends (or one direction of it)",
    "delay": "hold every chunk on some links for some milliseconds",
    "loss": "stall a fraction of the chunks on some links for a retransmission timeout",
    "heal": "restore every link",
    # clock faults (labkit.up(clocks=True))
    "clock_step": "step a server's wall clock by some seconds (its monotonic clock does not move)",
    "clock_rate": "make a server's wall clock run faster or slower",
    "clock_monotonic_rate": "make a server's monotonic clock run faster or slower (drift: its timeouts end early or late)",
    "clock_reset": "put a server's wall clock back on the machine's, and its monotonic clock back to the machine's rate",
}

# ---- colours (ColorBrewer "Paired": one palette for graphs and widgets) -----------------
STATE_COLOURS = {
    "waiting": "#a6cee3", "holding": "#1f78b4", "lost": "#e31a1c", "dead": "#e31a1c",
    "paused": "#ff7f00", "stopped": "#777777", "idle": "#555555", "starting": "#777777",
}
FAULT_COLOUR = "#6a3d9a"   # an instant fault (kill, clock step...): a dashed line
# a fault that lasts (labkit.record.periods): a shaded band across a timeline, in the
# light half of the same palette; a cut link is purple like the fault line
FAULT_BAND_COLOURS = {"partition": "#cab2d6", "isolate": "#cab2d6", "cut": "#cab2d6",
                      "delay": "#fdbf6f", "loss": "#fb9a99", "pause": "#ffe0b2"}
FAULT_BAND_DEFAULT = "#dddddd"
ACCEPTED_COLOUR = "#33a02c"   # a write the resource took
REJECTED_COLOUR = ERROR_COLOUR = STATE_COLOURS["lost"]   # a refused write, an error message
# a server's role, in the same palette: serving (blue), following (green), frozen, down
ROLE_COLOURS = {"leader": "#1f78b4", "standalone": "#1f78b4", "master": "#1f78b4", "follower": "#33a02c",
                "slave": "#33a02c", "paused": "#ff7f00", "stopped": "#e31a1c"}
SERVICE_COLOURS = {"ZooKeeper": "#1f78b4", "etcd": "#33a02c", "Redis": "#e31a1c"}
# what a lesson's graph draws besides states and faults, in the same palette
GUIDE_COLOUR = "#777777"       # a reference line (the ideal, a timeout), a note, an empty panel's message
MARK_COLOUR = "#000000"        # one event marked on a timeline (a waiter woke, a write arrived)
SUCCESSOR_COLOUR = "#ff7f00"   # the next holder, or the other client, beside the holder's blue
MISSED_COLOUR = "#b35900"      # a prediction the experiment contradicted
TEXT_COLOUR = "#333333"        # a panel's word with no colour of its own (an unknown state or role)
