// The ZooKeeper lock recipe on an in-memory model, in TypeScript: the same model as
// labkit/practice/sandbox.py and its coordinator, sandbox_coordinator.py, line for line,
// so that it runs in a browser with no kernel and no server. tests/practice/test_ts_sandbox.py runs both on the same scenarios and fails if
// they ever disagree (wakeups, node names, holders, the trace, errors).
//
// What goes wrong here is what goes wrong on a real ensemble, slowed down: a waiter that
// watches the parent is woken by every change (a herd), and a waiter that trusts a watch
// without re-checking can take the lock while an earlier node still holds it. Nothing is
// delivered until step() or run(); notifications wait in a queue in the order they fired.
// Names follow the Python model (watch_predecessor, wakeups_per_release) on purpose.

import { woken_per_release, type LabEvent } from "./wakeups.mjs";

export const PARENT = "/locks/resource";

export class LabError extends Error {
  hint: string | null;
  constructor(message: string, hint: string | null = null) {
    super(message);
    this.name = new.target.name;
    this.hint = hint;
  }
}
/** A strategy returned something the recipe cannot act on. */
export class StrategyError extends LabError {}
/** Two clients held the lock at the same time. */
export class MutualExclusionViolated extends LabError {}
/** Clients wait, nobody holds the lock, and no notification will ever come. */
export class Stuck extends LabError {}

/** What a client sees when it looks: the input of a strategy. */
export class View {
  constructor(readonly my_node: string, readonly children: readonly string[],
              readonly woken_by: string | null = null) {}
  /** The largest node below mine, or null when mine is the lowest. */
  get predecessor(): string | null {
    const index = this.children.indexOf(this.my_node);
    return index ? this.children[index - 1] : null;
  }
}

export type Strategy = (view: View) => string;

/** The recipe: the lowest holds; everyone else watches the node just below theirs. */
export function watch_predecessor(view: View): string {
  return view.predecessor === null ? "hold" : view.predecessor;
}
/** Safe but wasteful: every waiter watches the parent, so every change wakes them all. */
export function watch_parent(view: View): string {
  return view.predecessor === null ? "hold" : "parent";
}
/** Also a herd: every waiter watches the holder's node. */
export function watch_lowest(view: View): string {
  return view.predecessor === null ? "hold" : view.children[0];
}
/** Broken: after a wake-up it assumes the deleted node was the holder. */
export function skip_recheck(view: View): string {
  return view.woken_by !== null ? "hold" : watch_predecessor(view);
}

export const STRATEGIES: Record<string, Strategy> = {
  "predecessor": watch_predecessor, "parent": watch_parent,
  "lowest": watch_lowest, "no-recheck": skip_recheck,
};

export interface Release { client: string; node: string; how: string }
export interface Notification {
  client: string; watched: string; node: string; change: string; release: Release | null;
}

function sequenceOf(name: string): number {
  return parseInt(name.slice(-10), 10);
}

/** Python's repr of a string, so that both models word their errors alike. */
function repr(value: unknown): string {
  return typeof value === "string" ? `'${value}'` : String(value);
}

/** The part of ZooKeeper the recipe touches: one parent, its ephemeral sequential
 * children, sessions, and one-shot watches whose notifications wait in a queue. */
export class Coordinator {
  owner_of = new Map<string, string>();            // child name -> owning session
  cversion = 0;                                     // the parent's child version: creates and deletes
  creations = 0;                                    // children ever created: it names the next child
  node_watchers = new Map<string, string[]>();
  parent_watchers: string[] = [];
  pending: Notification[] = [];

  constructor(readonly parent: string = PARENT) {}

  children(): string[] {
    // sort by the sequence suffix, never by the whole name: prefixes may differ
    return [...this.owner_of.keys()].sort((a, b) => sequenceOf(a) - sequenceOf(b));
  }

