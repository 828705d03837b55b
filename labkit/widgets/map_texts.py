"""What each part of the lock maps (labkit/widgets/maps.py) says when a learner selects it:
why a node exists; an edge's protocol, direction, effect and consequence. Data only, in plain
words, so that a lesson's prose and a map say the same thing.

Each edge text is (label, protocol, direction, effect, consequence). A label may hold
``{client}``, ``{other}`` and ``{short}`` (the end of a node or key name), filled from the run.
"""
from __future__ import annotations

ZOOKEEPER_NODES = {
    "client_a": ("Client {client}", "A program that wants the lock. It has one session with the ensemble, "
                 "and its lock node lives exactly as long as that session."),
    "zookeeper": ("ZooKeeper ensemble", "Servers that agree, through their leader's log, on one tree of nodes. "
                  "Every client sees the same queue of lock nodes in the same order, and the ensemble keeps "
                  "working while a majority of its servers is up."),
    "client_b": ("Client {client}", "A second program that wants the same lock. It queues behind the holder "
                 "and waits for one notification instead of asking again and again."),
}

ETCD_NODES = {
    "client_a": ("Client {client}", "A program that wants the lock. It holds a lease, kept alive by a background thread, and its lock "
        "key is bound to that lease."),
    "lease": ("lease of {client}", "A number etcd hands out with a time to live. The lock key is bound to it: "
              "when the lease expires or is revoked, etcd deletes the key in the same step, and nobody has "
              "to send a delete."),
    "etcd": ("etcd cluster", "Members that agree through their leader's log. Every write gets the next "
             "revision, one counter for the whole cluster, and the create revisions order the lock queue."),
    "client_b": ZOOKEEPER_NODES["client_b"],
}

ZOOKEEPER_EDGES = {
    "a_requests": ("create, getChildren, delete",
                   "ZooKeeper's client protocol on the holder's session: one TCP connection to one server, "
                   "with pings in between",
                   "from the holder to the ensemble; the answers come back on the same connection",
                   "the holder's ephemeral sequential node joins the queue under the lock path; listing the "
                   "children shows whether it is first; releasing deletes it",
                   "if the session ends (closed, or silent for a whole session timeout) the server deletes "
                   "the node as if the holder had released it"),
    "zk_to_a": ("children: lowest holds",
                "replies on the holder's session", "from the ensemble to the holder",
                "the holder learns that its node has the lowest number",
                "it holds the lock; nobody else is told anything"),
    "b_requests": ("create, getChildren, get + watch",
                   "ZooKeeper's client protocol on the waiter's own session",
                   "from the waiter to the ensemble",
                   "the waiter's node joins the queue behind the holder's; the waiter sees it is not first "
                   "and sets a watch on the one node just before its own",
                   "it waits without polling: only a change to that one node wakes it"),
    "zk_to_b": ("NodeDeleted, then children",
                "a one-shot watch notification on the waiter's session, then replies",
                "from the ensemble to the waiter",
                "the waiter hears that its predecessor is gone and lists the children again",
                "one release wakes one waiter, not the whole queue; it holds only if the re-check finds "
                "its node first"),
}

# The lesson's nine steps, by number: (from, to, label, protocol, direction, effect, consequence).
ZOOKEEPER_STEPS = {
    1: ("A", "ZK", "create …{short} EPHEMERAL_SEQUENTIAL", "create request on {client}'s session",
        "{client} to the ensemble", "the server adds {client}'s node under the lock path and appends the next "
        "10-digit number to its name", "{client} is in the queue; the node dies with {client}'s session"),
    2: ("B", "ZK", "create …{short} EPHEMERAL_SEQUENTIAL", "create request on {client}'s session",
        "{client} to the ensemble", "the server gives {client}'s node a higher number than {other}'s",
        "{client} is behind {other} in the queue"),
    3: ("A", "ZK", "getChildren", "a read on {client}'s session", "{client} to the ensemble",
        "{client} lists the children of the lock path", "{client} compares its number with the others"),
    4: ("ZK", "A", "lowest: {client} holds", "the reply to getChildren", "the ensemble to {client}",
        "{client}'s node has the lowest number", "{client} holds the lock; no message goes to anyone else"),
    5: ("B", "ZK", "get(…{short}, watch)", "a read that leaves a one-shot watch on {client}'s session (the "
        "classic recipe calls exists(); get() fails on a missing node instead of watching for one that never comes)",
        "{client} to the ensemble", "{client} saw {other}'s node just below its own and set a watch on that "
        "node only", "the release of {other} will wake {client} and nobody else"),
    6: ("A", "ZK", "{how}", "a delete, or the end of {client}'s session", "{client} to the ensemble",
        "{client}'s node is deleted, by its own delete or by the server when the session ends",
        "the lock is free for the next node in the queue"),
    7: ("ZK", "B", "NodeDeleted …{short}", "a watch notification, sent once", "the ensemble to {client}",
        "the watch fires and is gone", "{client} must look again: the notification says the node changed, "
        "not that {client} is first now"),
    8: ("B", "ZK", "getChildren (re-check)", "a read on {client}'s session", "{client} to the ensemble",
        "{client} lists the children again", "if a node below its own is still there (a waiter ahead died, "
        "not the holder), {client} watches that one instead"),
    9: ("ZK", "B", "lowest: {client} holds", "the reply to getChildren", "the ensemble to {client}",
        "{client}'s node is now the lowest", "{client} holds the lock"),
}

