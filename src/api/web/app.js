// The research app: a client of the service's own API, as any other would be. No build step
// and no dependencies: the binary embeds this file as it is.
"use strict";

const ASSISTANT = "deep_research";
/** The research settings worth a field in the form, in the order shown. */
const SETTINGS_SHOWN = [
  "search_api", "corpus", "research_model", "final_report_model", "summarization_model",
  "compression_model", "max_concurrent_research_units", "max_researcher_iterations",
  "search_max_results", "allow_clarification", "review_plan", "research_profile", "report_form",
];
const KEY_STORE = "deep-research.api-key";
const SETTINGS_STORE = "deep-research.settings";

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------------------------------------
// The API

class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  const key = localStorage.getItem(KEY_STORE);
  if (key) h["x-api-key"] = key;
  return h;
}

/** Sends a request; a refusal becomes an `ApiError` carrying the server's `detail`. */
async function send(method, path, body, extra = {}, signal = undefined) {
  const init = { method, headers: headers(extra), signal };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let detail = response.statusText;
    try {
      const parsed = await response.json();
      detail = typeof parsed.detail === "string" ? parsed.detail : JSON.stringify(parsed.detail ?? parsed);
    } catch { /* not JSON: keep the status text */ }
    if (response.status === 401) detail += " — enter an API key under Settings";
    throw new ApiError(response.status, detail);
  }
  return response;
}

async function api(method, path, body) {
  const response = await send(method, path, body);
  return response.status === 204 ? null : response.json();
}

