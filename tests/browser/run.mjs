// Drives a test page in headless Chromium against a running service.
//   node run.mjs --api <url> --scenario <name>
// Serves dist/ on a free loopback port, opens the page, plays the scenario as a user would
// (typing, clicking) and exits 0 when every step held, 1 with the reason otherwise.
import { createServer } from "node:http";
import { readFileSync, existsSync, mkdirSync } from "node:fs";
import { join, extname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith("--")) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const dist = fileURLToPath(new URL("./dist", import.meta.url));
const TIMEOUT = 60_000;

function serve() {
  const types = { ".html": "text/html", ".js": "text/javascript" };
  const server = createServer((req, res) => {
    const path = join(dist, new URL(req.url, "http://x").pathname);
    if (!path.startsWith(dist) || !existsSync(path)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": types[extname(path)] ?? "application/octet-stream" });
    res.end(readFileSync(path));
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

/** The page's text of every element with this test id. */
const texts = (page, id) => page.locator(`[data-testid="${id}"]`).allInnerTexts();

const loadingStarts = async (page) => Number(await page.getByTestId("loading-starts").innerText());

/** Does `action`, then waits until the page showed a run start (loading) and end (idle). */
async function andWaitForRun(page, action) {
  const before = await loadingStarts(page);
  await action();
  await page.waitForFunction(
    (before) =>
      Number(document.querySelector('[data-testid="loading-starts"]')?.textContent) > before &&
      document.querySelector('[data-testid="loading"]')?.textContent === "idle",
    before,
    { timeout: TIMEOUT },
  );
}

async function send(page, text) {
  await andWaitForRun(page, async () => {
    await page.getByTestId("input").fill(text);
    await page.getByTestId("send").click();
  });
}

async function waitForMessage(page, needle) {
  await page.waitForFunction(
    (needle) =>
      [...document.querySelectorAll('[data-testid="message"]')].some((m) =>
        m.textContent.includes(needle),
      ),
    needle,
    { timeout: TIMEOUT },
  );
}

async function waitForInterrupt(page) {
  await page.getByTestId("interrupt-value").waitFor({ timeout: TIMEOUT });
  return JSON.parse(await page.getByTestId("interrupt-value").innerText());
}

async function answer(page, value) {
  await andWaitForRun(page, async () => {
    await page.getByTestId("answer").fill(JSON.stringify(value));
    await page.getByTestId("respond").click();
  });
}

async function waitForReport(page) {
  await page.waitForFunction(
    () => Number(document.querySelector('[data-testid="report-length"]')?.textContent) > 0,
    null,
    { timeout: TIMEOUT },
  );
}

function check(condition, what) {
  if (!condition) throw new Error(what);
}

/** Screenshots of the research app, kept as test artifacts. */
const artifacts = fileURLToPath(new URL("../../target/browser-artifacts", import.meta.url));
let shots = 0;
async function shot(page, step) {
  mkdirSync(artifacts, { recursive: true });
  shots += 1;
  await page.screenshot({ path: join(artifacts, `${args.scenario}-${shots}-${step}.png`), fullPage: true });
}

/** The research app at the service's own `/`, driven by roles and accessible names only: a
 * vague question, its clarification, the progress, the report and a citation, the Sources,
 * the Markdown download, a reload, and the history. */
async function appResearch(page, url, key) {
  // Sources are web pages this machine cannot reach: the browser gets a stand-in.
  await page.context().route(/example\.com/, (route) =>
    route.fulfill({ contentType: "text/html", body: "<title>a source</title><p>a source page</p>" }),
  );
  if (key) {
    // A keyed server: the page asks for the key before anything else.
    const settings = page.getByRole("region", { name: "Settings" });
    await settings.waitFor({ timeout: TIMEOUT });
    await expectText(page.getByRole("alert"), "needs an API key");
    await settings.getByLabel("API key").fill(key);
    await settings.getByRole("button", { name: "Save key" }).click();
    await page.getByRole("button", { name: "Settings" }).click();
  }
  const question = page.getByLabel("Question");
  await question.fill("Tell me about batteries, it is vague");
  await question.press("Enter");
  const clarification = page.getByRole("region", { name: "Clarification" });
  await expectText(clarification, "Which aspect do you mean?");
  await shot(page, "clarification");
  await clarification.getByLabel("Reply").fill("Their costs, please.");
  await clarification.getByRole("button", { name: "Send" }).click();

  const report = page.getByRole("region", { name: "Report" });
  await expectText(report, "A verified fact");
  const activity = page.getByRole("log", { name: "Activity" });
  for (const step of ["Brief:", "Delegated 3 topics", "Researcher 1: searching", "read", "Citations checked", "Report written"]) {
    await expectText(activity, step);
  }
  const status = await page.getByRole("status").innerText();
  check(/Done · 3 researchers · \d+ searches · [1-9]\d* pages read · [\d,]+ tokens/.test(status), `status: ${status}`);
  await shot(page, "report");

  // A citation is a link to the page it cites.
  const citation = report.getByRole("link", { name: /^Source 1:/ });
  const href = await citation.getAttribute("href");
  check(href.includes("example.com"), `citation [1] links to ${href}`);
  const [opened] = await Promise.all([page.waitForEvent("popup"), citation.click()]);
  await opened.waitForLoadState();
  check(opened.url() === href, `following [1] opened ${opened.url()}, not ${href}`);
  await opened.close();
  check(!(await report.innerText()).includes("invented.example"), "an invented source is shown");

  const sources = page.getByRole("complementary", { name: "Sources" });
  const links = await sources.getByRole("link").count();
  check(links >= 3, `Sources lists ${links} links`);
  await expectText(sources, "cited [1]");
  check((await sources.innerText()).includes(href), "the cited page is in Sources");

  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("button", { name: "Download Markdown" }).click(),
  ]);
  check(download.suggestedFilename().endsWith(".md"), `downloaded ${download.suggestedFilename()}`);
  const markdown = readFileSync(await download.path(), "utf8");
  check(markdown.includes("A verified fact [1]") && markdown.includes("### Sources"), `markdown: ${markdown}`);
  check(markdown.includes("## Evidence"), `the download has its evidence: ${markdown}`);
  const [pdf] = await Promise.all([
    page.waitForEvent("download"),
    page.getByRole("button", { name: "PDF" }).click(),
  ]);
  check(pdf.suggestedFilename().endsWith(".pdf"), `downloaded ${pdf.suggestedFilename()}`);
  check(readFileSync(await pdf.path()).subarray(0, 5).toString() === "%PDF-", "the PDF download is a PDF");

  // A reload shows the same research again, and no question beside it.
  await page.reload();
  await expectText(page.getByRole("region", { name: "Report" }), "A verified fact");
  check(await page.getByRole("region", { name: "Clarification" }).count() === 0, "a question is shown beside the report");

  // The history opens it too.
  await page.getByRole("button", { name: "New research" }).click();
  check(await page.getByRole("region", { name: "Report" }).count() === 0, "the report stays after New research");
  const history = page.getByRole("navigation", { name: "History" });
  await history.getByRole("button", { name: /^Tell me about batteries/ }).click();
  await expectText(page.getByRole("region", { name: "Report" }), "A verified fact");
  await shot(page, "history");
  check(page.url().includes("#thread="), `the address names the thread: ${page.url()}`);

  // A report is text: markup and script in it are shown, never run; only safe links are made.
  const html = await page.evaluate(() =>
    renderMarkdown(
      "# T\n\n<img src=x onerror=alert(1)> [a](javascript:alert(1)) **b** [1] <script>x</script>\n\n" +
        "| k | v |\n|---|---|\n| `c` | d |\n\n[1] T: https://e.example/p",
      new Map([[1, { url: "https://e.example/p", title: "T" }]]),
    ),
  );
  check(!/<img|<script|javascript:/i.test(html), `unsafe markup got through: ${html}`);
  check(html.includes("&lt;img") && html.includes("<strong>b</strong>"), `escaped and emphasised: ${html}`);
  check(html.includes('<a href="https://e.example/p" target="_blank" rel="noopener noreferrer" class="cite"'), `cite: ${html}`);
  check(html.includes("<table>") && html.includes("<code>c</code>"), `table: ${html}`);
  check(html.includes('<li id="reference-1">[1] T: <a href="https://e.example/p"'), `references: ${html}`);
}

/** Waits until `locator` is visible and its text contains `needle`. */
async function expectText(locator, needle) {
  await locator.first().waitFor({ timeout: TIMEOUT });
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    const text = await locator.first().innerText();
    if (text.includes(needle)) return;
    if (Date.now() > deadline) throw new Error(`"${needle}" never showed; the text is: ${text}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The app's plan review: the planned topics shown, one edited, the plan approved. */
async function appPlanReview(page) {
  // Plan review is a research setting: switched on in the settings form.
  await page.getByRole("button", { name: "Settings" }).click();
  const setting = page.getByRole("checkbox", { name: "review plan", exact: true });
  await setting.waitFor({ timeout: TIMEOUT });
  await setting.check();
  await page.getByRole("button", { name: "Settings" }).click();
  const question = page.getByLabel("Question");
  await question.fill("Compare two things");
  await page.getByRole("button", { name: "Start research" }).click();
  const plan = page.getByRole("region", { name: "Research plan" });
  await expectText(plan, "I want to know everything about the topic");
  const first = await plan.getByRole("textbox", { name: "Topic 1" }).inputValue();
  check(first === "planned topic 0", `the first topic is ${first}`);
  check(await plan.getByRole("textbox", { name: /^Topic/ }).count() === 3, "three topics to review");
  await shot(page, "plan");
  await plan.getByRole("textbox", { name: "Topic 3" }).fill("");
  await plan.getByRole("button", { name: "Approve plan" }).click();
  await expectText(page.getByRole("region", { name: "Report" }), "A verified fact");
  await expectText(page.getByRole("log", { name: "Activity" }), "Plan approved");
  const status = await page.getByRole("status").innerText();
  check(status.includes("2 researchers"), `the edited plan has two topics: ${status}`);
}

/** A reload while the report is being written rejoins the run; then the research is deleted
 * from the history; and the page works on a phone-sized screen. */
async function appRejoin(page) {
  await page.setViewportSize({ width: 390, height: 844 });
  const question = page.getByLabel("Question");
  const box = await question.boundingBox();
  check(box && box.width <= 390, `the question box fits a narrow screen: ${JSON.stringify(box)}`);
  await question.fill("Compare two things");
  await question.press("Enter");
  // The fake model holds the report back for a few seconds: reload in between.
  await expectText(page.getByRole("log", { name: "Activity" }), "writing the report");
  await shot(page, "narrow-running");
  await page.reload();
  await expectText(page.getByRole("log", { name: "Activity" }), "Rejoined the research in progress.");
  await expectText(page.getByRole("region", { name: "Report" }), "A verified fact");
  const status = await page.getByRole("status").innerText();
  check(/^Done · 3 researchers · \d+ searches · [1-9]\d* pages read/.test(status), `status after rejoining: ${status}`);
  const log = await page.getByRole("log", { name: "Activity" }).innerText();
  check(log.includes("Brief:") && log.includes("Researcher 1: searching"), `the progress is drawn again: ${log}`);
  check(await page.getByRole("region", { name: "Clarification" }).count() === 0, "a question is shown beside the report");
  await shot(page, "narrow-rejoined");
  // Deleting takes two clicks and takes the research away.
  const history = page.getByRole("navigation", { name: "History" });
  await history.getByRole("button", { name: "Delete: Compare two things" }).click();
  await history.getByRole("button", { name: "Confirm delete: Compare two things" }).click();
  await page.waitForFunction(() => !document.querySelector("#history-list li"), null, { timeout: TIMEOUT });
  check(await page.getByRole("region", { name: "Report" }).count() === 0, "the deleted report is still shown");
  check(!page.url().includes("#thread="), `the address still names the deleted thread: ${page.url()}`);
}

/** A question on the report: answered under it from the report's sources, the report kept in
 * view; the exchange is the thread's, so a reload shows it again. */
async function appFollowUp(page) {
  await page.context().route(/example\.com/, (route) =>
    route.fulfill({ contentType: "text/html", body: "<title>a source</title><p>a source page</p>" }),
  );
  const question = page.getByLabel("Question");
  await question.fill("What is known about battery costs?");
  await question.press("Enter");
  const report = page.getByRole("region", { name: "Report" });
  await expectText(report, "A verified fact");
  const questions = page.getByRole("region", { name: "Follow-ups" });
  const ask = questions.getByLabel("Ask about this report");
  await ask.fill("What is the overview of subtopic number 0?");
  await ask.press("Enter");
  const answer = questions.getByRole("group", { name: "Answer" });
  await expectText(answer, "Paragraph 1 of a page about");
  await expectText(questions.getByRole("group", { name: "Asked" }), "What is the overview of subtopic number 0?");
  check((await report.innerText()).includes("A verified fact"), "the report stays beside its answer");
  await expectText(page.getByRole("log", { name: "Activity" }), "Answered from the report's sources");
  const cited = answer.getByRole("link", { name: /^Source 1:/ });
  check((await cited.getAttribute("href")).includes("example.com"), "the answer's citation links its source");
  await shot(page, "follow-up");
  await page.reload();
  await expectText(page.getByRole("group", { name: "Answer" }), "Paragraph 1 of a page about");
  // Run again: the question researched again on the thread, the report ending with what
  // changed since the first.
  await page.getByRole("button", { name: "Run again", exact: true }).click();
  await expectText(page.getByRole("log", { name: "Activity" }), "Running the question again");
  await expectText(page.getByRole("region", { name: "Report" }), "What changed since");
  check(!(await page.getByRole("group", { name: "Asked" }).count()), "the new report has no follow-ups yet");
  await shot(page, "what-changed");
}

const scenarios = {
  async "app-follow-up"(page) {
    await appFollowUp(page);
  },
  async "app-rejoin"(page) {
    await appRejoin(page);
  },
  async "app-research"(page, url) {
    await appResearch(page, url, null);
  },
  async "app-research-keyed"(page, url) {
    await appResearch(page, url, args.key);
  },
  async "app-plan-review"(page) {
    await appPlanReview(page);
  },
  // clarify → reply → report, on @langchain/react
  async "react-research"(page, url) {
    await send(page, "Tell me about batteries, it is vague");
    await waitForMessage(page, "Which aspect do you mean?");
    await send(page, "Their costs, please.");
    await waitForReport(page);
    const messages = await texts(page, "message");
    check(messages[0].includes("batteries"), `first message: ${messages[0]}`);
    check(messages.some((m) => m.includes("# Report")), `no report message in ${messages}`);
    check(new Set(messages).size === messages.length, `a message shows twice: ${messages}`);
    check(
      !messages.some((m) => m.includes("Reflection recorded")),
      `the supervisor's internal turns are not the conversation: ${messages}`,
    );
    // reloaded with the thread's id, the page shows the conversation again (GET /state)
    const thread = await page.getByTestId("thread").innerText();
    await page.goto(`${url}&thread=${thread}`);
    await waitForMessage(page, "# Report");
    const again = await texts(page, "message");
    // What the stream showed is what the thread keeps: the report as checked (citations the
    // check removed, sentences no source supports), not as the model streamed it.
    check(
      JSON.stringify(again) === JSON.stringify(messages),
      `the conversation changed on reload:\nlive: ${JSON.stringify(messages)}\nreloaded: ${JSON.stringify(again)}`,
    );
  },
  // the same conversation with useStream's WebSocket transport: one socket for commands and
  // events (GET /threads/{id}/stream/events)
  async "react-research-ws"(page, url) {
    await scenarios["react-research"](page, url);
  },
  // plan review shown on @langchain/react and approved from the page
  async "react-plan-review"(page) {
    await send(page, "Compare two things");
    const asked = await waitForInterrupt(page);
    check(asked.type === "plan_review", `interrupt: ${JSON.stringify(asked)}`);
    check(asked.topics.length === 3, `topics: ${asked.topics}`);
    check(Number(await page.getByTestId("report-length").innerText()) === 0, "reported early");
    await answer(page, { action: "approve" });
    await waitForReport(page);
  },
  // the hitl graph's interrupt on @langchain/react, answered with respond()
  async "react-hitl"(page) {
    await send(page, "hi");
    const asked = await waitForInterrupt(page);
    check(asked.question === "Approve?", `interrupt: ${JSON.stringify(asked)}`);
    await answer(page, "yes");
    await waitForMessage(page, "Hello there, I am a fake model.");
    await waitForMessage(page, "answer: yes");
  },
  // the classic useStream (runs API): interrupt shown, resumed with command.resume
  async "classic-hitl"(page) {
    await send(page, "hi");
    const asked = await waitForInterrupt(page);
    check(asked.question === "Approve?", `interrupt: ${JSON.stringify(asked)}`);
    await answer(page, "yes");
    await waitForMessage(page, "answer: yes");
    await waitForMessage(page, "Hello there, I am a fake model.");
  },
};

async function main() {
  const scenario = scenarios[args.scenario];
  if (!scenario) throw new Error(`unknown scenario ${args.scenario}`);
  const [pageName, assistant, config, transport] = {
    "app-research": ["app"],
    "app-rejoin": ["app"],
    "app-follow-up": ["app"],
    "app-research-keyed": ["app"],
    "app-plan-review": ["app"],
    "react-research": ["react", "deep_research"],
    "react-research-ws": ["react", "deep_research", null, "websocket"],
    "react-plan-review": ["react", "deep_research", { configurable: { review_plan: true } }],
    "react-hitl": ["react", "hitl"],
    "classic-hitl": ["classic", "hitl"],
  }[args.scenario];
  const server = await serve();
  const browser = await chromium.launch({
    executablePath: process.env.DR_CHROMIUM || "/usr/bin/chromium",
    // The machine's network is closed: Chromium's own background traffic only fails.
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  const page = await browser.newPage();
  const log = [];
  page.on("console", (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
  page.on("request", (r) => log.push(`${r.method()} ${r.url()}`));
  const sockets = [];
  page.on("websocket", (ws) => {
    sockets.push(ws.url());
    log.push(`WEBSOCKET ${ws.url()}`);
  });
  const query = new URLSearchParams({ api: args.api, assistant });
  if (config) query.set("config", JSON.stringify(config));
  if (transport) query.set("transport", transport);
  // The app is the service's own page; the others are served from dist/.
  const app = pageName === "app";
  const url = app ? `${args.api}/` : `http://127.0.0.1:${server.address().port}/${pageName}.html?${query}`;
  try {
    await page.goto(url);
    await scenario(page, url);
    const error = app ? [] : await texts(page, "error");
    check(error.length === 0, `the page shows an error: ${error}`);
    if (transport === "websocket") {
      check(
        sockets.some((u) => u.endsWith("/stream/events")),
        `no socket was opened: ${JSON.stringify(sockets)}`,
      );
      const posted = log.filter((l) => l.startsWith("POST") && l.includes("/stream/events"));
      check(posted.length === 0, `events were read over SSE: ${posted.join(", ")}`);
    }
    if (app) {
      const alert = page.locator("#error");
      if (await alert.isVisible()) throw new Error(`the app shows an error: ${await alert.innerText()}`);
      const problems = log.filter((l) => l.startsWith("console.error") || l.startsWith("pageerror"));
      check(problems.length === 0, `errors in the console: ${problems.join("\n")}`);
    }
    console.log(`ok ${args.scenario}`);
  } catch (e) {
    console.error(`FAILED ${args.scenario}: ${e.message}`);
    console.error(`messages: ${JSON.stringify(await texts(page, "message").catch(() => []))}`);
    console.error(log.slice(-60).join("\n"));
    process.exitCode = 1;
  } finally {
    await browser.close();
    server.close();
  }
}

await main();
