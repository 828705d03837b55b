// Lock maps: a map drawn from a real run (labkit/widgets/maps.py), as SVG, in the browser.
// The model gives `lock_map` (LockMap.as_state(): nodes, edges with their recorded steps, the
// replay order), `colours` (from labkit.vocabulary) and `pace` (ms per replayed step). Selecting
// a node or an edge shows its text; "replay" lights the edges in the order the run recorded
// them, and sends that order back as `lit`. Plain JavaScript, no build step, no kernel round trip.

const SVG = "http://www.w3.org/2000/svg";
const STYLE = `
.labkit-map { font-family: sans-serif; font-size: 13px; max-width: min(72em, 100%); color: #222; }
.labkit-map-frame { max-width: 100%; overflow-x: auto; }
.labkit-map-title { font-weight: bold; margin: 4px 0; }
.labkit-map svg { display: block; background: #fcfcfc; border: 1px solid #ddd; border-radius: 6px; }
.labkit-map-node, .labkit-map-edge { cursor: pointer; }
.labkit-map-node:focus, .labkit-map-edge:focus { outline: none; }
.labkit-map-node rect, .labkit-map-node polygon { fill: #fff; stroke-width: 1.5; }
.labkit-map-edge .labkit-map-hit { stroke: transparent; stroke-width: 14; fill: none; }
.labkit-map-edge .labkit-map-line { fill: none; stroke-width: 1.6; }
.labkit-map-edge text, .labkit-map-node text { pointer-events: none; }
.labkit-map-edge .labkit-map-label-back { fill: #fcfcfc; opacity: 0.9; }
.labkit-map-lit .labkit-map-line { stroke-width: 3.2; }
.labkit-map-current .labkit-map-line { stroke-width: 4.5; }
.labkit-map-selected .labkit-map-label-back, .labkit-map-selected rect, .labkit-map-selected polygon { stroke-width: 2.5; }
.labkit-map-lit .labkit-map-label-back { opacity: 1; }
.labkit-map-controls { margin: 6px 0; }
.labkit-map-controls button { padding: 2px 10px; margin-right: 8px; }
.labkit-map-details { border: 1px solid #ddd; border-radius: 6px; padding: 6px 10px; min-height: 3em;
  background: #fafafa; line-height: 1.45; }
.labkit-map-details dt { font-weight: bold; float: left; clear: left; width: 7.5em; }
.labkit-map-details dd { margin-left: 8em; }`;

function addStyle() {
  if (document.getElementById("labkit-map-style")) return;
  const style = document.createElement("style");
  style.id = "labkit-map-style";
  style.textContent = STYLE;
  document.head.appendChild(style);
}

function svg(name, attributes = {}, parent = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

function wrap(text, width) {
  const lines = [];
  let line = "";
  for (const word of String(text).split(/\s+/)) {
    if (line && (line + " " + word).length > width) { lines.push(line); line = word; }
    else line = line ? line + " " + word : word;
  }
  if (line) lines.push(line);
  return lines;
}

function textBlock(parent, lines, x, y, attributes = {}) {
  const text = svg("text", Object.assign({ x, y, "text-anchor": "middle" }, attributes), parent);
  lines.forEach((line, index) => {
    const span = svg("tspan", { x, dy: index === 0 ? `${-(lines.length - 1) * 0.6}em` : "1.2em" }, text);
    span.textContent = line;
  });
  return text;
}

const seconds = (at) => `+${Number(at).toFixed(3)} s`;

function markers(root, colours) {
  const defs = svg("defs", {}, root);
  for (const [name, colour] of Object.entries({ line: colours.line, failure: colours.failure, lit: colours.lit })) {
    const marker = svg("marker", { id: `labkit-arrow-${name}`, viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 10, markerHeight: 10, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, defs);
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: colour }, marker);
  }
}

// Where the line from the centre of a box towards (tx, ty) leaves the box.
function border(box, tx, ty) {
  const dx = tx - box.x, dy = ty - box.y;
  if (dx === 0 && dy === 0) return [box.x, box.y];
  const scale = Math.min(Math.abs(box.w / 2 / (dx || 1e-9)), Math.abs(box.h / 2 / (dy || 1e-9)));
  return [box.x + dx * Math.min(scale, 1), box.y + dy * Math.min(scale, 1)];
}