/** The events of a `text/event-stream` response, as `{event, data, id}`. */
async function* events(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = "message";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line === "") {
        if (data.length) yield { event, data: data.join("\n") };
        event = "message";
        data = [];
      } else if (!line.startsWith(":")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = text;
        else if (field === "data") data.push(text);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// What is shown

const view = {
  threadId: null,
  runId: null,
  question: "",
  values: {},
  /** Aborts the stream being followed (another thread opened). */
  following: null,
  progress: null,
};

function freshProgress() {
  return { stage: "Starting", searches: 0, pages: 0, researchers: new Map(), usage: null };
}

function showError(error) {
  const box = $("error");
  if (!error) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.textContent = error instanceof Error ? error.message : String(error);
  box.hidden = false;
}

function hideAll() {
  for (const id of ["clarify", "plan", "progress", "report-section", "sources-panel"]) $(id).hidden = true;
  $("log").replaceChildren();
  $("status").textContent = "";
  $("cancel").hidden = true;
  showError(null);
}

function log(text, className) {
  const item = document.createElement("li");
  item.textContent = text;
  if (className) item.className = className;
  $("log").append(item);
  $("log").scrollTop = $("log").scrollHeight;
}

function renderStatus() {
  const p = view.progress;
  if (!p) return;
  const parts = [p.stage];
  if (p.researchers.size) parts.push(`${p.researchers.size} researcher${p.researchers.size === 1 ? "" : "s"}`);
  parts.push(`${p.searches} search${p.searches === 1 ? "" : "es"}`, `${p.pages} page${p.pages === 1 ? "" : "s"} read`);
  if (p.usage) {
    const tokens = (p.usage.input_tokens ?? 0) + (p.usage.output_tokens ?? 0);
    parts.push(`${tokens.toLocaleString("en")} tokens`);
    if (p.usage.estimated_usd) parts.push(`≈ $${Number(p.usage.estimated_usd).toFixed(4)}`);
  }
  $("status").textContent = parts.join(" · ");
}

const asList = (v) => (Array.isArray(v) ? v : Array.isArray(v?.value) ? v.value : []);
const excerpt = (text, n = 160) => {
  const t = String(text ?? "").replace(/\s+/g, " ").trim();
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
};

/** A researcher's name, by its namespace up to its own `researcher:` segment. */
function researcherName(namespace) {
  const at = namespace.lastIndexOf("researcher:");
  const end = namespace.indexOf("|", at);
  const key = at < 0 || end < 0 ? namespace : namespace.slice(0, end);
  const p = view.progress;
  if (!p.researchers.has(key)) p.researchers.set(key, `Researcher ${p.researchers.size + 1}`);
  return p.researchers.get(key);
}

/** The search queries in a model turn's tool calls. */
function queriesOf(messages) {
  const out = [];
  for (const m of messages) {
    for (const call of m?.tool_calls ?? []) {
      const args = call.args ?? {};
      if (Array.isArray(args.queries)) out.push(...args.queries);
      else if (typeof args.query === "string") out.push(args.query);
    }
  }
  return out.map(String);
}

/** One `updates` event: a node finished. */
function onUpdate(namespace, update) {
  const p = view.progress;
  for (const [node, data] of Object.entries(update ?? {})) {
    if (node === "__interrupt__") {
      p.stage = "Waiting for your review";
      log("The research plan is ready for review.");
      continue;
    }
    const researcher = namespace.includes("researcher:") ? researcherName(namespace) : null;
    switch (node) {
      case "clarify_with_user":
        p.stage = "Question checked";
        log("Checked whether the question needs clarifying.");
        break;
      case "write_research_brief":
        p.stage = "Brief written";
        log(`Brief: ${excerpt(data?.research_brief, 400)}`);
        break;
      case "plan_research":
        p.stage = "Plan drafted";
        log(`Plan drafted: ${asList(data?.research_plan).length || "its"} topics.`);
        break;
      case "review_plan":
        p.stage = "Plan approved";
        log("Plan approved; researchers start.");
        break;
      case "supervisor": {
        p.stage = "Researching";
        const topics = asList(data?.supervisor_messages)
          .flatMap((m) => m?.tool_calls ?? [])
          .filter((c) => c.name === "ConductResearch")
          .map((c) => excerpt(c.args?.research_topic, 120));
        log(topics.length ? `Delegated ${topics.length} topic${topics.length === 1 ? "" : "s"}: ${topics.join(" | ")}` : "The supervisor reviewed the findings.");
        break;
      }
      case "researcher": {
        const queries = queriesOf(asList(data?.researcher_messages));
        p.searches += queries.length;
        if (queries.length) log(`${researcher}: searching ${queries.map((q) => `“${excerpt(q, 90)}”`).join(", ")}`, "researcher");
        break;
      }
      case "researcher_tools": {
        const read = asList(data?.sources).length;
        p.pages += read;
        log(`${researcher}: read ${read} page${read === 1 ? "" : "s"}.`, "researcher");
        break;
      }
      case "compress_research":
        log(`${researcher}: findings summarised.`, "researcher");
        break;
      case "research_supervisor":
        p.stage = "Writing the report";
        log("Research finished; writing the report.");
        break;
      case "final_report_generation":
        p.stage = "Report written";
        log("Report written.");
        break;
      case "answer_follow_up":
        if (data?.follow_up?.mode === "answered") p.stage = "Answered";
        break;
      default:
        break;
    }
  }
  renderStatus();
}

function onCustom(data) {
  const p = view.progress;
  switch (data?.type) {
    case "usage":
      p.usage = data.run ?? p.usage;
      break;
    case "citations": {
      const s = data.support ?? {};
      log(`Citations checked: ${s.supported ?? 0} of ${s.citations ?? 0} supported, ${s.moved ?? 0} moved, ${s.removed ?? 0} removed, ${s.attached ?? 0} added; ${s.sources_cited ?? 0} sources cited.`);
      break;
    }
    case "searched":
      for (const q of data.queries ?? []) {
        log(`Searched “${excerpt(q.query, 120)}”: ${(q.results ?? []).length} found.`);
      }
      break;
    case "search_error":
      log(`A search failed: ${excerpt(data.error, 200)}`);
      break;
    case "researcher_error":
      log(`A researcher failed: ${excerpt(data.error, 200)}`);
      break;
    case "fallback":
      log(`Fell back (${data.stage ?? "?"}): ${excerpt(data.detail ?? data.fallback, 200)}`);
      break;
    case "follow_up":
      if (data.mode === "answered") log(`Answered from the report's sources (${excerpt(data.reason, 200)}).`);
      else if (data.mode === "rerun") log(`Running the question again (${excerpt(data.reason, 200)}); the report will end with what changed.`);
      else log(`Researching it again: ${excerpt(data.reason, 200)}.`);
      break;
    case "spend_cap":
      log("The run reached its spend cap; the report is partial.");
      break;
    default:
      break;
  }
  renderStatus();
}

/** Follows a run's stream until it ends; returns whether it ended with an error. */
async function follow(response) {
  let failed = false;
  for await (const { event, data } of events(response)) {
    let parsed = null;
    try { parsed = JSON.parse(data); } catch { continue; }
    const [mode, ...rest] = event.split("|");
    const namespace = rest.join("|");
    if (mode === "metadata" && parsed?.run_id) {
      view.runId = parsed.run_id;
      $("cancel").hidden = false;
    } else if (mode === "values" && !namespace) {
      view.values = parsed ?? {};
    } else if (mode === "updates") {
      onUpdate(namespace, parsed);
    } else if (mode === "custom") {
      onCustom(parsed);
    } else if (mode === "error") {
      failed = true;
      const why = parsed?.message ?? parsed?.error ?? data;
      showError(`The research failed: ${why}`);
      log(`Failed: ${excerpt(why, 300)}`);
    }
  }
  return failed;
}

/** Starts a run on the open thread and follows it; then shows where the thread stands. A
 * question on the report keeps the report in view while it is answered. */
async function runOnThread(payload, { keepReport = false } = {}) {
  const threadId = view.threadId;
  view.progress = freshProgress();
  $("progress").hidden = false;
  if (!keepReport) $("report-section").hidden = true;
  $("clarify").hidden = true;
  $("plan").hidden = true;
  renderStatus();
  const controller = new AbortController();
  view.following?.abort();
  view.following = controller;
  try {
    const body = {
      assistant_id: ASSISTANT,
      ...payload,
      stream_mode: ["values", "updates", "custom"],
      stream_subgraphs: true,
      // Stored, so a reload replays the whole stream and draws the progress again.
      stream_resumable: true,
      on_disconnect: "continue",
      config: { configurable: chosenSettings() },
    };
    await follow(await send("POST", `/threads/${threadId}/runs/stream`, body, {}, controller.signal));
  } catch (error) {
    if (error.name === "AbortError") return;
    showError(error);
  } finally {
    if (view.following === controller) view.following = null;
  }
  if (view.threadId === threadId) await showThreadState();
  await loadHistory();
}

/** The thread's unfinished run, if it has one. */
async function activeRun(threadId) {
  const runs = await api("GET", `/threads/${threadId}/runs?limit=10`);
  return runs.find((r) => r.status === "pending" || r.status === "running") ?? null;
}

/** Rejoins the thread's unfinished run (after a reload, or from the history). */
async function rejoin(active) {
  const threadId = view.threadId;
  view.runId = active.run_id;
  view.progress = freshProgress();
  $("progress").hidden = false;
  $("cancel").hidden = false;
  log("Rejoined the research in progress.");
  renderStatus();
  const controller = new AbortController();
  view.following?.abort();
  view.following = controller;
  try {
    // `-1`: the whole stream from its start, so the progress is drawn again.
    const path = `/threads/${threadId}/runs/${active.run_id}/stream`;
    await follow(await send("GET", path, undefined, { "last-event-id": "-1" }, controller.signal));
  } catch (error) {
    if (error.name !== "AbortError") showError(error);
  } finally {
    if (view.following === controller) view.following = null;
  }
  if (view.threadId === threadId) await showThreadState();
}

/** Shows the thread as it stands: a plan to review, a question to answer, or the report. */
async function showThreadState() {
  const state = await api("GET", `/threads/${view.threadId}/state`);
  view.values = state.values ?? {};
  $("cancel").hidden = true;
  $("clarify").hidden = true;
  $("plan").hidden = true;
  const interrupt = (state.tasks ?? []).flatMap((t) => t.interrupts ?? [])[0]
    ?? (state.interrupts ?? [])[0];
  const messages = asList(view.values.messages);
  view.question = view.question || firstQuestion(messages);
  if (interrupt?.value?.type === "plan_review") {
    showPlan(interrupt.value);
  } else if (view.values.final_report) {
    if (view.progress) { view.progress.stage = "Done"; renderStatus(); }
    showReport(view.values.final_report, asList(view.values.sources));
    showExchange(messages, view.values.final_report);
  } else {
    // A clarifying question ends a run before any brief is written.
    const last = messages[messages.length - 1];
    const asking = last && (last.type === "ai" || last.role === "assistant") && !(last.tool_calls ?? []).length;
    if (asking && !view.values.research_brief) {
      if (view.progress) { view.progress.stage = "Waiting for your reply"; renderStatus(); }
      showClarification(textOf(last));
    }
  }
}

function textOf(message) {
  const c = message?.content;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p?.text ?? "")).join("");
  return "";
}

