"""Interview practice cards: question, answer, and the notebook section that proves it.

Every card links to a section of a course notebook whose experiment shows the answer on
real servers (or on the sandbox). The headings are fixed in ``SECTIONS``; notebook authors
use exactly those texts as markdown headings, so a link never points at nothing.

    CARDS                          # every card; labkit.practice.deck.Deck shows them

What can fail: an unknown card id raises ``UnknownCard``; a card whose link names a
notebook or heading missing from ``SECTIONS`` raises ValueError when it is created.
"""
from __future__ import annotations

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
    ),
    "05_coordinator_crash_and_quorum.ipynb": (
        "Kill the ZooKeeper leader while the lock is held",
        "Kill the etcd leader while the lock is held",
        "Redis failover loses the lock",
        "Lose a majority: writes stop",
    ),
    "06_observing_lock_health.ipynb": (
        "The lock health dashboard",
        "What to alert on",
    ),
    "07_interview_practice.ipynb": (
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
    "08_redlock_and_clocks.ipynb": (
        "The price: Redlock against one SET NX",
        "It survives one crash",
        "Double grant 1: a clock step on a majority",
        "Double grant 2: a restart that forgets",
        "Double grant 3: a pause, and no token to fence with",
        "Clocks on all three systems",
        "The debate: efficiency or correctness",
    ),
}


class UnknownCard(LabError):
    """A card id that is not in the deck."""


def anchor(heading: str) -> str:
    """The fragment JupyterLab gives a markdown heading: spaces become dashes."""
    return heading.replace(" ", "-")


@dataclass(frozen=True)
class Card:
    """One practice question. ``proves`` lists (notebook file, section heading) pairs."""

    id: str
    question: str
    answer: str
    proves: tuple[tuple[str, str], ...]
    claims: tuple[str, ...] = ()
    source: str = "course"          # "seed-qa", "seed-pitfall" or "course"

    def __post_init__(self):
        if not self.proves:
            raise ValueError(f"card {self.id} links to no notebook section; add one from SECTIONS")
        for notebook, heading in self.proves:
            if heading not in SECTIONS.get(notebook, ()):
                raise ValueError(f"card {self.id} links to {notebook} § {heading!r}, which is not in SECTIONS; "
                                 "add the heading there (and to the notebook) or pick an existing one")

    def links(self) -> list[str]:
        """Markdown links to the proving sections, relative to the notebooks folder."""
        return [f"[{notebook} › {heading}]({notebook}#{anchor(heading)})" for notebook, heading in self.proves]

    def as_text(self, reveal: bool = True) -> str:
        lines = [f"[{self.id}] {self.question}"]
        lines.append(f"Answer: {self.answer}" if reveal else "Answer: (think first, then reveal)")
        lines += [f"  proved in {notebook} › {heading}" for notebook, heading in self.proves]
        if self.claims:
            lines.append(f"  claims: {', '.join(self.claims)}")
        return "\n".join(lines)


def _card(id: str, source: str, claims: str, question: str, answer: str, *proves: tuple[str, str]) -> Card:
    return Card(id, question, answer, tuple(proves), tuple(claims.split()), source)


ZK, ETCD, PAUSES, CRASH = ("02_zookeeper_lock_recipe.ipynb", "03_etcd_leases_and_mutex.ipynb",
                           "04_pauses_and_fencing.ipynb", "05_coordinator_crash_and_quorum.ipynb")
REDIS, HEALTH, PRACTICE, SANDBOX = ("01_redis_vs_consensus.ipynb", "06_observing_lock_health.ipynb",
                                    "07_interview_practice.ipynb", "sandbox.ipynb")
REDLOCK = "08_redlock_and_clocks.ipynb"

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
          "timeout is the fence boundary: after such a pause the holder must assume the lock is lost "
          "and stop writing, and the resource should reject writes carrying an old fencing token.",
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
          "The acquire is: every create and delete is ordered by the leader (zxid), so all clients "
          "agree on the queue and on who is lowest. That says nothing about when the holder acts: it "
          "must still stop on session loss, and the resource should check a fencing token.",
          (CRASH, "Kill the ZooKeeper leader while the lock is held"), (ETCD, "Revisions go through the leader's log"),
          (PAUSES, "Fencing tokens: the store rejects the stale write")),
    _card("qa-one-liner", "seed-qa", "C5 C6 C7 C8",
          "Give the interview one-liner: Redis lock vs ZooKeeper/etcd lock.",
          "Redis SET NX is a fast, best-effort lock on a single primary with only a TTL; ZooKeeper "
          "and etcd give consensus-backed locks bound to client sessions. Use them when two holders "
          "would corrupt data.",
          (REDIS, "The one-liner to remember"), (REDIS, "Failover grants the same lock twice")),
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
          "carry the fencing token (node sequence, key revision) so the store can refuse it once a "
          "newer holder has written.",
          (PAUSES, "A pause longer than the session timeout"), (PAUSES, "Fencing tokens: the store rejects the stale write"),
          (PRACTICE, "Pitfalls: predict, then run")),
    # --- what the course adds ------------------------------------------------------------
    _card("course-fencing-token", "course", "C10",
          "What is a fencing token, and where do ZooKeeper, etcd and Redis locks get one?",
          "A number that grows with every grant of the lock and travels with each write, so the "
          "protected store can refuse a write whose token is lower than one it has seen. ZooKeeper: "
          "the sequence number of your lock node. etcd: the create revision of your key. A plain "
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
          "Nothing visible at first: the key lives until the TTL runs out, then etcd deletes it and the "
          "next waiter acquires. Your code must treat a failing keep-alive as losing the lock: stop "
          "writing before the TTL can have expired, and acquire again with a new lease.",
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
          "hold the lock; pause writing and wait. LOST: the session expired, the ephemeral node and "
          "the lock are gone; stop and acquire again. Treating SUSPENDED as fine risks two holders.",
          (ZK, "Hand-rolled locks vs kazoo and Curator")),
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
          "single Redis lock needs one, several times slower even on loopback. It buys availability: with a "
          "minority of instances dead, clients still win a majority and mutual exclusion holds. It buys no "
          "fencing token, and no protection against clock jumps, forgetful restarts or pauses.",
          (REDLOCK, "The price: Redlock against one SET NX"), (REDLOCK, "It survives one crash")),
    _card("redlock-validity", "course", "C24",
          "What is Redlock's validity time, and why is it shorter than the TTL?",
          "TTL minus the time the acquire took minus a drift allowance, counted on the client's monotonic "
          "clock from before the first SET: the first keys began to expire when they were set, and the "
          "instances' clocks may run a little fast. The holder may act only until it runs out, which a "
          "frozen process cannot check and an instance whose clock jumps does not respect.",
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
          "arrives. A growing token comes from consensus: ZooKeeper's sequence number, etcd's create revision.",
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
          (REDLOCK, "The debate: efficiency or correctness")),
)