ETCD_EDGES = {
    "a_keepalive": ("grant, then keep-alive every TTL/3",
                    "gRPC LeaseGrant, then the LeaseKeepAlive stream", "from the holder to the cluster's leader",
                    "each keep-alive that arrives starts the lease's countdown again",
                    "if they stop (a pause, a cut link), the lease runs out one TTL later, and the holder must "
                    "have stopped writing by then"),
    "a_put": ("put key on lease (txn)",
              "gRPC KV.Txn: create my key if it is not there, bound to my lease, and read the first key by "
              "create revision", "from the holder to the cluster",
              "the key gets a create revision; the smallest one holds the lock",
              "the holder knows from the same transaction whether it is first"),
    "lease_keys": ("expiry deletes the key",
                   "inside the cluster: the leader revokes a lease whose time ran out",
                   "from the lease to every key bound to it",
                   "the holder's key is deleted without the holder asking",
                   "the next waiter's watch fires and it may take the lock, whether the old holder knows or not"),
    "b_put": ("put own key, watch the one below; unlock",
              "gRPC KV.Txn, then a Watch stream on one key", "from the waiter to the cluster",
              "the waiter's key queues with a larger create revision; it watches only the key with the largest "
              "create revision below its own", "the deletion of that key wakes it, and nobody else; its own unlock later deletes its key"),
    "etcd_to_b": ("DELETE event, re-check",
                  "an event on the waiter's Watch stream, then a read", "from the cluster to the waiter",
                  "the waiter hears the key ahead is gone and reads the queue again",
                  "it holds once no key with a smaller create revision is left"),
}

# The lease flow of one contender: nodes (label, why, column, row, shape) and edges.
FLOW_NODES = {
    "grant": ("grant a lease (TTL)", "A session starts with a lease: a promise for TTL seconds.", 0, 0, "box"),
    "keepalive": ("keep-alive every TTL/3", "A background thread renews the lease; each acknowledged "
                  "keep-alive pushes its end one TTL further.", 0, 2, "box"),
    "put_key": ("put prefix/lease id, bound to the lease", "One transaction: create my key if it is not there "
                "and read the key with the smallest create revision.", 1, 0, "box"),
    "lowest": ("smallest create revision?", "The queue is the order of the create revisions: etcd's one counter "
               "decides it, not the clients.", 2, 0, "decision"),
    "hold": ("hold the lock, guard each write", "Write only with is_owner() in the same transaction, or hand the "
             "create revision to a store that refuses older ones.", 3, 0, "box"),
    "wait": ("watch the key just below mine", "Wait for the deletion of the key with the largest create revision "
             "below mine; the other waiters are not my business.", 2, 1, "box"),
    "deleted": ("that key is deleted: look again", "The watch says a key went; only a new read says whether I am "
                "first now.", 3, 1, "box"),
    "release": ("unlock: delete my key", "The key goes, and the next waiter's watch fires.", 4, 0, "box"),
    "fails": ("keep-alive fails", "No keep-alive is acknowledged any more: the process is paused, the link is "
              "cut, or the keep-alive thread stopped.", 1, 2, "failure"),
    "stop": ("the process must stop writing", "Its own deadline (the send time of the last acknowledged "
             "keep-alive plus the TTL, less a margin) has passed: stop before the server can free the lock.",
             1, 3, "failure"),
    "expires": ("lease expires: etcd deletes the key", "The server ends the lease one TTL after the last "
                "keep-alive arrived and deletes every key bound to it.", 3, 2, "failure"),
}