function firstQuestion(messages) {
  const first = messages.find((m) => m.type === "human" || m.role === "user");
  return first ? textOf(first) : "";
}

function showClarification(text) {
  $("clarify-question").textContent = text;
  $("clarify").hidden = false;
  $("reply").value = "";
  $("reply").focus();
}

function showPlan(value) {
  $("plan-brief").textContent = value.research_brief ?? "";
  const list = $("plan-topics");
  list.replaceChildren();
  (value.topics ?? []).forEach((topic, i) => {
    const item = document.createElement("li");
    const label = document.createElement("label");
    label.textContent = `Topic ${i + 1}`;
    label.htmlFor = `topic-${i}`;
    const input = document.createElement("textarea");
    input.id = `topic-${i}`;
    input.rows = 2;
    input.value = topic;
    input.dataset.original = topic;
    item.append(label, input);
    list.append(item);
  });
  $("plan-feedback").value = "";
  $("plan").hidden = false;
  $("plan-approve").focus();
}

// ---------------------------------------------------------------------------------------------
// The report

// The report's Markdown is rendered by markdown.js (renderMarkdown, citedSources, SAFE_SCHEMES),
// which the page loads before this script.

const sourceKey = (url) => String(url ?? "").trim().replace(/\/+$/, "").toLowerCase();

