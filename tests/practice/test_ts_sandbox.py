"""The TypeScript sandbox against the Python one: Node runs the compiled JavaScript that ships
in labkit/practice/web/ on the same scenarios as labkit/practice/sandbox.py, and every answer
must agree: wakeups per release under predecessor and parent watching, node names after
deletes, the re-check after a middle waiter dies, session expiry releasing, the trace, the
errors, and evaluate()'s verdicts. A second test compiles the TypeScript afresh and fails if
the committed JavaScript differs from it (scripts/maint/sandbox_js.sh rebuilds it).

Needs Node and npm; skips with the reason when they are absent (a learner needs neither).
"""
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.errors import LabError
from labkit.practice.sandbox import STRATEGIES, Sandbox, evaluate
from labkit.practice.sandbox_widget import WEB

pytestmark = pytest.mark.no_servers
REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "web" / "sandbox"
NODE, NPM = shutil.which("node"), shutil.which("npm")
NPM_DEADLINE = 300.0   # npm ci, once per checkout
TSC_DEADLINE = 420.0   # tsc -p web/sandbox
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed: the cross-check runs the "
                                "compiled JavaScript in Node (apt-get install -y nodejs)")

# The lesson's cases, by hand; then seeded random ones. Each op is [name, *arguments].
NAMED = {
    "herd: ten waiters watch the parent": ("parent", [["add", 11], ["run"], ["release", "c1"], ["run"]]),
    "recipe: ten waiters watch their predecessor": ("predecessor", [["add", 11], ["run"], ["release", "c1"], ["run"]]),
    "parent watch drained": ("parent", [["add", 10], ["drain"]]),
    "predecessor watch drained": ("predecessor", [["add", 10], ["drain"]]),
    "sequence names after deletes": ("predecessor", [["add", 2], ["release", "c1"], ["run"], ["add", 1],
                                                     ["expire", "c2"], ["add", 2], ["run"]]),
    "a middle waiter dies: re-check": ("predecessor", [["add", 4], ["expire", "c2"], ["run"], ["drain"]]),
    "a middle waiter dies: no re-check": ("no-recheck", [["add", 4], ["expire", "c2"], ["run"], ["drain"]]),
    "the holder's session expires": ("predecessor", [["add", 3], ["run"], ["expire", "c1"], ["step"], ["run"]]),
    "the holder's session expires, parent watch": ("parent", [["add", 5], ["run"], ["expire", "c1"], ["run"],
                                                              ["expire", "c3"], ["run"], ["drain"]]),
    "bad input": ("lowest", [["release", "c9"], ["add", 2], ["release", "c2"], ["expire", "c1"],
                             ["expire", "c1"], ["run"], ["drain"]]),
}


def seeded(seed: int, length: int = 30) -> tuple[str, list]:
    rng = random.Random(seed)
    strategy = sorted(STRATEGIES)[seed % len(STRATEGIES)]
    ops: list = [["add", rng.randint(1, 4)]]
    for _ in range(length):
        clients = [f"c{n}" for n in range(1, 9)]
        kind = rng.choice(["add", "release", "release", "expire", "step", "step", "run", "drain"])
        ops.append([kind, rng.randint(1, 3)] if kind == "add" else
                   [kind, rng.choice(clients)] if kind in ("release", "expire") else [kind])
    return strategy, ops


SCENARIOS = dict(NAMED, **{f"seed {seed}": seeded(seed) for seed in range(40)})


def run_in_python(strategy: str, ops: list) -> dict:
    sim, results = Sandbox(strategy), []
    for name, *arguments in ops:
        try:
            results.append({"add": sim.add_clients, "release": sim.release, "expire": sim.expire,
                            "step": sim.step, "run": sim.run, "drain": sim.drain}[name](*arguments))
        except LabError as error:
            results.append({"error": [type(error).__name__, error.message, error.hint]})
    return {"results": results, "children": sim.coordinator.children(), "cversion": sim.coordinator.cversion,
            "nodes": {name: client.node for name, client in sim.clients.items()},
            "holders": sim.holders(), "waiting": sim.waiting(), "order": sim.order(),
            "creation_order": sim.creation_order(), "wakeups_per_release": sim.wakeups_per_release(),
            "violations": [[step, list(holders)] for step, holders in sim.violations], "trace": sim.trace()}


# The same driver in JavaScript: one scenario per line of the JSON list on stdin.
NODE_DRIVER = """
const { Sandbox, evaluate, STRATEGIES } = await import(process.argv[1]);
let text = "";
for await (const chunk of process.stdin) text += chunk;
const scenarios = JSON.parse(text);
function run([strategy, ops]) {
  const sim = new Sandbox(strategy), results = [];
  for (const [name, ...args] of ops) {
    try {
      const act = { add: (n) => sim.add_clients(n), release: (c) => sim.release(c), expire: (c) => sim.expire(c),
                    step: () => sim.step(), run: () => sim.run(), drain: () => sim.drain() }[name];
      const value = act(...args);
      results.push(value === undefined ? null : value);
    } catch (error) {
      if (error.hint === undefined) throw error;
      results.push({ error: [error.name, error.message, error.hint] });
    }
  }
  return { results, children: sim.coordinator.children(), cversion: sim.coordinator.cversion,
           nodes: Object.fromEntries([...sim.clients].map(([name, client]) => [name, client.node])),
           holders: sim.holders(), waiting: sim.waiting(), order: sim.order(), creation_order: sim.creation_order(),
           wakeups_per_release: sim.wakeups_per_release(), violations: sim.violations, trace: sim.trace() };
}
const verdicts = Object.fromEntries(Object.keys(STRATEGIES).map((name) => {
  const { ok, ...verdict } = evaluate(name);
  return [name, { ...verdict, ok }];
}));
process.stdout.write(JSON.stringify({ scenarios: scenarios.map(run), verdicts }));
"""