  create_sequential(session: string, prefix = "lock-"): string {
    // as ZooKeeper 3.8: the suffix counts children ever created; deletes do not count
    const name = prefix + String(this.creations).padStart(10, "0");
    this.creations += 1;
    this.owner_of.set(name, session);
    this.changed(name, "created", null);
    return name;
  }

  watch_node(name: string, session: string): void {
    const watchers = this.node_watchers.get(name) ?? [];
    this.node_watchers.set(name, watchers);
    if (!watchers.includes(session)) watchers.push(session);   // one watch per client and path
  }

  watch_parent(session: string): void {
    if (!this.parent_watchers.includes(session)) this.parent_watchers.push(session);
  }

  delete(name: string, release: Release | null = null): void {
    this.owner_of.delete(name);
    const watchers = this.node_watchers.get(name) ?? [];
    this.node_watchers.delete(name);                           // one-shot: fired watches are gone
    for (const session of watchers) this.pending.push({ client: session, watched: name, node: name, change: "deleted", release });
    this.changed(name, "deleted", release);
  }

  /** Ephemeral nodes die with their session, and so do its watches. */
  close_session(session: string, release: Release | null = null): void {
    for (const watchers of this.node_watchers.values()) {
      const at = watchers.indexOf(session);
      if (at >= 0) watchers.splice(at, 1);
    }
    this.parent_watchers = this.parent_watchers.filter((name) => name !== session);
    const owned = [...this.owner_of].filter(([, owner]) => owner === session).map(([name]) => name);
    for (const name of owned) this.delete(name, release);
  }

  private changed(name: string, change: string, release: Release | null): void {
    this.cversion += 1;
    const watchers = this.parent_watchers;
    this.parent_watchers = [];
    for (const session of watchers) this.pending.push({ client: session, watched: "parent", node: name, change, release });
  }
}

export interface Client { name: string; strategy: Strategy; node: string; state: string; watching: string }

/** Clients taking one lock on a Coordinator; trace() tells what happened. */
export class Sandbox {
  coordinator = new Coordinator();
  strategy: Strategy;
  clients = new Map<string, Client>();
  releases: Release[] = [];
  violations: [number, string[]][] = [];     // (step, holders) whenever > 1
  steps = 0;
  events: LabEvent[] = [];                   // the recipe's events, one tick of time each
  private served: string[] = [];
  private lines: string[] = [];

  constructor(strategy: string | Strategy = "predecessor") {
    this.strategy = resolve(strategy);
  }

  // --- what a learner does ---
  /** Start `count` clients, one after another; each creates its node and looks once. */
  add_clients(count: number, strategy: string | Strategy | null = null): string[] {
    const chosen = strategy === null ? this.strategy : resolve(strategy);
    const added: string[] = [];
    for (let i = 0; i < count; i++) {
      const client: Client = { name: `c${this.clients.size + 1}`, strategy: chosen, node: "", state: "waiting", watching: "" };
      this.clients.set(client.name, client);
      client.node = this.coordinator.create_sequential(client.name);
      this.look(client, `${client.name} created ${client.node}`, null);
      added.push(client.name);
    }
    return added;
  }

  /** The holder deletes its node. Throws LabError if `name` does not hold the lock. */
  release(name: string): void {
    const client = this.client(name);
    if (client.state !== "holding") {
      throw new LabError(`${name} does not hold the lock (it is ${client.state})`,
                         `release a holder: ${this.holders().join(", ") || "nobody holds it now"}`);
    }
    const node = client.node;
    this.leave(client, "released");
    this.tick(`${name} released: deleted ${node}`);
  }

  /** The client's session dies: its ephemeral node and its watches vanish. */
  expire(name: string): void {
    const client = this.client(name);
    if (client.state === "released" || client.state === "expired") {
      throw new LabError(`${name} has already left (${client.state})`, "expire a live client");
    }
    const node = client.node, wasHolding = client.state === "holding";
    this.leave(client, "expired");
    this.tick(`${name}'s session expired: ${node} deleted` + (wasHolding ? " (it held the lock)" : ""));
  }