FLOW_EDGES = {
    # id: (from, to, label, protocol, direction, effect, consequence)
    "grant_put": ("grant", "put_key", "attach the key", "gRPC KV.Txn with the lease id",
                  "the contender to the cluster", "the key exists as long as the lease does",
                  "no lease, no lock: the key cannot outlive its owner's lease"),
    "grant_keepalive": ("grant", "keepalive", "renew", "the LeaseKeepAlive stream",
                        "the contender to the cluster's leader", "the lease stays alive while keep-alives arrive",
                        "the session thread, not the lock, keeps the key alive"),
    "put_lowest": ("put_key", "lowest", "first key by create revision", "the same transaction's range read",
                   "the cluster to the contender", "the contender learns who is first",
                   "one round trip decides: first, or queue"),
    "lowest_hold": ("lowest", "hold", "yes", "none: a decision in the client", "inside the contender",
                    "the contender holds the lock", "its create revision only grows, so a store can tell it "
                    "from an older holder"),
    "lowest_wait": ("lowest", "wait", "no", "gRPC Watch on one key", "the contender to the cluster",
                    "the contender waits on the key just ahead", "one deletion wakes exactly one waiter"),
    "wait_deleted": ("wait", "deleted", "DELETE event", "an event on the Watch stream", "the cluster to the waiter",
                     "the key ahead is gone", "the waiter must re-check before it acts"),
    "deleted_lowest": ("deleted", "lowest", "re-check", "a range read by create revision",
                       "the waiter to the cluster", "the waiter reads the queue again",
                       "a waiter whose predecessor died, while someone earlier holds, goes back to waiting"),
    "hold_release": ("hold", "release", "unlock", "gRPC KV.DeleteRange on my key", "the holder to the cluster",
                     "the key is deleted", "the next waiter is woken"),
    "keepalive_fails": ("keepalive", "fails", "keep-alive fails", "no acknowledged LeaseKeepAlive",
                        "none arrives at the leader", "the lease's countdown runs on",
                        "the lease ends one TTL after the last keep-alive arrived"),
    "fails_stop": ("fails", "stop", "own deadline passes", "none: the client's own clock",
                   "inside the holder", "the session gives up and the lock reports itself lost",
                   "from now on every write of this process is unsafe: stop, then start a new session"),
    "fails_expires": ("fails", "expires", "TTL runs out", "inside the cluster", "the leader revokes the lease",
                      "the holder's key is deleted with its lease", "the lock is free, whether the holder knows "
                      "or not"),
    "expires_deleted": ("expires", "deleted", "the waiter's watch fires", "an event on the waiter's Watch stream",
                        "the cluster to the next waiter", "the next waiter hears the key ahead is gone",
                        "it re-checks and takes the lock"),
}

# A queue of any length on ZooKeeper, one arrow per event (maps.zookeeper_queue): by event kind,
# (to the ensemble?, label, protocol, effect, consequence); the direction is written from the ends.
QUEUE_STEPS = {
    "created": (True, "create …{short}", "create request, EPHEMERAL_SEQUENTIAL, on {client}'s session",
                "{client}'s node joins the queue with the next number", "its place in the queue is fixed"),
    "listed": (True, "getChildren", "a read on {client}'s session", "{client} lists the queue",
               "it compares its number with the others"),
    "acquired": (False, "lowest: {client} holds", "the reply to getChildren", "{client}'s node is the lowest",
                 "{client} holds the lock; nobody else is told"),
    "watch": (True, "get(…{short}, watch)", "a read that leaves a one-shot watch (get(), or exists() in the "
              "classic recipe)",
              "{client} watches only the node just below its own", "only that node's deletion will wake it"),
    "rewatch": (True, "re-check, then get(…{short}, watch)", "getChildren, then a read that leaves a watch",
                "{client} is still not first, so it watches its new predecessor",
                "a deleted predecessor is not a free lock: it keeps waiting"),
    "woke": (False, "NodeDeleted …{short}", "a watch notification, sent once",
             "the node {client} watched is gone", "{client} must list the children again before it acts"),
    "released": (True, "delete own node (release)", "a delete on {client}'s session",
                 "{client}'s node is deleted", "the next waiter's watch fires"),
    "lost": (False, "session gone: node deleted", "the end of {client}'s session",
             "the server deleted {client}'s node", "{client} no longer holds or waits"),
    "fault": (True, "{what}", "a fault the lab injected on {client}", "{client}'s session is ended or silenced",
              "its node goes when the session ends"),
    "error": (False, "error reply", "an error reply to {client}", "{client}'s request failed: {message}",
              "{client} must start a new session to queue again"),
}