function showReport(markdown, sources) {
  const cited = citedSources(markdown);
  $("report").innerHTML = renderMarkdown(markdown, cited);
  $("report-section").hidden = false;
  const citedBy = new Map([...cited].map(([n, s]) => [sourceKey(s.url), n]));
  const list = $("sources-list");
  list.replaceChildren();
  const seen = new Set();
  const all = [...sources.map((s) => ({ url: s.url, title: s.title }))];
  // A cited source is always listed, even where the state holds no entry for it.
  for (const [, s] of cited) if (!all.some((a) => sourceKey(a.url) === sourceKey(s.url))) all.push(s);
  // The cited ones first, in the report's order; then the rest as gathered.
  const rank = (s) => citedBy.get(sourceKey(s.url)) ?? Number.MAX_SAFE_INTEGER;
  all.sort((a, b) => rank(a) - rank(b));
  let count = 0;
  for (const s of all) {
    const key = sourceKey(s.url);
    if (!s.url || seen.has(key)) continue;
    seen.add(key);
    count++;
    const item = document.createElement("li");
    const a = document.createElement("a");
    a.textContent = s.title || s.url;
    if (SAFE_SCHEMES.test(s.url)) {
      a.href = s.url;
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
    item.append(a);
    if (citedBy.has(key)) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = `cited [${citedBy.get(key)}]`;
      item.append(badge);
    }
    const where = document.createElement("span");
    where.className = "location";
    where.textContent = s.url;
    item.append(where);
    list.append(item);
  }
  $("sources-summary").textContent = `${count} source${count === 1 ? "" : "s"} gathered, ${citedBy.size} cited in the report.`;
  $("sources-panel").hidden = false;
}

/** The questions asked on the report and their answers: the messages after the report's own
 * (an answer has its own Sources list; a question researched again gave a new report). */
