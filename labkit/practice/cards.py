"""Interview practice cards: question, answer, and the notebook section that proves it.

Every card links to a section of a course notebook whose experiment shows the answer on
real servers (or on the sandbox), with an ``assert`` that checks it. The headings are fixed
in ``SECTIONS``; notebook authors use exactly those texts as markdown headings, so a link
never points at nothing. A few senior cards are marked ``discussion``: no experiment in the
course shows their answer (a Curator semaphore, Postgres locks, STONITH ...), so they have
no proof link, only ``see_also`` sections on related ground, which prove nothing about them.

    CARDS                          # every card; labkit.practice.deck.Deck shows them

What can fail: an unknown card id raises ``UnknownCard``; a card whose link names a
notebook or heading missing from ``SECTIONS`` raises ValueError when it is created.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from labkit.errors import LabError

# Section headings, per notebook, that cards link to. Use them verbatim as headings.
SECTIONS: dict[str, tuple[str, ...]] = {
    "00_start_here.ipynb": (
        "Your first lock on each system",
        "What lies underneath: nodes and keys",
    ),
    "01_redis_vs_consensus.ipynb": (
        "The comparison table, measured",
        "A dead client keeps its Redis lock until the TTL",
        "A Redis crash: the lock vanishes or comes back",
        "Failover grants the same lock twice",
        "The one-liner to remember",
    ),
    "02_zookeeper_lock_recipe.ipynb": (
        "Ephemeral nodes die with the session",
        "Sequential nodes: the lowest holds",
        "Herd or predecessor: counting wakeups",
        "Session timeout is the failure detector",
        "A middle waiter dies: re-check",
        "Hand-rolled locks vs kazoo and Curator",
    ),
    "03_etcd_leases_and_mutex.ipynb": (
        "Leases and keep-alive",
        "The mutex key is bound to the lease",
        "When keep-alive fails: stop writing",
        "Compare-and-swap with a transaction instead of a lock",
        "Revisions go through the leader's log",
        "python-etcd3 Lock vs the Mutex port",
    ),
    "04_pauses_and_fencing.ipynb": (
        "A pause longer than the session timeout",
        "Fencing tokens: the store rejects the stale write",
        "Unlock fails while the session lives",
        "Stop writing: the holder's own deadline",
        "Where fencing has edges",
    ),
    "05_coordinator_crash_and_quorum.ipynb": (
        "Kill the ZooKeeper leader while the lock is held",
        "Kill the etcd leader while the lock is held",
        "Redis failover loses the lock",
        "Lose a majority: writes stop",
        "A failover restarts the session timers",
    ),
    "06_observing_lock_health.ipynb": (
        "The lock health dashboard",
        "What to alert on",
    ),
    "09_interview_practice.ipynb": (
        "Practice cards",
        "Pitfalls: predict, then run",
        "Mock interview",
    ),
    "sandbox.ipynb": (
        "Predict: ten waiters watch the parent",
        "Wakeups per release against N",
        "First come, first served",
        "A middle waiter dies: the re-check",
        "Edit the waiter's logic",
    ),
    "10_semaphores_elections_and_databases.ipynb": (
        "Never more than N, even when holders die",
        "One waiter per freed slot",
        "labkit and Curator in one semaphore",
        "One election, two implementations",
        "The epoch fences a paused leader",
        "Kubernetes-style lease election: a record and a clock",
        "The known gap: clocks",
        "A paused old leader writes late",
        "Advisory locks: a lock held by a connection",
    ),
    "08_redlock_and_clocks.ipynb": (
        "The price: Redlock against one SET NX",
        "It survives one crash",
        "Double grant 1: a clock step on a majority",
        "Double grant 2: a restart that forgets",
        "Double grant 3: a pause, and no token to fence with",
        "Clocks on all three systems",
        "The debate: efficiency or correctness",
    ),
    "07_partitions_and_client_side_expiry.ipynb": (
        "The minority cannot grant",
        "A cut-off holder believes it holds",
        "etcd: give up before the server revokes",
        "Redis split brain with Sentinel",
        "min-replicas-to-write narrows the window",
        "Slow links: round trips times delay",
    ),
}


DISCUSSION = ("Discussion: no experiment in this course shows this answer; it rests on the designs and "
              "documentation it names.")


class UnknownCard(LabError):
    """A card id that is not in the deck."""


def anchor(heading: str) -> str:
    """The fragment JupyterLab gives a markdown heading: spaces become dashes."""
    return heading.replace(" ", "-")


@dataclass(frozen=True)
class Card:
    """One practice question. ``proves`` lists (notebook file, section heading) pairs whose
    experiments show the answer; a ``discussion`` card has none, and ``see_also`` pairs that
    are related reading, not proof."""

    id: str
    question: str
    answer: str
    proves: tuple[tuple[str, str], ...]
    claims: tuple[str, ...] = ()
    source: str = "course"          # "seed-qa", "seed-pitfall", "course" or "senior"
    trade_off: str = ""             # what the answer costs: a senior interviewer asks for it
    when_not: str = ""              # when this answer is the wrong tool
    discussion: bool = False        # no section of the course proves the answer
    see_also: tuple[tuple[str, str], ...] = ()   # related sections of a discussion card: not proof

    def __post_init__(self):
        if self.discussion and self.proves:
            raise ValueError(f"card {self.id} is marked discussion but has proof links; drop one or the other")
        if not self.proves and not self.discussion:
            raise ValueError(f"card {self.id} links to no notebook section; add one from SECTIONS, or mark it "
                             "discussion=True if no experiment of the course shows its answer")
        for notebook, heading in self.proves + self.see_also:
            if heading not in SECTIONS.get(notebook, ()):
                raise ValueError(f"card {self.id} links to {notebook} § {heading!r}, which is not in SECTIONS; "
                                 "add the heading there (and to the notebook) or pick an existing one")

    def links(self) -> list[str]:
        """Markdown links to the proving sections (for a discussion card: to its see-also
        sections), relative to the notebooks folder."""
        return [f"[{notebook} › {heading}]({notebook}#{anchor(heading)})"
                for notebook, heading in self.proves or self.see_also]

    def links_html(self) -> str:
        """The answer's footer in the widgets: "Proved in" and the links, or for a discussion
        card, that nothing proves it and what is related."""
        def items(pairs):
            return "".join(f'<li><a href="{html.escape(notebook)}#{html.escape(anchor(heading))}">'
                           f"{html.escape(notebook)} › {html.escape(heading)}</a></li>" for notebook, heading in pairs)
        if not self.discussion:
            return f"<p>Proved in:</p><ul>{items(self.proves)}</ul>"
        related = f"<p>Related sections (they do not prove this answer):</p><ul>{items(self.see_also)}</ul>" \
            if self.see_also else ""
        return f"<p>{html.escape(DISCUSSION)}</p>{related}"

    def as_text(self, reveal: bool = True) -> str:
        lines = [f"[{self.id}] {self.question}"]
        lines.append(f"Answer: {self.answer}" if reveal else "Answer: (think first, then reveal)")
        if reveal and self.trade_off:
            lines.append(f"Trade-off: {self.trade_off}")
        if reveal and self.when_not:
            lines.append(f"When not to: {self.when_not}")
        lines += [f"  proved in {notebook} › {heading}" for notebook, heading in self.proves]
        if self.discussion:
            lines.append(f"  {DISCUSSION}")
            lines += [f"  related (not proof): {notebook} › {heading}" for notebook, heading in self.see_also]
        if self.claims:
            lines.append(f"  claims: {', '.join(self.claims)}")
        return "\n".join(lines)


def _card(id: str, source: str, claims: str, question: str, answer: str, *proves: tuple[str, str]) -> Card:
    return Card(id, question, answer, tuple(proves), tuple(claims.split()), source)


ZK, ETCD, PAUSES, CRASH = ("02_zookeeper_lock_recipe.ipynb", "03_etcd_leases_and_mutex.ipynb",
                           "04_pauses_and_fencing.ipynb", "05_coordinator_crash_and_quorum.ipynb")
REDIS, HEALTH, PRACTICE, SANDBOX = ("01_redis_vs_consensus.ipynb", "06_observing_lock_health.ipynb",
                                    "09_interview_practice.ipynb", "sandbox.ipynb")
REDLOCK, PARTITIONS = "08_redlock_and_clocks.ipynb", "07_partitions_and_client_side_expiry.ipynb"
LESSON10 = "10_semaphores_elections_and_databases.ipynb"

CARDS: tuple[Card, ...] = (
    # --- the seed's interview Q&A --------------------------------------------------------
    _card("qa-ephemeral", "seed-qa", "C1",
          "Why does the ZooKeeper lock recipe create ephemeral nodes?",
          "An ephemeral node lives only as long as the session that created it. When the holder "
          "crashes or is cut off, ZooKeeper expires its session and deletes the node, so the lock "
          "is freed without anyone having to unlock politely.",
          (ZK, "Ephemeral nodes die with the session"), ("00_start_here.ipynb", "What lies underneath: nodes and keys")),
    _card("qa-sequential", "seed-qa", "C13",
          "Why are the lock nodes sequential?",
          "ZooKeeper appends a counter that only grows, which puts all waiters in one total order. "
          "The lowest number holds the lock and the rest are served in arrival order: fair, "
          "first come first served, as long as every client follows the recipe.",
          (ZK, "Sequential nodes: the lowest holds"), (SANDBOX, "First come, first served")),
    _card("qa-predecessor", "seed-qa", "C2",
          "Why does a waiter watch its predecessor and not the parent?",
          "A watch on the parent fires for every waiter whenever any child changes, so each release "
          "wakes all N waiters and only one can win: O(N) work per release, the thundering herd. "
          "A watch on the node just below yours fires for exactly one waiter per release.",
          (ZK, "Herd or predecessor: counting wakeups"), (SANDBOX, "Wakeups per release against N")),
    _card("qa-curator", "seed-qa", "C15",
          "What is Curator's InterProcessMutex, and why use it?",
          "Apache Curator's production Java implementation of the ZooKeeper lock recipe (re-entrant). "
          "It handles what hand-written versions miss: a create whose reply was lost (it finds its "
          "node again by a unique prefix), connection loss versus session loss, retries and cleanup. "
          "Use it, or kazoo's Lock in Python, rather than a recipe copied from a blog.",
          (ZK, "Hand-rolled locks vs kazoo and Curator")),
    _card("qa-etcd-lease", "seed-qa", "C11",
          "How is an etcd lock tied to a lease?",
          "The client grants a lease with a TTL and keeps it alive in the background. The mutex key is "
          "written with that lease attached, so when keep-alive stops and the TTL runs out etcd deletes "
          "the key, and the waiter with the next-lowest create revision gets the lock.",
          (ETCD, "The mutex key is bound to the lease"), (ETCD, "Leases and keep-alive")),
    _card("qa-gc-pause", "seed-qa", "C3 C10",
          "How does the session timeout interact with a GC pause in the lock holder?",
          "If the pause outlasts the session timeout, the session expires, the node is deleted and "
          "another client takes the lock while the paused process still believes it holds it. The "
          "timeout bounds how long the lock is safe, not what the holder does after: a holder that "
          "paused past it must assume the lock is lost and stop writing. The fence is the resource "
          "itself: it checks the fencing token of every write and refuses one older than a token it "
          "has already seen.",
          (PAUSES, "A pause longer than the session timeout"), (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _card("qa-zk-vs-etcd", "seed-qa", "C4",
          "ZooKeeper or etcd for a new system?",
          "Usually etcd for greenfield work: Raft, a gRPC API, leases and a ready-made mutex, and the "
          "Kubernetes ecosystem runs on it. Keep ZooKeeper where your estate already depends on it. "
          "Both are consensus coordinators: both keep a held lock through a leader crash.",
          (CRASH, "Kill the ZooKeeper leader while the lock is held"), (CRASH, "Kill the etcd leader while the lock is held")),
    _card("qa-cross-datacenter", "seed-qa", "C5 C17",
          "Can you hold an etcd lock across datacenters?",
          "You can, but every acquire is a write through the leader and a quorum, so it pays "
          "cross-datacenter round trips, and a partition leaves the minority side unable to lock at "
          "all. Prefer a regional owner per resource and keep each lock inside one region.",
          (REDIS, "The comparison table, measured"), (CRASH, "Lose a majority: writes stop")),
    _card("qa-unlock-fails", "seed-qa", "C9",
          "Unlock fails, but your session is still alive. Who holds the lock?",
          "You do, until an unlock succeeds or the session (lease) ends; everyone else keeps waiting. "
          "Release in finally / defer so the unlock is always attempted, and hang the lock on a "
          "session or lease with a bounded timeout so a lost unlock cannot block others for ever.",
          (PAUSES, "Unlock fails while the session lives")),
    _card("qa-lock-health", "seed-qa", "C16",
          "How do you observe the health of a lock?",
          "Track hold duration (as a distribution), wait-queue depth (children under the lock node, "
          "keys under the etcd prefix), the rate of session expiries and lost leases, and keep-alive "
          "failures, next to the servers' own numbers: ZooKeeper mntr and watch counts, etcd metrics.",
          (HEALTH, "The lock health dashboard"), (HEALTH, "What to alert on")),
    _card("qa-linearizable", "seed-qa", "C17 C10",
          "Is a ZooKeeper lock linearizable?",
          "Its writes are: every create and delete is ordered by the leader (zxid), so all clients "
          "agree on the queue and on who is lowest. Its reads are not: a server answers from its own "
          "copy, which may lag the leader, so a client that must see the latest state calls sync() "
          "before reading. And none of it says when the holder acts: it must still stop when its "
          "session may be gone, and the resource should check a fencing token.",
          (CRASH, "Kill the ZooKeeper leader while the lock is held"), (ETCD, "Revisions go through the leader's log"),
          (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _card("qa-one-liner", "seed-qa", "C5 C6 C7 C8",
          "Give the interview one-liner: Redis lock vs ZooKeeper/etcd lock.",
          "Redis SET NX is a fast, best-effort lock on a single primary with only a TTL; ZooKeeper "
          "and etcd give consensus-backed locks bound to client sessions. Use them when two holders "
          "would corrupt data.",
          (REDIS, "Failover grants the same lock twice"), (REDIS, "The comparison table, measured")),
    # --- the seed's pitfalls -------------------------------------------------------------
    _card("pitfall-parent-watch", "seed-pitfall", "C2",
          "Ten waiters queue under /locks/r and each one watches the parent. "
          "The holder deletes its node. How many clients wake?",
          "All ten. A children-watch fires for every client that set it, on any change, so ten "
          "clients fetch the children again and nine go straight back to waiting. They are also "
          "woken each time a newcomer joins the queue.",
          (SANDBOX, "Predict: ten waiters watch the parent"), (ZK, "Herd or predecessor: counting wakeups"),
          (PRACTICE, "Pitfalls: predict, then run")),
    _card("pitfall-predecessor-watch", "seed-pitfall", "C2",
          "The same ten waiters now each watch only their predecessor. "
          "How many wake when the holder deletes its node?",
          "One: the waiter directly behind the holder. Its watch fires, it lists the children, finds "
          "itself lowest and takes the lock; the other nine hear nothing.",
          (SANDBOX, "Wakeups per release against N"), (ZK, "Herd or predecessor: counting wakeups"),
          (PRACTICE, "Pitfalls: predict, then run")),
    _card("pitfall-gc-pause", "seed-pitfall", "C10",
          "The holder is frozen by a GC pause longer than its session timeout. "
          "What must it do before writing anything?",
          "Assume the lock is gone: check the session (or lease); if it expired, do not write, start "
          "over. Because a pause can also strike between that check and the write, the write must "
          "carry the fencing token (the lock node's czxid, the key's create revision) so the store "
          "can refuse it once a newer holder has written.",
          (PAUSES, "A pause longer than the session timeout"), (PAUSES, "Fencing tokens: the store rejects the stale write"),
          (PRACTICE, "Pitfalls: predict, then run")),
    # --- what the course adds ------------------------------------------------------------
    _card("course-fencing-token", "course", "C10",
          "What is a fencing token, and where do ZooKeeper, etcd and Redis locks get one?",
          "A number that grows with every grant of the lock and travels with each write, so the "
          "protected store can refuse a write whose token is lower than one it has seen. ZooKeeper: "
          "the czxid of your lock node (its sequence number restarts if the parent is re-created). "
          "etcd: the create revision of your key. A plain "
          "Redis SET NX lock has no number that survives failover, so it cannot fence safely.",
          (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _card("course-redis-failover", "course", "C8",
          "How can Redis failover give the same lock to two clients?",
          "Replication is asynchronous: the primary acknowledges SET NX before the replica has it. If "
          "the primary dies in that window and the replica is promoted, the key is simply missing, so "
          "the next client's SET NX succeeds while the first still believes it holds the lock.",
          (REDIS, "Failover grants the same lock twice"), (CRASH, "Redis failover loses the lock")),
    _card("course-keepalive-fails", "course", "C11",
          "Your etcd lease keep-alive starts failing while you hold the mutex. What happens, and what must your code do?",
          "Nothing visible at first: etcd keeps the key until the lease TTL runs out after the last "
          "renewal it applied, then deletes it and the next waiter acquires. Your code keeps its own "
          "deadline: the TTL counted from when it sent the last keep-alive that was acknowledged (the "
          "server renewed the lease no earlier than that send; counting from the reply would be late), "
          "minus a margin for clock drift. When that deadline passes without a newer acknowledged "
          "keep-alive, stop writing and acquire again with a new lease.",
          (ETCD, "When keep-alive fails: stop writing")),
    _card("course-txn-cas", "course", "C12",
          "You need to update one etcd key safely. A lock, or a transaction?",
          "A transaction: read the value and its mod revision, then write with a compare that the "
          "revision is unchanged; if someone wrote in between, the txn fails and you retry. One round "
          "trip, no lock to lose, no lost update. Keep locks for multi-step work outside etcd.",
          (ETCD, "Compare-and-swap with a transaction instead of a lock")),
    _card("course-suspended-vs-lost", "course", "C15",
          "In kazoo, what is the difference between SUSPENDED and LOST for a lock holder?",
          "SUSPENDED: the connection dropped but the session may still live, so you cannot know if you "
          "hold the lock; stop writing. LOST: kazoo says it only after it reconnects and the server "
          "tells it the session expired; a holder cut off from every server never hears it and stays "
          "SUSPENDED while the server expires the session and gives the lock to another. So LOST is "
          "not your expiry signal, and SUSPENDED is no moment to count from either: kazoo reports it "
          "only after about two thirds of a timeout of silence (Curator's advice: treat SUSPENDED as "
          "lost). Keep a client-side deadline (Chubby calls the state jeopardy) by the deadline rule: "
          "give up at the send time of the newest request whose answer proves the session alive, plus "
          "the session timeout minus a margin.",
          (ZK, "Hand-rolled locks vs kazoo and Curator"), (PAUSES, "Stop writing: the holder's own deadline")),
    _card("course-recheck", "course", "C14",
          "A waiter's watch on its predecessor fires. May it take the lock straight away?",
          "No: it lists the children again. The predecessor may have gone because that waiter's "
          "session died, not because the lock was released, and an earlier node can still hold it. "
          "If it is now lowest it holds the lock; otherwise it watches its new predecessor.",
          (ZK, "A middle waiter dies: re-check"), (SANDBOX, "A middle waiter dies: the re-check")),
    _card("course-crash-detector", "course", "C3",
          "The lock holder is killed with SIGKILL. When does the next waiter get the lock?",
          "After about one session timeout: ZooKeeper notices only when the dead session stops "
          "heartbeating for that long, then deletes the ephemeral node and the next watch fires. "
          "The timeout is the failure detector: shorter means faster takeover but more false expiries.",
          (ZK, "Session timeout is the failure detector")),
    _card("course-leader-crash", "course", "C4 C17",
          "The coordinator's leader crashes while you hold the lock. Do you still hold it?",
          "Yes, as long as a majority survives: the others elect a new leader from the replicated log, "
          "your session or lease carries on, and the queue keeps its order. A lone Redis primary makes "
          "no such promise.",
          (CRASH, "Kill the ZooKeeper leader while the lock is held"), (CRASH, "Kill the etcd leader while the lock is held")),
    _card("course-lost-create", "course", "C15",
          "Your create of the sequential lock node times out. What can go wrong if you simply retry?",
          "The server may have created the node and lost only the reply. A blind retry leaves that "
          "orphan in the queue under your live session; if it is ever lowest nobody can get past it "
          "until your session ends. Curator and kazoo put a unique id in the node name so a retry "
          "finds its own earlier node.",
          (ZK, "Hand-rolled locks vs kazoo and Curator")),
    _card("course-fencing-read-first", "course", "C25",
          "The store refuses writes with an old fencing token. The new holder reads a counter, then "
          "writes it plus one. Can the old holder's late write still be lost or do damage?",
          "Yes. The store refuses a token only once it has seen a newer one. If the new holder's first "
          "contact is a plain read, the old holder's late write lands between that read and the new "
          "holder's write and is accepted; the new holder then writes a value computed from stale data, "
          "and the accepted write is silently lost. Show the token first: claim it before using the "
          "resource, or make reads fenced too.",
          (PAUSES, "Where fencing has edges")),
    _card("course-sequence-token", "course", "C25",
          "Why fence with the ZooKeeper node's czxid rather than its sequence number?",
          "The sequence number is a counter of the parent node. Curator makes lock parents container "
          "nodes, which the server deletes when they are empty; the next lock re-creates the parent "
          "and numbering starts again at 0, so a new holder can carry a lower number than an old one. "
          "The czxid is the zxid of the create, from the ensemble's one log: it only grows.",
          (PAUSES, "Where fencing has edges")),
    _card("course-failover-timers", "course", "C26 C3",
          "A lock holder crashes, and a moment later the coordinator's leader crashes too. When is "
          "the lock freed?",
          "Later than one timeout after the crash. The new leader does not know how long the dead "
          "client has been silent: ZooKeeper's new leader gives every session a fresh timeout, and "
          "etcd's extends every lease by its TTL plus an election timeout when it is promoted. So the "
          "lock is freed about one election plus one timeout after the leader's crash. Size waits and "
          "alerts for that.",
          (CRASH, "A failover restarts the session timers")),
    _card("course-etcd3-lock", "course", "C18",
          "Why not build on python-etcd3's Lock?",
          "Every waiter watches the same key, so each release wakes them all (a herd); it takes a new "
          "lease per attempt and never refreshes it on its own, so a long critical section silently "
          "loses the lock. A port of Go's concurrency.Mutex waits only on the key just before its own "
          "and keeps its session's lease alive.",
          (ETCD, "python-etcd3 Lock vs the Mutex port")),
    # --- notebook 08: Redlock and clocks -------------------------------------------------
    _card("redlock-price", "course", "C24",
          "Redlock takes its lock on five independent Redis primaries instead of one. What does that cost, "
          "and what does it buy?",
          "One SET per instance to acquire and one delete per instance to release: five round trips where a "
          "single Redis lock needs one: slower, and notebook 08 measures by how much. It buys availability: "
          "with a minority of instances dead, clients still win a majority and mutual exclusion holds. It buys "
          "no fencing token, and no protection against clock jumps, forgetful restarts or pauses.",
          (REDLOCK, "The price: Redlock against one SET NX"), (REDLOCK, "It survives one crash")),
    _card("redlock-validity", "course", "C24",
          "What is Redlock's validity time, and why is it shorter than the TTL?",
          "TTL minus the time the acquire took minus a drift allowance, counted from the end of the acquire "
          "on the client's monotonic clock: the holder may act until start + TTL - drift, the start being "
          "just before the first SET. The keys began to expire when they were set, after the start, so the "
          "elapsed time comes off once; the allowance covers instances whose clocks run a little fast. The "
          "holder may act only until the validity runs out, which a frozen process cannot check and an "
          "instance whose clock jumps does not respect.",
          (REDLOCK, "Double grant 1: a clock step on a majority"),
          (REDLOCK, "Double grant 3: a pause, and no token to fence with")),
    _card("redlock-clock-step", "course", "C24",
          "How can a clock step on three of five Redis servers give one Redlock to two clients?",
          "Redis expires a key at an absolute time on its own wall clock. Stepped ahead by the TTL, the three "
          "servers drop the holder's key at once; a second client wins those three, a majority, while the "
          "first still has almost all its validity left by its own correct clock. The drift allowance covers "
          "clocks that run fast, not clocks that jump.",
          (REDLOCK, "Double grant 1: a clock step on a majority"), (REDLOCK, "Clocks on all three systems")),
    _card("redlock-restart", "course", "C24",
          "A Redlock instance crashes and comes back at once with no persistence. How can that grant the lock "
          "twice, and what are the remedies?",
          "If the holder won exactly a majority, the restarted instance has forgotten its vote and gives it to "
          "a second client, who adds the instances the first one never won and has a majority too. Remedies: "
          "keep a crashed instance down for longer than the largest TTL (delayed restart), or fsync every "
          "write (appendfsync always); everysec can lose the key too.",
          (REDLOCK, "Double grant 2: a restart that forgets")),
    _card("redlock-no-token", "course", "C24 C10",
          "A Redlock holder is frozen past its validity time, wakes and writes. Can the resource refuse the write?",
          "Not with anything Redlock hands out: its value is random, so a store cannot tell the newer holder "
          "from the older one, and a store that demands a growing token refuses every Redlock write. A "
          "check-and-set on the value helps only if the new holder claims the resource before the late write "
          "arrives. A growing token comes from consensus: the lock node's czxid in ZooKeeper, the key's create "
          "revision in etcd.",
          (REDLOCK, "Double grant 3: a pause, and no token to fence with")),
    _card("clocks-three-systems", "course", "C24",
          "Which of Redis, ZooKeeper and etcd expire a lock on the server's wall clock?",
          "Redis: a key's expiry is an absolute wall-clock time, so a step forward expires it early. ZooKeeper "
          "times sessions on a monotonic clock: a session survived a 30 s step of its server. etcd's leases use "
          "Go's monotonic readings; the lab cannot step etcd's clock (Go bypasses libc), and saw its lease TTL "
          "count down steadily.",
          (REDLOCK, "Clocks on all three systems")),
    _card("redlock-debate", "course", "C24",
          "Kleppmann and antirez disagreed about Redlock in 2016. What is each one's argument, and when is "
          "Redlock a reasonable choice?",
          "Kleppmann: for an efficiency lock one Redis is enough; for a correctness lock Redlock is unsafe, "
          "because it assumes bounded delays, pauses and clock error and gives no fencing token, so use "
          "consensus plus fencing. antirez: it needs clocks to run at about the same rate, not to agree; jumps "
          "and instant restarts can be ruled out by operations; pauses hurt every expiring lock. Redlock is "
          "fine for efficiency locks that must survive an instance crash, not where two holders corrupt data.",
          (REDLOCK, "Double grant 1: a clock step on a majority"),
          (REDLOCK, "Double grant 3: a pause, and no token to fence with")),
)


# --- senior cards: each also says what the answer costs and when it is the wrong tool ------
def _senior(id: str, claims: str, question: str, answer: str, trade_off: str, when_not: str,
            *proves: tuple[str, str], see_also: tuple[tuple[str, str], ...] = ()) -> Card:
    """A senior card; with ``see_also`` and no ``proves`` it is a discussion card."""
    return Card(id, question, answer, tuple(proves), tuple(claims.split()), "senior", trade_off, when_not,
                discussion=not proves, see_also=see_also)


CARDS += (
    _senior("senior-lock-lease-election", "C11 C17 C28",
            "Lock, lease, leader election: what is the difference, and what do etcd's election API and "
            "a Kubernetes Lease object give you?",
            "A lock serialises one critical section and is released after it. A lease is a lock with a "
            "time limit the holder must keep renewing, so a dead holder frees it without help. Leader "
            "election is a long-lived lease on a role, plus a way for others to learn who holds it. "
            "etcd's election API (Campaign, Proclaim, Leader, Observe, Resign) is the mutex recipe with "
            "a value: the leader key is bound to a lease, and its create revision is a fencing token. "
            "A Kubernetes Lease (holderIdentity, leaseDurationSeconds, renewTime) is updated with "
            "optimistic concurrency on resourceVersion; client-go's leaderelection says plainly it "
            "does not guarantee a single acting leader: it has no fencing.",
            "A lease bounds how long a crashed holder blocks everyone, but a live holder that pauses "
            "past it keeps acting: availability bought with a window of two holders, closed only by "
            "fencing at the resource.",
            "Do not run an election when the work can be partitioned (shard by key, each shard owned "
            "by a consistent hash) or made idempotent; do not trust a Kubernetes Lease where a second "
            "leader corrupts data unless the writes carry a token.",
            (ETCD, "The mutex key is bound to the lease"), (ETCD, "Leases and keep-alive"),
            (LESSON10, "One election, two implementations"), (LESSON10, "The epoch fences a paused leader")),
    _senior("senior-redlock-debate", "C24 C10",
            "A colleague proposes Redlock to guard payment captures, citing antirez's reply to Kleppmann. "
            "Make the call, using both sides of the debate.",
            "Kleppmann ('How to do distributed locking', 2016): Redlock's safety rests on timing "
            "assumptions (bounded network delay, bounded pauses, clocks that do not jump), and it hands "
            "out no fencing token, so a paused holder writes late and nothing stops it; for efficiency "
            "one Redis is enough, for correctness use consensus plus fencing. antirez ('Is Redlock safe?'): "
            "the clock assumption is about rate, not sync, and is reasonable if you avoid clock steps; "
            "the random value can serve for check-and-set at the resource. Both agree a pause past the "
            "validity time is unsolved by the lock alone. The call: no for payments (two captures "
            "charge a customer twice); use a consensus lock with a token the payment store checks, or "
            "better an idempotency key on the capture itself.",
            "Five independent primaries survive a minority crash with sub-millisecond latency and no "
            "consensus, but you pay five round trips and a safety argument that depends on clocks, "
            "fsync policy and restart delays.",
            "Not where two holders corrupt data (payments, inventory, leader-only writes): there, a "
            "consensus lock with a fencing token. Not for pure efficiency either if one Redis already "
            "does: Redlock costs more than it buys.",
            (REDLOCK, "Double grant 3: a pause, and no token to fence with"),
            (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _senior("senior-chubby", "C10 C20",
            "What are Chubby's sequencers, lock-delay and jeopardy, and which problem does each solve?",
            "A sequencer is an opaque string (lock name, mode, generation number) the holder passes to "
            "the servers it calls; they check it with Chubby or against the newest they saw: a fencing "
            "token. Lock-delay: when a holder's session ends without a release, Chubby keeps the lock "
            "from anyone for a while (up to a minute), a cheap guard for servers that cannot check "
            "sequencers. Jeopardy: when the client's local lease runs out without a reply from the "
            "master, it stops trusting its cache and handles, then waits a grace period; if the master "
            "answers it carries on, else the session is expired. It is the client-side deadline.",
            "Sequencers need every resource to check them; lock-delay trades availability (the lock "
            "stays unusable after every crash) for safety against late writes; jeopardy makes the "
            "client stop early, sometimes when its session was still alive.",
            "Lock-delay only narrows the window: never rely on it where a sequencer check is possible. "
            "Jeopardy is not needed for work that is idempotent or fenced end to end.",
            (PARTITIONS, "A cut-off holder believes it holds"),
            (PAUSES, "Fencing tokens: the store rejects the stale write"), (PAUSES, "A pause longer than the session timeout")),
    _senior("senior-efficiency-vs-correctness", "C5 C8 C10",
            "Efficiency lock or correctness lock: how do you tell which one you need, and what changes?",
            "Ask what two holders cost. If it is duplicated work (a report computed twice, a cache "
            "warmed twice), it is an efficiency lock: a single Redis SET NX with a TTL is plenty, and "
            "an occasional double grant is acceptable. If two holders corrupt or lose data, it is a "
            "correctness lock: a consensus coordinator (ZooKeeper, etcd), a session or lease bound to "
            "the holder, and a fencing token that the resource itself checks.",
            "The correctness lock costs milliseconds per acquire through a quorum, three or five "
            "servers to run, and changes at the resource (it must store and compare tokens); the "
            "efficiency lock is sub-millisecond and simple, and fails open.",
            "Do not build a correctness lock where the operation can be made idempotent or a "
            "conditional write does the job; do not call a lock 'for efficiency' when a double run "
            "charges a customer twice.",
            (REDIS, "Failover grants the same lock twice"),
            (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _senior("senior-dies-halfway", "C3 C10",
            "The lock holder dies halfway through a three-step update. The next holder gets the lock. "
            "What state does it find, and how do you design for this?",
            "Whatever the first holder left: a lock is not a transaction, nothing is rolled back. "
            "Design the critical section so a successor can finish or undo it: record a write-ahead "
            "intent (what you are about to do, with your fencing token) in the resource before "
            "acting; make each step idempotent (an idempotency key, an upsert, 'set to X' not "
            "'add 1'); have the next holder read the intent and complete or compensate; and fence "
            "every write so the dead holder, if it was only paused, cannot come back mid-repair.",
            "Intents and idempotency keys cost an extra write per step and recovery code that is "
            "rarely exercised and must be tested by killing holders on purpose.",
            "If the whole update fits in one store's transaction, use that transaction instead and "
            "drop the lock; do not write recovery logic for work that is safe to redo from scratch.",
            (ZK, "Session timeout is the failure detector"), (PAUSES, "A pause longer than the session timeout"),
            (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _senior("senior-database-locks", "C12 C29 C30",
            "Your data lives in PostgreSQL (or DynamoDB). Why not lock there instead of in ZooKeeper?",
            "Often you should. Postgres advisory locks (pg_advisory_lock, or pg_advisory_xact_lock "
            "freed at commit) are bound to the connection, not to a live client: the server frees "
            "them when it notices the connection is gone. When a client process dies, its "
            "operating system closes the connection; but a dead or partitioned client host leaves a "
            "half-open TCP connection, which Postgres notices only through TCP keepalive (hours with "
            "the default settings) or, while a query runs, client_connection_check_interval; it "
            "holds the lock until then. "
            "SELECT ... FOR UPDATE locks the rows you will change until commit (SKIP LOCKED turns a "
            "table into a work queue). A conditional write (UPDATE ... WHERE version = 7, DynamoDB's "
            "ConditionExpression, an HTTP If-Match) is compare-and-swap: no lock at all. The lock and "
            "the data commit together, so there is no window between losing the lock and writing.",
            "You add load and lock waits to the primary database and tie lock liveness to a "
            "connection; session-level advisory locks break behind a transaction-mode pooler "
            "(PgBouncer), and long row locks block vacuum and other writers.",
            "Not when the protected resource is outside that database (a file, an external API, a "
            "fleet of workers), nor for long holds, nor across several databases: there a "
            "coordinator plus fencing.",
            (LESSON10, "Advisory locks: a lock held by a connection"), (LESSON10, "A paused old leader writes late"),
            see_also=((ETCD, "Compare-and-swap with a transaction instead of a lock"),)),
    _senior("senior-split-brain-stonith", "C8 C19 C22",
            "What is split brain, and how do STONITH and quorum prevent it?",
            "Two nodes each believe they are the primary (or the lock holder), usually after a "
            "partition or a failover that the old primary did not see, and both accept writes. "
            "Quorum stops the minority side from electing or granting: only a majority acts. STONITH "
            "('shoot the other node in the head', Pacemaker's fencing) makes sure the old primary is "
            "really dead, by powering it off through IPMI or a PDU, before the new one takes over. "
            "Storage fencing (SCSI persistent reservations, detaching a cloud volume) and fencing "
            "tokens do the same at the resource.",
            "STONITH needs an out-of-band path (power, cloud API) that must itself be reliable, and a "
            "slow or failing fence blocks the failover: safety is bought with availability.",
            "Not for stateless services, where two active copies are harmless; and Redis Sentinel "
            "without fencing is not split-brain proof: min-replicas-to-write only narrows the window.",
            see_also=((PARTITIONS, "Redis split brain with Sentinel"), (PARTITIONS, "The minority cannot grant"),
                      (REDIS, "Failover grants the same lock twice"), (CRASH, "Redis failover loses the lock"))),
    _senior("senior-etcd-revoke-when", "C11 C26 C19",
            "Your etcd lease has a TTL of 10 s and its holder crashed. When exactly does etcd delete "
            "the lock key?",
            "When the leader's lessor sees the TTL run out and a revoke is committed through Raft, so "
            "it needs a quorum: a leader without a majority cannot revoke, and nobody else can. On a "
            "leader change the new leader renews every lease to a full TTL (plus an election timeout) "
            "from the moment it takes over, because it cannot know how much time passed. So the key "
            "goes at least a TTL after the last keep-alive, and after a failover up to an election "
            "plus a whole TTL later.",
            "Extending leases on failover keeps live holders from losing locks in an election they "
            "could not see, at the price of slower takeover after a crash; quorum-bound revocation "
            "keeps a minority from freeing locks.",
            "Do not use the server's revocation time as a holder's deadline: the holder must count its "
            "own, shorter deadline from when it sent its last acknowledged keep-alive.",
            (CRASH, "A failover restarts the session timers"), (CRASH, "Kill the etcd leader while the lock is held"),
            (PARTITIONS, "The minority cannot grant"), (ETCD, "Leases and keep-alive")),
    _senior("senior-detect-expiry", "C11 C15 C20 C21",
            "How does a lock holder find out that its session or lease has expired, and when should it "
            "stop writing?",
            "Usually too late, from the server: kazoo reports LOST only after it reconnects, and an "
            "etcd keep-alive stream just stops answering. So count a deadline on the client, by the "
            "deadline rule: give up at the send time of the newest request whose answer proves the "
            "session alive, plus the session timeout (or lease TTL) minus a margin. An etcd "
            "keep-alive reply proves it; a ZooKeeper follower's answer does not, since a follower "
            "cut from the leader keeps answering for up to syncLimit x tickTime, so subtract that too. "
            "Stop writing at that deadline, and at once on SUSPENDED in kazoo ('you may not hold it'); "
            "resume only when the server confirms the session. This is Chubby's jeopardy.",
            "A conservative deadline makes the holder stop on short network blips when it still held "
            "the lock: fewer two-holder windows, more spurious give-ups and re-acquires.",
            "A deadline cannot stop a write already in flight or a pause between the check and the "
            "write: for correctness it complements fencing, it does not replace it.",
            (PARTITIONS, "A cut-off holder believes it holds"), (PARTITIONS, "etcd: give up before the server revokes"),
            (ETCD, "When keep-alive fails: stop writing")),
    _senior("senior-read-write-lock", "C2 C13",
            "How do you build a distributed read/write lock on ZooKeeper without a herd?",
            "Same queue, two kinds of sequential ephemeral nodes: read-N and write-N. A reader holds "
            "when no write node is below it, and otherwise watches the nearest write node below it. A "
            "writer holds when it is lowest of all, and otherwise watches the node directly below it. "
            "Readers run together, writers alone, and arrival order (the sequence) keeps writers from "
            "starving. Each release still wakes only the waiters that can make progress; Curator "
            "ships it as InterProcessReadWriteLock.",
            "More throughput for read-heavy work, paid for with a recipe that is harder to get right "
            "and one more node kind to fence: readers get no token a store can compare.",
            "Not when readers can use versioned, consistent reads of the data itself (etcd revisions, "
            "MVCC snapshots); not when the critical section is short enough that a plain mutex never "
            "queues.",
            see_also=((ZK, "Sequential nodes: the lowest holds"), (ZK, "Herd or predecessor: counting wakeups"))),
    _senior("senior-reentrancy", "C15",
            "Is a distributed lock reentrant? What goes wrong if you assume it is, or is not?",
            "It depends on the library. Curator's InterProcessMutex counts re-entries per thread in "
            "the JVM: the same thread may acquire again and must release as often. Go's etcd "
            "concurrency.Mutex names its key prefix + lease id, so two goroutines sharing one Session "
            "get the same key and both 'hold' the lock: reentrant by accident, across threads. "
            "A non-reentrant lock acquired twice by one holder waits on itself for ever.",
            "Reentrancy makes layered code easy to write and hides who really owns the lock; "
            "without it you must pass the lock (or its token) down explicitly.",
            "Do not share a session between workers that each need the lock; do not lean on "
            "reentrancy in code where a nested acquire means a design error.",
            see_also=((ZK, "Hand-rolled locks vs kazoo and Curator"), (ETCD, "The mutex key is bound to the lease"))),
    _senior("senior-lock-ordering", "C13 C16",
            "A job takes lock A then lock B; another takes B then A. What happens, and how do you prevent it?",
            "A distributed deadlock: both hold one lock and wait for ever for the other, and no "
            "session expires because both holders are alive and heartbeating. Prevent it by taking "
            "locks in one global order (sort the names), by taking one coarser lock, or by acquiring "
            "with a timeout and releasing everything to back off with jitter. Detect it by alerting "
            "on hold time and on queue depth that does not drain.",
            "A global order is cheap but must be known up front; try-lock with back-off handles "
            "dynamic sets at the cost of retries and livelock risk; a coarse lock serialises more "
            "work than needed.",
            "Do not take several distributed locks at all if a transaction over one store covers "
            "the change: multi-key etcd txns and database transactions are atomic without locks.",
            see_also=((HEALTH, "What to alert on"), (HEALTH, "The lock health dashboard"))),
    _senior("senior-semaphore-v2", "C1 C2 C27",
            "What is Curator's InterProcessSemaphoreV2, and how does it work?",
            "A counting semaphore across processes: at most maxLeases holders at once. Each acquire "
            "creates an ephemeral sequential lease node under path/leases, guarded by an "
            "InterProcessMutex on path/locks; the client keeps its lease once at most maxLeases lease "
            "nodes exist, and otherwise keeps the mutex and waits on a children watch: only the mutex "
            "holder watches the leases, so a freed lease wakes one client. acquire() returns a Lease you "
            "must close; a dead client's lease node dies with its session.",
            "It limits concurrency (connections to a database, licences) without one lock per slot, "
            "but maxLeases is a convention: every client must pass the same number (or share a "
            "SharedCount), and a mismatch is not detected.",
            "Not for mutual exclusion on data (use the mutex and a token), and not for rate limits "
            "per second: a semaphore counts holders, not requests.",
            (LESSON10, "Never more than N, even when holders die"), (LESSON10, "labkit and Curator in one semaphore"),
            (LESSON10, "One waiter per freed slot"),
            see_also=((ZK, "Hand-rolled locks vs kazoo and Curator"), (ZK, "Ephemeral nodes die with the session"))),
    _senior("senior-fencing-edges", "C25 C10",
            "You added fencing tokens. Can a stale holder still corrupt the data?",
            "Yes, in two ways. The resource checks a token only when a write arrives: a stale holder "
            "that read before the new holder wrote can still do a read-modify-write on old data, "
            "unless the new holder first claims the resource with its token (or reads are fenced "
            "too). And the token must only grow: a ZooKeeper sequence restarts if the lock's parent "
            "node is deleted and re-created, while the czxid keeps growing; use a number that is "
            "monotonic over the lock's whole life.",
            "A claim-first protocol costs one more round trip to the resource per acquire; fenced "
            "reads cost a check on every read.",
            "Where the resource cannot store a token at all (an e-mail, a third-party API), fencing "
            "is impossible: make the action idempotent with a key the third party dedups on.",
            (PAUSES, "Where fencing has edges"), (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _senior("senior-minority-partition", "C19 C4",
            "A network partition leaves the coordinator's leader and one client on the small side. "
            "What can that client do?",
            "Nothing that needs a grant: the minority cannot commit, so it can neither create a lock "
            "node nor put a key, and an old leader steps down (etcd) or stops serving (ZooKeeper) "
            "once it loses the majority. The majority side elects a new leader and keeps granting. "
            "A client that already held the lock on the small side keeps running, so it must stop on "
            "its own deadline, before its session can expire on the majority side.",
            "Consistency over availability: the minority side is down for locking until the "
            "partition heals. Redis has no majority to lose, so both sides can keep granting.",
            "Do not put a quorum coordinator across two datacenters with an even split, or with the "
            "majority in the datacenter most likely to be cut off: the wrong side stops.",
            (PARTITIONS, "The minority cannot grant"), (CRASH, "Lose a majority: writes stop")),
    _senior("senior-kubernetes-lease", "C11 C20 C31",
            "Kubernetes controllers elect a leader through a Lease object. What does that guarantee, "
            "and what does it rely on?",
            "A candidate writes its identity and renewTime into the Lease with a compare on "
            "resourceVersion (so two cannot both win one update). Others treat the lease as expired "
            "when they have seen no change to it for leaseDurationSeconds on their own clock; the "
            "leader gives up if it cannot renew within renewDeadline, which is shorter. It relies on "
            "clocks that run at about the same rate and on the leader noticing in time; client-go "
            "says it does not fence, so a paused leader can act after a new one is elected.",
            "Cheap and built into every cluster (the API server and etcd already exist), at the cost "
            "of a window where two leaders may act.",
            "Not as the only guard for writes outside Kubernetes that must not happen twice; pass "
            "leaseTransitions or the resourceVersion as a token to a resource that checks it.",
            (LESSON10, "Kubernetes-style lease election: a record and a clock"), (LESSON10, "The known gap: clocks"),
            see_also=((ETCD, "Leases and keep-alive"), (PAUSES, "A pause longer than the session timeout"))),
    _senior("senior-capacity", "C2 C5 C11",
            "Capacity: how much can one etcd or ZooKeeper cluster carry for locks, and what gives out "
            "first with 100,000 sessions or one hot lock?",
            "Count writes and renewals, not locks. Every acquire and release is a write through the "
            "leader's log: a quorum round trip plus an fsync, so a cluster takes thousands to a few tens "
            "of thousands of lock operations a second in total, and more voters make each write slower, "
            "not faster. Each session or lease is renewed about three times per TTL: 100,000 sessions "
            "with a 10 s TTL is about 30,000 renewals a second, so etcd clients share one lease per "
            "process for all their locks. Watches cost nothing while idle and one event per watcher per "
            "change: a parent watch on a hot lock sends N events per release, a predecessor watch one. "
            "One hot lock serialises everyone: at most 1 / (hold time + hand-off) holders a second, and "
            "no cluster size changes that.",
            "Longer leases and shared sessions cut the renewal load but make a crashed holder block "
            "others for longer; splitting one lock into one per key multiplies throughput but gives up "
            "a single order.",
            "Do not size a cluster by the number of locks held (idle locks are nearly free) but by "
            "acquires, releases and renewals per second; do not put a per-request lock on a hot path "
            "through consensus at all.",
            see_also=((ZK, "Herd or predecessor: counting wakeups"),
                      (ETCD, "Revisions go through the leader's log"))),
    _senior("senior-epochs-without-locks", "C10 C25",
            "Kafka fences a zombie producer and a consumer paused through a rebalance without any lock. "
            "How, and what is the general pattern?",
            "Each is an epoch handed out by the one component that orders them, and checked on every "
            "request. A transactional producer that starts with a transactional.id makes the "
            "transaction coordinator raise that id's producer epoch; a zombie with the old epoch is "
            "refused (ProducerFenced) and its open transaction is aborted. A consumer group's "
            "coordinator raises the generation on every rebalance; an offset commit carries the "
            "generation and member id, and one from an old generation is refused (IllegalGeneration), "
            "so a consumer paused through a rebalance cannot overwrite its successor's offsets. It is a "
            "fencing token without a lock: a number that only grows, issued by one authority, compared "
            "by whoever receives the write.",
            "No lock service to run or wait on, but the fence covers only what goes through the "
            "component that checks the epoch.",
            "Not for side effects outside that component (a database row, an e-mail sent by the "
            "consumer): write the epoch or generation with the data and have that store compare it.",
            see_also=((PAUSES, "Fencing tokens: the store rejects the stale write"),
                      (PAUSES, "Where fencing has edges"))),
)


# --- notebook 07: partitions and client-side expiry ---------------------------------------
CARDS += (
    _card("partition-minority", "course", "C19",
          "A partition puts a ZooKeeper (or etcd) leader and one client on the small side. Can that client "
          "get the lock? What does the old leader become?",
          "No. Without a majority the old leader cannot commit, so ZooKeeper's stops serving and etcd's steps "
          "down by itself (check-quorum); the client's request waits or fails. The majority elects a new "
          "leader within seconds and keeps granting. After the heal the old leader rejoins as a follower. "
          "A Redis primary on the small side would have granted: it has no majority to consult.",
          (PARTITIONS, "The minority cannot grant")),
    _card("partition-suspended-holder", "course", "C20",
          "A kazoo client holding a lock is cut off for longer than its session timeout. What does it "
          "believe when the server gives the lock to another client, and how do you stop it in time?",
          "It is SUSPENDED with is_acquired still True: kazoo cannot know the session expired until it "
          "reaches a server again, so both clients hold. Keep a client-side deadline: give the lock up "
          "once (session timeout - margin) has passed since it sent the newest request the server answered; "
          "the server expires the session a full timeout after it received that request, later, so the "
          "holder stops first.",
          (PARTITIONS, "A cut-off holder believes it holds")),
    _card("partition-etcd-send-time", "course", "C21",
          "Why should an etcd lock holder count its lease deadline from when it sent its last acknowledged "
          "keep-alive, not from when the reply came?",
          "The server restarted the TTL when it received that keep-alive, which is after the send and "
          "before the reply. Counting from the send makes the holder's deadline fall before the server's "
          "revocation; from the reply it could fall up to a round trip later. Measured with a 2 s TTL and a "
          "cut link: the holder gave up 0.3 to 0.7 s before the server revoked, every run.",
          (PARTITIONS, "etcd: give up before the server revokes")),
    _card("partition-sentinel-split-brain", "course", "C22 C8",
          "Redis with Sentinel: a partition puts the primary and one client on one side, the replica and the "
          "sentinels on the other. What happens to a lock? Does min-replicas-to-write fix it?",
          "The sentinels promote the replica; the old primary keeps accepting its client's writes; a second "
          "client takes the same lock on the new primary, and both hold it. min-replicas-to-write 1 with "
          "min-replicas-max-lag makes the cut-off primary refuse writes after the lag, which shortens the "
          "window, but a lock acknowledged just before the cut can be missing on the promoted replica and is "
          "granted again. Replication stays asynchronous.",
          (PARTITIONS, "Redis split brain with Sentinel"), (PARTITIONS, "min-replicas-to-write narrows the window")),
    _card("partition-slow-link", "course", "C23 C5",
          "The lock service is 50 ms away (100 ms round trip). Estimate one acquire on Redis, ZooKeeper and "
          "etcd.",
          "Count round trips. Redis SET NX: 1, about 100 ms. ZooKeeper: create + getChildren plus the "
          "leader's commit round trip to a follower: 3, about 300 ms when the servers are as far apart. etcd "
          "with a new lease: grant + txn, each committed through a follower: 4, about 400 ms; reuse the "
          "session's lease to save two. Measured in the lab with a delay on every link, within a few ms.",
          (PARTITIONS, "Slow links: round trips times delay")),
)
