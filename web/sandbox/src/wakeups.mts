// Wakeups per release for the sandbox's events: labkit.record.history.woken_per_release,
// the one definition of a wakeup in labkit, for a model whose events are stamped one tick
// apart and whose watches are ZooKeeper's (no clock slack). The sandbox counts with it as
// the Python model counts with the Python one.

/** One recorded step of the recipe, as labkit.record.events.Event. */
export interface LabEvent { time: number; client: string; kind: string; detail: Record<string, string> }

interface Hold { client: string; start: number; end: number | null; reason: string }

/** labkit.record.history.holds_of for the model's events: each client's acquired to
 * released/lost, ordered by start; a second acquire without an end is "superseded". */
function holds_of(events: LabEvent[]): Hold[] {
  const holds: Hold[] = [];
  const open = new Map<string, LabEvent>();
  for (const event of events) {
    if (!["acquired", "released", "lost"].includes(event.kind)) continue;
    const started = open.get(event.client);
    open.delete(event.client);
    if (event.kind === "acquired") {
      if (started) holds.push({ client: started.client, start: started.time, end: event.time, reason: "superseded" });
      open.set(event.client, event);
    } else if (started) {
      holds.push({ client: started.client, start: started.time, end: event.time, reason: event.kind });
    }
  }
  for (const started of open.values()) holds.push({ client: started.client, start: started.time, end: null, reason: "open" });
  return holds.sort((a, b) => a.start - b.start);
}

/** labkit.record.history.woken_per_release, the one definition of a wakeup, for the
 * model's events (ZooKeeper's watches only: no clock slack). For each hand-off, the
 * distinct waiters it woke: a predecessor watch is woken by the hand-off of the hold
 * whose node it watched (a waiter ahead that died hands nothing off); a parent watch by
 * the first release after the waiter armed it. */
export function woken_per_release(events: LabEvent[]): string[][] {
  const holds = holds_of(events).filter((hold) => hold.reason !== "superseded");
  if (holds.length < 2) return [];
  const handoffs = holds.slice(0, -1);
  const starts = handoffs.map((hold) => hold.start);
  const releasedBy = handoffs.map((hold, i) => Math.min(hold.end ?? Infinity, holds[i + 1].start));
  const nodeOf = new Map<string, string>();
  for (const event of events) {
    if (event.kind === "acquired" && event.detail.node) nodeOf.set(`${event.client}@${event.time}`, event.detail.node);
  }
  const holdOfNode = new Map<string, number>();
  handoffs.forEach((hold, i) => {
    const node = nodeOf.get(`${hold.client}@${hold.start}`);
    if (node !== undefined) holdOfNode.set(node, i);
  });
  const woken: string[][] = handoffs.map(() => []);
  const armed = new Map<string, LabEvent>();
  const nextHandoff = new Map<string, number>();
  for (const event of events) {
    if (event.kind === "watch") { armed.set(event.client, event); continue; }
    if (event.kind !== "woke") continue;
    const arm = armed.get(event.client);
    const earliest = nextHandoff.get(event.client) ?? 0;
    const began = starts.filter((start) => start < event.time).length;   // hand-offs begun by the wake
    let index: number;
    if (arm === undefined) {
      index = began - 1;
    } else if (arm.detail.what === "predecessor") {
      const target = event.detail.target || arm.detail.target;
      index = target ? holdOfNode.get(target.replace(/\/+$/, "").split("/").pop()!) ?? -1 : -1;
    } else {
      index = -1;
      for (let i = earliest; i < began; i++) if (releasedBy[i] > arm.time) { index = i; break; }
    }
    if (index < earliest || index >= began) continue;
    nextHandoff.set(event.client, index + 1);
    if (handoffs[index].client !== event.client && !woken[index].includes(event.client)) woken[index].push(event.client);
  }
  return woken;
}