  /** Deliver one notification. Returns false when none is pending. */
  step(): boolean {
    const note = this.coordinator.pending.shift();
    if (note === undefined) return false;
    const client = this.clients.get(note.client)!;
    if (client.state !== "waiting") {
      this.tick(`notification for ${client.name} ignored: it is ${client.state}`);
      return true;
    }
    this.record("woke", client.name, { target: note.node });
    const what = note.watched !== "parent" ? `${client.watching} ${note.node} deleted`
      : `children of ${this.coordinator.parent} changed (${note.node} ${note.change})`;
    this.look(client, `${client.name} woke: ${what}`, note.node);
    return true;
  }

  /** Deliver notifications until none is pending; returns how many were delivered. */
  run(max_steps = 100_000): number {
    for (let delivered = 0; delivered <= max_steps; delivered++) {
      if (!this.step()) return delivered;
    }
    throw new LabError(`still delivering after ${max_steps} notifications`,
                       "a strategy that keeps re-watching something that keeps changing loops; check it");
  }

  /** Release whoever holds, run, repeat until every client has left; returns the order. */
  drain(): string[] {
    this.run();
    while (this.holders().length) {
      for (const name of this.holders()) this.release(name);
      this.run();
    }
    const waiting = this.waiting();
    if (waiting.length) {
      throw new Stuck(`${waiting.join(", ")} wait, nobody holds the lock and no notification is pending`,
                      "a waiter watches a node that will never be deleted; check what the strategy returns");
    }
    return this.order();
  }

  // --- what a learner reads ---
  holders(): string[] { return [...this.clients.values()].filter((c) => c.state === "holding").map((c) => c.name); }
  waiting(): string[] { return [...this.clients.values()].filter((c) => c.state === "waiting").map((c) => c.name); }
  /** Clients in the order they acquired the lock. */
  order(): string[] { return [...this.served]; }
  /** Clients in the order of their nodes' sequence numbers (the queue). */
  creation_order(): string[] {
    return [...this.clients.values()].sort((a, b) => sequenceOf(a.node) - sequenceOf(b.node)).map((c) => c.name);
  }
  /** For each time the holder's node went away, how many waiters that woke: one number per
   * hand-off (woken_per_release), and a 0 for a last release that handed the lock to nobody. */
  wakeups_per_release(): number[] {
    const counts = woken_per_release(this.events).map((names) => names.length);
    while (counts.length < this.releases.length) counts.push(0);
    return counts;
  }
  trace(): string[] { return [...this.lines]; }

  check_mutual_exclusion(): void {
    if (this.violations.length) {
      const [step, holders] = this.violations[0];
      throw new MutualExclusionViolated(`step ${step}: ${holders.join(" and ")} held the lock at the same time`,
        "read the trace lines around that step: who took the lock without being lowest?");
    }
  }

  // --- the recipe ---
  private look(client: Client, what: string, woken_by: string | null): void {
    const view = new View(client.node, this.coordinator.children(), woken_by);
    const decision = client.strategy(view);
    const holder = view.children[0];
    let result: string;
    if (decision === "hold") {
      client.state = "holding";
      this.served.push(client.name);
      this.record("acquired", client.name, { node: client.node });
      result = holder === client.node ? "lowest: holds the lock" : `took the lock although ${holder} is lower`;
    } else if (decision === "parent") {
      this.record("watch", client.name, { target: this.coordinator.parent, what: "parent" });
      this.coordinator.watch_parent(client.name);
      result = `waiting behind ${holder}; watching the parent ${this.coordinator.parent}`;
    } else if (view.children.includes(decision) && decision !== client.node) {
      this.record("watch", client.name, { target: decision, what: "predecessor" });   // one queue node
      this.coordinator.watch_node(decision, client.name);
      client.watching = decision === view.predecessor ? "predecessor" : "watched node";
      result = `waiting behind ${holder}; watching ${decision}`;
    } else {
      throw new StrategyError(`strategy ${client.strategy.name} returned ${repr(decision)} for ${client.name} ` +
                              `(${client.node}, children ${view.children.join(", ")})`,
                              "return 'hold', 'parent', or the name of another child to watch");
    }
    if (woken_by !== null && decision !== "hold") result = "re-checked; still " + result;
    this.tick(`${what}; ${result}`);
  }

