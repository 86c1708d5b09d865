// The service's AG-UI endpoint (/ag-ui/{assistant_id}) through the official client,
// @ag-ui/client's HttpAgent, which validates every event against the AG-UI 1.0 schemas and
// its ordering rules (a bad event makes runAgent reject). Run by tests/clients/agent_protocols.rs
// against a live server with the research graph on the provider fakes (env DR_URL, DR_KEY_A,
// DR_KEY_B: two owners). Exits non-zero on the first failure.
import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";
import assert from "node:assert/strict";

const URL = process.env.DR_URL.replace(/\/$/, "");
const KEY_A = process.env.DR_KEY_A;
const KEY_B = process.env.DR_KEY_B;

function agent(key, assistant = "deep_research", threadId = randomUUID()) {
  return new HttpAgent({ url: `${URL}/ag-ui/${assistant}`, headers: { "x-api-key": key }, threadId });
}

// Runs the agent on one more user message (or a resume) and returns every event it saw.
async function turn(a, text, params = {}) {
  if (text) a.addMessage({ id: randomUUID(), role: "user", content: text });
  const events = [];
  const outcome = await a.runAgent({ runId: randomUUID(), ...params }, { onEvent: ({ event }) => events.push(event) });
  return { events, ...outcome };
}

const types = (events) => events.map((e) => e.type);
const lastText = (a) => a.messages.filter((m) => m.role === "assistant").at(-1)?.content ?? "";

async function api(key, path) {
  const response = await fetch(URL + path, { headers: { "x-api-key": key } });
  return response.json();
}