const overlaps = (a, b) => Math.abs(a.x - b.x) * 2 < a.w + b.w && Math.abs(a.y - b.y) * 2 < a.h + b.h;
const onCurve = (t, sx, sy, cx, cy, ex, ey) => [
  (1 - t) * (1 - t) * sx + 2 * (1 - t) * t * cx + t * t * ex, (1 - t) * (1 - t) * sy + 2 * (1 - t) * t * cy + t * t * ey];

function drawGraph(root, state, colours) {
  const width = 150, height = 50;
  const columnWidth = 300, rowHeight = state.kind === "flow" ? 125 : 210;
  const rows = Math.max(...state.nodes.map((node) => node.row)) + 1;
  const columns = Math.max(...state.nodes.map((node) => node.column)) + 1;
  const fullWidth = columns * columnWidth + 20, fullHeight = rows * rowHeight + 10;
  root.setAttribute("viewBox", `0 0 ${fullWidth} ${fullHeight}`);
  root.setAttribute("width", fullWidth);
  root.setAttribute("style", "max-width: 100%; height: auto");
  const boxes = {};
  for (const node of state.nodes) {
    boxes[node.id] = { x: 10 + columnWidth / 2 + node.column * columnWidth,
      y: 5 + rowHeight / 2 + node.row * rowHeight, w: width, h: height };
  }
  // edges between the same two nodes bend apart
  const pairs = {};
  for (const edge of state.edges) {
    const key = [edge.source, edge.target].sort().join("|");
    (pairs[key] = pairs[key] || []).push(edge.id);
  }
  const edgeLayer = svg("g", {}, root), nodeLayer = svg("g", {}, root), labelLayer = svg("g", {}, root);
  const taken = Object.values(boxes).map((box) => ({ x: box.x, y: box.y, w: box.w + 8, h: box.h + 8 }));
  const items = {};
  for (const edge of state.edges) {
    const from = boxes[edge.source], to = boxes[edge.target];
    const siblings = pairs[[edge.source, edge.target].sort().join("|")];
    let bend = (siblings.indexOf(edge.id) - (siblings.length - 1) / 2) * 150;
    if (edge.source > edge.target) bend = -bend;       // both directions of a pair keep their sides
    const mx = (from.x + to.x) / 2, my = (from.y + to.y) / 2;
    const length = Math.hypot(to.x - from.x, to.y - from.y) || 1;
    const cx = mx - ((to.y - from.y) / length) * bend, cy = my + ((to.x - from.x) / length) * bend;
    const [sx, sy] = border(from, cx, cy), [ex, ey] = border(to, cx, cy);
    const attributes = { class: "labkit-map-edge", "data-id": edge.id, tabindex: 0, role: "button" };
    const group = svg("g", attributes, edgeLayer);
    const d = `M ${sx} ${sy} Q ${cx} ${cy} ${ex} ${ey}`;
    svg("path", { d, class: "labkit-map-hit" }, group);
    const kind = edge.failure ? "failure" : "line";
    const line = svg("path", { d, class: "labkit-map-line", stroke: colours[kind],
      "marker-end": `url(#labkit-arrow-${kind})`, "stroke-dasharray": edge.failure ? "6 4" : "none" }, group);
    // the label goes on the curve, where it covers no node and no other label
    const numbers = edge.steps.map((step) => step.number).join(", ");
    const lines = wrap(edge.label, 18).concat(numbers ? [`step ${numbers}`] : []);
    const labelWidth = Math.max(...lines.map((text) => text.length)) * 6.2 + 10, labelHeight = lines.length * 13 + 4;
    const spots = [0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8].map((t) => {
      const [x, y] = onCurve(t, sx, sy, cx, cy, ex, ey);
      return { x, y, w: labelWidth, h: labelHeight };
    });
    const spot = spots.find((place) => !taken.some((other) => overlaps(place, other))) || spots[0];
    taken.push(spot);
    const label = svg("g", attributes, labelLayer);
    svg("rect", { class: "labkit-map-label-back", x: spot.x - labelWidth / 2, y: spot.y - labelHeight / 2,
      width: labelWidth, height: labelHeight, rx: 3 }, label);
    textBlock(label, lines, spot.x, spot.y + 4, { fill: colours.text, "font-size": "11px" });
    items[edge.id] = { group, label, line, kind };
  }
  for (const node of state.nodes) {
    const box = boxes[node.id];
    const group = svg("g", { class: "labkit-map-node", "data-id": node.id, tabindex: 0, role: "button" }, nodeLayer);
    const stroke = node.shape === "failure" ? colours.failure : colours.text;
    if (node.shape === "decision") {
      svg("polygon", { points: `${box.x},${box.y - box.h / 2 - 8} ${box.x + box.w / 2 + 6},${box.y} ${box.x},${box.y + box.h / 2 + 8} ${box.x - box.w / 2 - 6},${box.y}`, stroke }, group);
    } else {
      svg("rect", { x: box.x - box.w / 2, y: box.y - box.h / 2, width: box.w, height: box.h,
        rx: node.shape === "box" ? 4 : 16, stroke }, group);
    }
    textBlock(group, wrap(node.label, 20), box.x, box.y + 4, { fill: colours.text });
    items[node.id] = { group };
  }
  return items;
}