  private leave(client: Client, how: string): void {
    const release = client.state === "holding" ? { client: client.name, node: client.node, how } : null;
    if (release) {
      this.releases.push(release);
      this.record(how === "released" ? "released" : "lost", client.name);
    }
    client.state = how;
    if (how === "expired") this.coordinator.close_session(client.name, release);
    else this.coordinator.delete(client.node, release);
  }

  private record(kind: string, client: string, detail: Record<string, string> = {}): void {
    this.events.push({ time: this.events.length, client, kind, detail });
  }

  private tick(line: string): void {
    this.steps += 1;
    this.lines.push(line);
    const holders = this.holders();
    if (holders.length > 1) {
      this.violations.push([this.steps, holders]);
      this.lines.push(`!! two holders at once: ${holders.join(", ")}`);
    }
  }

  private client(name: string): Client {
    const client = this.clients.get(name);
    if (client === undefined) {
      throw new LabError(`no client named ${repr(name)}`, `clients here: ${[...this.clients.keys()].join(", ") || "none yet"}`);
    }
    return client;
  }
}

/** What evaluate found: booleans to assert on, and plain words. */
export interface Verdict {
  strategy: string; mutual_exclusion: boolean; fifo: boolean; progress: boolean;
  most_wakeups_per_release: number; lines: string[]; ok: boolean;
}

/** Run a strategy through the recipe's hard cases: a full queue drained one release at a
 * time, and the waiter right behind the holder (c2) dying. */
export function evaluate(strategy: string | Strategy, clients = 10): Verdict {
  if (clients < 3) throw new LabError(`evaluate needs at least 3 clients to kill a middle waiter, got ${clients}`);
  const queue = new Sandbox(strategy), middle = new Sandbox(strategy);
  const lines: string[] = [];
  let progress = true;
  for (const [sim, dies] of [[queue, null], [middle, "c2"]] as [Sandbox, string | null][]) {
    sim.add_clients(clients);
    sim.run();
    if (dies) { sim.expire(dies); sim.run(); }
    try {
      sim.drain();
    } catch (error) {
      if (!(error instanceof Stuck)) throw error;
      progress = false;
      lines.push(`- deadlock: ${error.message}`);
    }
  }
  const violations = [...queue.violations, ...middle.violations];
  lines.push(!violations.length ? "- mutual exclusion: never two holders"
    : `- mutual exclusion BROKEN: ${violations[0][1].join(" and ")} held the lock at once`);
  const survivors = middle.creation_order().filter((name) => name !== "c2");
  const same = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i]);
  const fifo = same(queue.order(), queue.creation_order()) && same(middle.order(), survivors);
  lines.push(fifo ? "- FIFO: served in the order the nodes were created"
    : `- FIFO BROKEN: served ${queue.order().join(", ")} / ${middle.order().join(", ")}`);
  const herd = Math.max(0, ...queue.wakeups_per_release(), ...middle.wakeups_per_release());
  lines.push(`- wakeups: at most ${herd} per release` + (herd > 1 ? " (a herd: all wake, one can win)" : ""));
  const name = typeof strategy === "string" ? strategy : strategy.name;
  const mutual = !violations.length;
  return { strategy: name, mutual_exclusion: mutual, fifo, progress, most_wakeups_per_release: herd, lines,
           ok: mutual && fifo && progress && herd <= 1 };
}

function resolve(strategy: string | Strategy): Strategy {
  if (typeof strategy === "function") return strategy;
  if (!Object.prototype.hasOwnProperty.call(STRATEGIES, strategy)) {
    throw new StrategyError(`unknown strategy ${repr(strategy)}`, `pick one of ${Object.keys(STRATEGIES).join(", ")} or pass a function`);
  }
  return STRATEGIES[strategy];
}