def run_in_node(scenarios: list) -> dict:
    reply = subprocess.run([NODE, "--input-type=module", "-e", NODE_DRIVER, (WEB / "sandbox.mjs").as_uri()],
                           input=json.dumps(scenarios), capture_output=True, text=True, timeout=60)
    assert reply.returncode == 0, f"node failed:\n{reply.stderr[-3000:]}"
    return json.loads(reply.stdout)


@pytest.fixture(scope="module")
def node_answers():
    return run_in_node(list(SCENARIOS.values()))


@needs_node
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_typescript_and_python_models_agree(name, node_answers):
    expected = run_in_python(*SCENARIOS[name])
    got = node_answers["scenarios"][list(SCENARIOS).index(name)]
    assert got == expected


@needs_node
def test_the_scenarios_cover_what_the_lesson_claims(node_answers):
    """The agreement above means something only if the cases show the lesson's numbers."""
    answers = dict(zip(SCENARIOS, node_answers["scenarios"]))
    assert answers["herd: ten waiters watch the parent"]["wakeups_per_release"] == [10]
    assert answers["recipe: ten waiters watch their predecessor"]["wakeups_per_release"] == [1]
    assert answers["parent watch drained"]["wakeups_per_release"] == list(range(9, -1, -1))
    assert answers["sequence names after deletes"]["nodes"]["c3"] == "lock-0000000002"
    assert answers["sequence names after deletes"]["children"] == ["lock-0000000002", "lock-0000000003",
                                                                    "lock-0000000004"]
    recheck = answers["a middle waiter dies: re-check"]
    assert recheck["results"][2] == 1 and recheck["violations"] == []
    assert recheck["trace"][5].endswith("re-checked; still waiting behind lock-0000000000; watching lock-0000000000")
    assert answers["a middle waiter dies: no re-check"]["violations"][0][1] == ["c1", "c3"]
    assert answers["the holder's session expires"]["holders"] == ["c2"]
    errors = [result["error"][0] for answers_of in answers.values() for result in answers_of["results"]
              if isinstance(result, dict) and "error" in result]
    assert {"LabError"} <= set(errors), "the seeded cases reach the error paths too"


@needs_node
def test_evaluate_gives_the_same_verdicts(node_answers):
    for name in STRATEGIES:
        verdict = evaluate(name)
        assert node_answers["verdicts"][name] == {
            "strategy": verdict.strategy, "mutual_exclusion": verdict.mutual_exclusion, "fifo": verdict.fifo,
            "progress": verdict.progress, "most_wakeups_per_release": verdict.most_wakeups_per_release,
            "lines": verdict.lines, "ok": verdict.ok}


@pytest.mark.skipif(NODE is None or NPM is None, reason="node and npm are not installed: the committed "
                    "JavaScript cannot be compiled afresh here (apt-get install -y nodejs npm)")
@pytest.mark.timeout(NPM_DEADLINE + TSC_DEADLINE + 60)   # the steps' own deadlines say what was slow
def test_committed_javascript_is_the_typescript_compiled(tmp_path):
    """npm ci installs the locked typescript (once, into web/sandbox/node_modules), tsc
    compiles into a scratch folder, and every file must equal the one committed."""
    tsc = SOURCE / "node_modules" / ".bin" / "tsc"
    if not tsc.exists():
        installed = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=SOURCE, capture_output=True,
                                   text=True, timeout=NPM_DEADLINE)
        assert installed.returncode == 0, f"npm ci failed in {SOURCE}:\n{installed.stderr[-2000:]}"
    try:
        built = subprocess.run([str(tsc), "-p", str(SOURCE), "--outDir", str(tmp_path)], capture_output=True,
                               text=True, timeout=TSC_DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"tsc did not finish in {TSC_DEADLINE:.0f} s (8 s at load 14 on 2 cores; "
                    f"2 minutes were not enough at load 20): is the machine swapping?")
    assert built.returncode == 0, f"tsc failed:\n{built.stdout}{built.stderr}"
    fresh = {path.name: path.read_text() for path in tmp_path.glob("*.mjs")}
    committed = {path.name: path.read_text() for path in WEB.glob("*.mjs")}
    assert fresh.keys() == committed.keys(), "labkit/practice/web/ has other files than tsc writes"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{', '.join(stale)} differ from the TypeScript: run scripts/maint/sandbox_js.sh and commit"