function drawSequence(root, state, colours) {
  const gap = 250, top = 50, rowHeight = 42;
  const columns = {};
  state.nodes.forEach((node, index) => { columns[node.id] = 150 + index * gap; });
  const bottom = top + 30 + state.replay.length * rowHeight;
  root.setAttribute("viewBox", `0 0 ${150 + state.nodes.length * gap} ${bottom + 10}`);
  root.setAttribute("width", 150 + state.nodes.length * gap);
  const items = {};
  for (const node of state.nodes) {
    const x = columns[node.id];
    svg("line", { x1: x, y1: top, x2: x, y2: bottom, stroke: colours.line, "stroke-dasharray": "4 4" }, root);
    const group = svg("g", { class: "labkit-map-node", "data-id": node.id, tabindex: 0, role: "button" }, root);
    svg("rect", { x: x - 75, y: top - 36, width: 150, height: 30, rx: 4, stroke: colours.text }, group);
    textBlock(group, [node.label], x, top - 16, { fill: colours.text });
    items[node.id] = { group };
  }
  const edges = Object.fromEntries(state.edges.map((edge) => [edge.id, edge]));
  state.replay.forEach((entry, row) => {
    const edge = edges[entry.edge];
    const y = top + 30 + row * rowHeight, x1 = columns[edge.source], x2 = columns[edge.target];
    const group = svg("g", { class: "labkit-map-edge", "data-id": edge.id, tabindex: 0, role: "button" }, root);
    const d = `M ${x1} ${y} L ${x2 + (x2 > x1 ? -3 : 3)} ${y}`;
    svg("rect", { class: "labkit-map-label-back", x: Math.min(x1, x2) + 4, y: y - 21, width: Math.abs(x2 - x1) - 8,
      height: 18, rx: 3 }, group);
    svg("path", { d, class: "labkit-map-hit" }, group);
    const kind = edge.failure ? "failure" : "line";
    const line = svg("path", { d, class: "labkit-map-line", stroke: colours[kind],
      "marker-end": `url(#labkit-arrow-${kind})`, "stroke-dasharray": edge.failure ? "6 4" : "none" }, group);
    textBlock(group, [`${entry.number}. ${edge.label}`], (x1 + x2) / 2, y - 6, { fill: colours.text, "font-size": "12px" });
    textBlock(group, [seconds(entry.at)], 50, y + 4, { fill: colours.line, "font-size": "11px" });
    items[edge.id] = { group, line, kind };
  });
  return items;
}