function showExchange(messages, report) {
  const box = $("exchange");
  box.replaceChildren();
  let at = -1;
  messages.forEach((m, i) => {
    if ((m.type === "ai" || m.role === "assistant") && textOf(m) === report) at = i;
  });
  if (at < 0) return;
  for (const m of messages.slice(at + 1)) {
    const text = textOf(m);
    if (!text || (m.tool_calls ?? []).length) continue;
    const asked = m.type === "human" || m.role === "user";
    const turn = document.createElement("div");
    turn.className = asked ? "turn asked" : "turn answered";
    turn.setAttribute("role", "group");
    turn.setAttribute("aria-label", asked ? "Asked" : "Answer");
    if (asked) {
      const p = document.createElement("p");
      p.textContent = text;
      turn.append(p);
    } else {
      turn.innerHTML = renderMarkdown(text, citedSources(text));
    }
    box.append(turn);
  }
}

/** Downloads the thread's report from the server in `format` (md, html, pdf, docx): the
 * report with its citations linked and the evidence appendix. */
async function download(format) {
  try {
    const response = await send("GET", `/threads/${view.threadId}/report?format=${format}`);
    const blob = await response.blob();
    const named = /filename="([^"]+)"/.exec(response.headers.get("content-disposition") ?? "");
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = named ? named[1] : `report.${format}`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  } catch (error) {
    showError(error);
  }
}

// ---------------------------------------------------------------------------------------------
// Threads: start, open, history

async function startResearch(question) {
  const text = question.trim();
  if (!text) return;
  hideAll();
  try {
    const thread = await api("POST", "/threads", { metadata: { title: excerpt(text, 200) } });
    view.threadId = thread.thread_id;
    view.question = text;
    view.values = {};
    history.replaceState(null, "", `#thread=${thread.thread_id}`);
    $("question").value = "";
    markCurrent();
    await runOnThread({ input: { messages: [{ type: "human", content: text }] } });
  } catch (error) {
    showError(error);
  }
}

/** Asks the open thread's question again on the thread: researched afresh, its report ends
 * with what changed since the last one. */
async function rerunThread() {
  if (!view.threadId || !view.question) return;
  await runOnThread({ input: { messages: [{ type: "human", content: view.question }] } });
}

async function openThread(threadId) {
  view.following?.abort();
  hideAll();
  view.threadId = threadId;
  view.question = "";
  view.progress = null;
  history.replaceState(null, "", `#thread=${threadId}`);
  markCurrent();
  try {
    // A run in flight is replayed from its start; otherwise the thread is shown as it is.
    const active = await activeRun(threadId);
    if (active) await rejoin(active);
    else await showThreadState();
  } catch (error) {
    showError(error);
  }
}

function threadTitle(thread) {
  return thread.metadata?.title || firstQuestion(asList(thread.values?.messages)) || thread.thread_id;
}

async function loadHistory() {
  let threads;
  try {
    threads = await api("POST", "/threads/search", { limit: 50, sort_by: "updated_at", sort_order: "desc" });
  } catch (error) {
    $("history-empty").textContent = error.status === 401 ? "Enter an API key under Settings to see your research." : `Could not load the history: ${error.message}`;
    $("history-empty").hidden = false;
    $("history-list").replaceChildren();
    return;
  }
  const list = $("history-list");
  list.replaceChildren();
  $("history-empty").textContent = "No research yet.";
  $("history-empty").hidden = threads.length > 0;
  for (const thread of threads) {
    const title = excerpt(threadTitle(thread), 90);
    const item = document.createElement("li");
    item.dataset.threadId = thread.thread_id;
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open";
    open.textContent = title;
    open.addEventListener("click", () => openThread(thread.thread_id));
    const when = document.createElement("span");
    when.className = "when";
    when.textContent = `${new Date(thread.updated_at).toLocaleString()} · ${thread.status}`;
    const again = document.createElement("button");
    again.type = "button";
    again.className = "secondary";
    again.textContent = "Run again";
    again.setAttribute("aria-label", `Run again: ${title}`);
    again.addEventListener("click", async () => {
      await openThread(thread.thread_id);
      await rerunThread();
    });
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "secondary";
    remove.textContent = "Delete";
    remove.setAttribute("aria-label", `Delete: ${title}`);
    remove.addEventListener("click", () => deleteThread(thread.thread_id, remove, title));
    item.append(open, when, again, remove);
    list.append(item);
  }
  markCurrent();
}

