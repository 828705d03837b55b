// The sandbox as an anywidget front-end: every click runs the TypeScript model in the
// browser, so nothing waits for a kernel (and a static page with no kernel works too).
// The Python side (labkit/practice/sandbox_widget.py) only sets the watch style and the
// first clients, and reads back the wakeups per release.
import { Sandbox } from "./sandbox.mjs";

/** The part of anywidget's model this widget uses. */
interface WidgetModel {
  get(name: string): unknown;
  set(name: string, value: unknown): void;
  save_changes(): void;
}

function element<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text = ""): HTMLElementTagNameMap[K] {
  const made = document.createElement(tag);
  made.className = className;
  made.textContent = text;
  return made;
}

export function render({ model, el }: { model: WidgetModel; el: HTMLElement }): void {
  let strategy = String(model.get("strategy") || "predecessor");
  let sim = new Sandbox(strategy);
  let woken: string[] = [];
  let problem = "";   // a refused action (a LabError's message), shown instead of who woke
  const root = element("div", "sandbox-widget");
  const controls = element("div", "sandbox-controls");
  const add = element("button", "sandbox-add", "add a client");
  const release = element("button", "sandbox-release", "release the lock");
  const victim = element("select", "sandbox-victim");
  const kill = element("button", "sandbox-kill", "kill this session");
  const toggle = element("button", "sandbox-toggle");
  controls.append(add, release, victim, kill, toggle);
  const children = element("ol", "sandbox-children");
  const wokenLine = element("div", "sandbox-woken");
  const wakeups = element("div", "sandbox-wakeups");
  const trace = element("pre", "sandbox-trace");
  root.append(controls, children, wokenLine, wakeups, trace);
  el.append(root);

  // One learner action, then every notification it caused is delivered: who woke is read
  // from the events the action added, the same events the wakeup count comes from.
  function act(action: () => void): void {
    const before = sim.events.length;
    problem = "";
    try {
      action();
      sim.run();
    } catch (error) {
      problem = String((error as Error).message);
      return show();
    }
    woken = sim.events.slice(before).filter((event) => event.kind === "woke").map((event) => event.client);
    show();
  }

  function show(): void {
    toggle.textContent = `watch: ${strategy} (switch and start over)`;
    children.replaceChildren(...sim.coordinator.children().map((node) => {
      const owner = sim.coordinator.owner_of.get(node)!;
      const client = sim.clients.get(owner)!;
      const watching = client.state === "waiting" ? (strategy === "parent" ? " — watches the parent" : " — watches its predecessor") : "";
      return element("li", `sandbox-child sandbox-${client.state}`, `${node}  ${owner}: ${client.state}${watching}`);
    }));
    const live = [...sim.clients.values()].filter((c) => c.state === "holding" || c.state === "waiting");
    victim.replaceChildren(...live.map((c) => { const option = element("option", "", c.name); option.value = c.name; return option; }));
    release.disabled = sim.holders().length === 0;
    kill.disabled = live.length === 0;
    wokenLine.textContent = problem ||
      `woken by the last action: ${woken.length}` + (woken.length ? ` (${woken.join(", ")})` : "");
    const counts = sim.wakeups_per_release();
    wakeups.textContent = `wakeups per release: ${counts.length ? counts.join(", ") : "no release yet"}`;
    trace.textContent = sim.trace().slice(-12).join("\n");
    model.set("wakeups", counts);
    model.save_changes();
  }

  function start(): void {
    sim = new Sandbox(strategy);
    woken = [];
    act(() => sim.add_clients(Number(model.get("clients") ?? 3)));
  }

  add.addEventListener("click", () => act(() => sim.add_clients(1)));
  release.addEventListener("click", () => act(() => sim.holders().forEach((name) => sim.release(name))));
  kill.addEventListener("click", () => act(() => sim.expire(victim.value)));
  toggle.addEventListener("click", () => {
    strategy = strategy === "predecessor" ? "parent" : "predecessor";
    model.set("strategy", strategy);
    start();
  });
  start();
}

export default { render };