function details(box, state, kind, id) {
  box.textContent = "";
  const title = document.createElement("div");
  title.className = "labkit-map-title";
  const list = document.createElement("dl");
  const add = (term, text) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = term; dd.textContent = text; list.append(dt, dd);
    return dd;
  };
  if (kind === "node") {
    const node = state.nodes.find((item) => item.id === id);
    title.textContent = node.label;
    add("why it exists", node.why);
  } else {
    const edge = state.edges.find((item) => item.id === id);
    title.textContent = edge.label;
    add("protocol", edge.protocol);
    add("direction", edge.direction);
    add("effect", edge.effect);
    add("consequence", edge.consequence);
    add("in this run", edge.steps.length
      ? edge.steps.map((step) => `step ${step.number} (${step.client}) at ${seconds(step.at)}`).join("; ")
      : "not in this run").className = "labkit-map-run";
  }
  box.dataset.selected = `${kind}:${id}`;
  box.append(title, list);
}

function render({ model, el }) {
  addStyle();
  const state = model.get("lock_map");
  const colours = model.get("colours") || {};
  const root = document.createElement("div");
  root.className = "labkit-map";
  root.dataset.kind = state.kind;
  const heading = document.createElement("div");
  heading.className = "labkit-map-title";
  heading.textContent = state.title;
  const picture = svg("svg", { role: "img", "aria-label": state.title });
  markers(picture, colours);
  const items = state.kind === "sequence" ? drawSequence(picture, state, colours) : drawGraph(picture, state, colours);
  const controls = document.createElement("div");
  controls.className = "labkit-map-controls";
  const replay = document.createElement("button");
  replay.className = "labkit-map-replay";
  replay.textContent = "▶ replay the run";
  const status = document.createElement("span");
  status.className = "labkit-map-status";
  status.textContent = `${state.replay.length} recorded steps; select a node or an edge to read about it`;
  controls.append(replay, status);
  const box = document.createElement("div");
  box.className = "labkit-map-details";
  box.textContent = "Select a node or an edge.";
  // a map wider than its column (a queue of many clients) scrolls inside its own frame
  const frame = document.createElement("div");
  frame.className = "labkit-map-frame";
  frame.append(picture);
  root.append(heading, frame, controls, box);
  el.appendChild(root);

  const select = (kind, id) => {
    root.querySelectorAll(".labkit-map-selected").forEach((node) => node.classList.remove("labkit-map-selected"));
    for (const group of [items[id].group, items[id].label].filter(Boolean)) group.classList.add("labkit-map-selected");
    details(box, state, kind, id);
  };
  for (const [id, item] of Object.entries(items)) {
    const kind = item.line ? "edge" : "node";
    for (const group of [item.group, item.label].filter(Boolean)) {
      group.addEventListener("click", () => select(kind, id));
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); select(kind, id); }
      });
    }
  }

  let timer = null;
  const light = (id, on, current) => {
    const item = items[id];
    for (const group of [item.group, item.label].filter(Boolean)) {
      group.classList.toggle("labkit-map-lit", on);
      group.classList.toggle("labkit-map-current", current);
    }
    item.line.setAttribute("stroke", on ? colours.lit : colours[item.kind]);
    item.line.setAttribute("marker-end", `url(#labkit-arrow-${on ? "lit" : item.kind})`);
  };
  replay.addEventListener("click", () => {
    if (timer) clearTimeout(timer);
    for (const [id, item] of Object.entries(items)) if (item.line) light(id, false, false);
    const order = [];
    root.dataset.lit = "";
    root.dataset.replayed = "running";
    const pace = Number(model.get("pace")) || 500;
    const next = (index) => {
      if (index > 0) light(state.replay[index - 1].edge, true, false);
      if (index >= state.replay.length) {
        status.textContent = `replayed ${order.length} steps in the order the run recorded them`;
        root.dataset.replayed = "done";
        return;
      }
      const entry = state.replay[index];
      light(entry.edge, true, true);
      order.push(entry.edge);
      root.dataset.lit = order.join(" ");
      const edge = state.edges.find((item) => item.id === entry.edge);
      status.textContent = `step ${entry.number} at ${seconds(entry.at)}: ${edge.label}`;
      model.set("lit", order.slice());
      model.save_changes();
      timer = setTimeout(() => next(index + 1), pace);
    };
    next(0);
  });
  return () => { if (timer) clearTimeout(timer); };
}

export default { render };