/** Deleting takes two clicks: the first asks, the second deletes. */
async function deleteThread(threadId, button, title) {
  if (button.dataset.confirm !== "yes") {
    button.dataset.confirm = "yes";
    button.textContent = "Confirm delete";
    button.setAttribute("aria-label", `Confirm delete: ${title}`);
    return;
  }
  try {
    await api("DELETE", `/threads/${threadId}`);
    if (view.threadId === threadId) {
      view.following?.abort();
      view.threadId = null;
      hideAll();
      history.replaceState(null, "", "#");
    }
    await loadHistory();
  } catch (error) {
    showError(error);
  }
}

function markCurrent() {
  for (const item of $("history-list").children) {
    const current = item.dataset.threadId === view.threadId;
    item.classList.toggle("current", current);
    const open = item.querySelector(".open");
    if (current) open?.setAttribute("aria-current", "page");
    else open?.removeAttribute("aria-current");
  }
}

// ---------------------------------------------------------------------------------------------
// Settings

function storedSettings() {
  try { return JSON.parse(localStorage.getItem(SETTINGS_STORE) ?? "{}") ?? {}; } catch { return {}; }
}

/** The settings the user changed from the server's defaults. */
function chosenSettings() {
  const chosen = {};
  for (const [name, value] of Object.entries(storedSettings())) {
    if (value !== "" && value !== null && value !== undefined) chosen[name] = value;
  }
  return chosen;
}

function saveSetting(name, value, fallback) {
  const stored = storedSettings();
  if (value === fallback || value === "") delete stored[name];
  else stored[name] = value;
  localStorage.setItem(SETTINGS_STORE, JSON.stringify(stored));
}

function settingField(name, schema, current) {
  const wrap = document.createElement("div");
  const id = `setting-${name}`;
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = name.replace(/_/g, " ");
  const hint = document.createElement("p");
  hint.className = "hint";
  hint.id = `${id}-hint`;
  hint.textContent = schema.description ?? "";
  let input;
  const fallback = schema.default ?? "";
  if (Array.isArray(schema.enum)) {
    input = document.createElement("select");
    for (const choice of schema.enum) {
      const option = document.createElement("option");
      option.value = String(choice);
      option.textContent = choice === "" ? "(default)" : String(choice);
      input.append(option);
    }
    input.value = String(current ?? fallback);
    input.addEventListener("change", () => saveSetting(name, input.value, String(fallback)));
  } else if (schema.type === "boolean") {
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = Boolean(current ?? fallback);
    input.addEventListener("change", () => saveSetting(name, input.checked, Boolean(fallback)));
  } else if (schema.type === "integer") {
    input = document.createElement("input");
    input.type = "number";
    if (schema.minimum !== undefined) input.min = schema.minimum;
    if (schema.maximum !== undefined) input.max = schema.maximum;
    input.value = current ?? fallback;
    input.addEventListener("change", () => {
      const n = Number(input.value);
      saveSetting(name, Number.isInteger(n) && input.value !== "" ? n : "", fallback);
    });
  } else {
    input = document.createElement("input");
    input.type = "text";
    input.value = current ?? fallback;
    input.addEventListener("change", () => saveSetting(name, input.value.trim(), String(fallback)));
  }
  input.id = id;
  input.disabled = Boolean(schema.readOnly);
  input.setAttribute("aria-describedby", hint.id);
  wrap.append(label, input, hint);
  return wrap;
}