const tests = {
  async "the report arrives with steps, researchers, state and cost"() {
    const a = agent(KEY_A);
    const { events, result } = await turn(a, "Compare solar and wind for a small farm");
    const seen = types(events);
    assert.equal(seen[0], "RUN_STARTED");
    assert.equal(seen.at(-1), "RUN_FINISHED");
    for (const t of ["STEP_STARTED", "STEP_FINISHED", "SUBAGENT_STARTED", "ACTIVITY_SNAPSHOT",
                     "SUBAGENT_FINISHED", "STATE_SNAPSHOT", "STATE_DELTA", "CUSTOM",
                     "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"]) {
      assert.ok(seen.includes(t), `no ${t} in ${seen.join(" ")}`);
    }
    const steps = events.filter((e) => e.type === "STEP_FINISHED").map((e) => e.stepName);
    assert.ok(steps.includes("write_research_brief") && steps.includes("final_report_generation"), steps.join());
    assert.ok(events.some((e) => e.type === "CUSTOM" && e.name === "usage"), "no usage");
    const report = lastText(a);
    assert.ok(report.startsWith("# Report") && report.includes("### Sources"), report);
    assert.ok(!report.includes("invented.example"));
    assert.equal(result.status, "completed");
    // The state a UI binds to: the brief and the sources, not the raw conversations.
    assert.ok(a.state.research_brief, JSON.stringify(a.state).slice(0, 300));
    assert.ok(!("messages" in a.state) && Array.isArray(a.state.sources));
    // The run is a run of the API, on the caller's thread.
    const runs = await api(KEY_A, `/threads/${a.threadId}/runs`);
    assert.equal(runs.length, 1);
    assert.equal(runs[0].status, "success");
  },

  async "a clarifying question, then the answer on the same thread"() {
    const a = agent(KEY_A);
    await turn(a, "Tell me about batteries, it is vague");
    assert.ok(lastText(a).includes("Which aspect do you mean?"), lastText(a));
    const { result, events } = await turn(a, "Their costs, please.");
    assert.equal(result.status, "completed");
    // The state the client sent back is the one streamed to it: nothing to report as unused.
    assert.ok(!events.some((e) => e.name === "unused_input"), JSON.stringify(events.find((e) => e.name === "unused_input")));
    assert.ok(lastText(a).startsWith("# Report"), lastText(a));
    const runs = await api(KEY_A, `/threads/${a.threadId}/runs`);
    assert.equal(runs.length, 2);
  },

  async "a plan to review is an interrupt; resume approves it"() {
    const a = agent(KEY_A);
    const props = { forwardedProps: { configurable: { review_plan: true } } };
    const first = await turn(a, "Compare heat pumps and gas boilers", props);
    const finished = first.events.at(-1);
    assert.equal(finished.outcome?.type, "interrupt", JSON.stringify(finished));
    assert.equal(a.pendingInterrupts.length, 1);
    const [pending] = a.pendingInterrupts;
    assert.equal(pending.reason, "plan_review");
    assert.ok(pending.message.includes("Planned topics"), pending.message);
    // The client itself refuses to go on without answering it.
    await assert.rejects(turn(a, "go on"), /pending interrupt/);
    const resume = [{ interruptId: pending.id, status: "resolved", payload: { action: "approve" } }];
    const { result } = await turn(a, null, { ...props, resume });
    assert.equal(result.status, "completed");
    assert.ok(lastText(a).startsWith("# Report"), lastText(a));
    assert.equal(a.pendingInterrupts.length, 0);
  },

  async "frontend tools are reported as unused, not silently dropped"() {
    const a = agent(KEY_A);
    const tools = [{ name: "confirm", description: "Ask the user to confirm", parameters: { type: "object" } }];
    const { events } = await turn(a, "What is a flywheel battery?", { tools });
    const notice = events.find((e) => e.type === "CUSTOM" && e.name === "unused_input");
    assert.deepEqual(notice?.value?.fields, ["tools"], JSON.stringify(notice));
    assert.equal(events.at(-1).type, "RUN_FINISHED");
    // A state the UI edited is not applied to the thread, and the server says so.
    a.setState({ ...a.state, research_brief: "edited by the page" });
    const next = await turn(a, "And their weight?");
    const again = next.events.find((e) => e.type === "CUSTOM" && e.name === "unused_input");
    assert.ok(again?.value?.fields?.includes("state"), JSON.stringify(again));
    assert.notEqual(a.state.research_brief, "edited by the page");
  },

  async "another owner's thread is refused"() {
    const a = agent(KEY_A);
    await turn(a, "What is a flywheel battery?");
    const b = agent(KEY_B, "deep_research", a.threadId);
    await assert.rejects(turn(b, "continue theirs"), (e) => e.status === 404);
    assert.equal((await api(KEY_A, `/threads/${a.threadId}/runs`)).length, 1);
  },

  async "aborting the run interrupts it"() {
    const a = agent(KEY_A, "slow");
    a.addMessage({ id: randomUUID(), role: "user", content: "hi" });
    const running = a.runAgent(
      { runId: randomUUID(), forwardedProps: { configurable: { sleep_secs: 30 } } },
      { onRunStartedEvent: () => setTimeout(() => a.abortRun(), 300) },
    );
    await running.catch(() => {});
    let runs = [];
    for (let i = 0; i < 100; i++) {
      runs = await api(KEY_A, `/threads/${a.threadId}/runs`);
      if (runs[0]?.status === "interrupted") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(runs[0]?.status, "interrupted", JSON.stringify(runs));
  },

  async "bad input gets a 4xx with a detail"() {
    const bad = new HttpAgent({ url: `${URL}/ag-ui/deep_research`, headers: { "x-api-key": KEY_A }, threadId: "not-a-uuid" });
    await assert.rejects(turn(bad, "hi"), (e) => e.status === 422 && /UUID/.test(e.payload.detail));
    const nobody = new HttpAgent({ url: `${URL}/ag-ui/deep_research`, threadId: randomUUID() });
    await assert.rejects(turn(nobody, "hi"), (e) => e.status === 401);
    const missing = agent(KEY_A, "no_such_assistant");
    await assert.rejects(turn(missing, "hi"), (e) => e.status === 404 || e.status === 422);
    const resume = [{ interruptId: "nope", status: "resolved", payload: {} }];
    const idle = agent(KEY_A);
    await assert.rejects(turn(idle, null, { resume }), (e) => e.status === 409);
  },
};

let failed = 0;
const only = process.env.DR_PROTOCOL_ARGS;
for (const [name, test] of Object.entries(tests)) {
  if (only && !name.includes(only)) continue;
  try {
    await test();
    console.log(`ok   ${name}`);
  } catch (error) {
    failed += 1;
    console.log(`FAIL ${name}\n${error?.stack ?? error}`);
  }
}
console.log(failed ? `${failed} failed` : "all passed");
process.exit(failed ? 1 : 0);