async function loadSettings() {
  const fields = $("settings-fields");
  try {
    const schemas = await api("GET", `/assistants/${ASSISTANT}/schemas`);
    const properties = schemas.config_schema?.properties ?? {};
    const stored = storedSettings();
    fields.replaceChildren(...SETTINGS_SHOWN.filter((n) => properties[n]).map((n) => settingField(n, properties[n], stored[n])));
    $("settings-status").textContent = "Changes apply to the next research.";
  } catch (error) {
    $("settings-status").textContent = `Could not load the settings: ${error.message}`;
  }
}

// ---------------------------------------------------------------------------------------------
// Wiring

function submitOnEnter(textarea, form) {
  textarea.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
}

function planAnswer() {
  const inputs = [...$("plan-topics").querySelectorAll("textarea")];
  const topics = inputs.map((t) => t.value.trim()).filter(Boolean);
  const edited = inputs.some((t) => t.value.trim() !== t.dataset.original) || topics.length !== inputs.length;
  return edited ? { action: "edit", topics } : { action: "approve" };
}

async function resume(answer) {
  $("plan").hidden = true;
  await runOnThread({ command: { resume: answer } });
}

function wire() {
  $("ask").addEventListener("submit", (event) => {
    event.preventDefault();
    startResearch($("question").value);
  });
  submitOnEnter($("question"), $("ask"));
  $("reply-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("reply").value.trim();
    if (!text) return;
    $("clarify").hidden = true;
    runOnThread({ input: { messages: [{ type: "human", content: text }] } });
  });
  submitOnEnter($("reply"), $("reply-form"));
  $("follow-up-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("follow-up").value.trim();
    if (!text || !view.threadId) return;
    $("follow-up").value = "";
    runOnThread({ input: { messages: [{ type: "human", content: text }] } }, { keepReport: true });
  });
  submitOnEnter($("follow-up"), $("follow-up-form"));
  $("plan-approve").addEventListener("click", () => resume(planAnswer()));
  $("plan-reject").addEventListener("click", () => {
    const feedback = $("plan-feedback").value.trim();
    if (!feedback) {
      showError("Say in Feedback what the plan should do instead, then reject it.");
      $("plan-feedback").focus();
      return;
    }
    resume({ action: "reject", feedback });
  });
  $("cancel").addEventListener("click", async () => {
    if (!view.runId) return;
    try {
      await api("POST", `/threads/${view.threadId}/runs/${view.runId}/cancel?action=interrupt`);
      log("Cancelled.");
    } catch (error) {
      showError(error);
    }
  });
  for (const format of ["md", "html", "pdf", "docx"]) {
    $(`download-${format}`).addEventListener("click", () => download(format));
  }
  $("rerun").addEventListener("click", () => rerunThread());
  $("new-research").addEventListener("click", () => {
    view.following?.abort();
    view.threadId = null;
    hideAll();
    history.replaceState(null, "", "#");
    markCurrent();
    $("question").focus();
  });
  $("settings-toggle").addEventListener("click", () => {
    if ($("settings").hidden) {
      openSettings();
    } else {
      $("settings").hidden = true;
      $("settings-toggle").setAttribute("aria-expanded", "false");
    }
  });
  $("api-key").value = localStorage.getItem(KEY_STORE) ?? "";
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);
    showError(null);
    loadSettings();
    loadHistory().then(() => {
      const match = location.hash.match(/thread=([0-9a-f-]{36})/i);
      if (match && !view.threadId) openThread(match[1]);
    });
    $("question").focus();
  });
}

function openSettings() {
  $("settings").hidden = false;
  $("settings-toggle").setAttribute("aria-expanded", "true");
  $("api-key").focus();
}

async function main() {
  wire();
  if (document.body.dataset.auth === "required" && !localStorage.getItem(KEY_STORE)) {
    // Nothing can be loaded without a key: ask for it first.
    showError("This server needs an API key: enter it under Settings.");
    $("history-empty").textContent = "Enter an API key under Settings to see your research.";
    $("history-empty").hidden = false;
    openSettings();
    return;
  }
  await Promise.all([loadSettings(), loadHistory()]);
  const match = location.hash.match(/thread=([0-9a-f-]{36})/i);
  if (match) await openThread(match[1]);
  else $("question").focus();
}

main();
