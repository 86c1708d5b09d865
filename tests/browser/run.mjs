// Drives a test page in headless Chromium against a running service.
//   node run.mjs --api <url> --scenario <name>
// Serves dist/ on a free loopback port, opens the page, plays the scenario as a user would
// (typing, clicking) and exits 0 when every step held, 1 with the reason otherwise.
import { createServer } from "node:http";
import { readFileSync, existsSync } from "node:fs";
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

const scenarios = {
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
    check(again[0] === messages[0], `after a reload: ${again}`);
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
  const [pageName, assistant, config] = {
    "react-research": ["react", "deep_research"],
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
  const query = new URLSearchParams({ api: args.api, assistant });
  if (config) query.set("config", JSON.stringify(config));
  const url = `http://127.0.0.1:${server.address().port}/${pageName}.html?${query}`;
  try {
    await page.goto(url);
    await scenario(page, url);
    const error = await texts(page, "error");
    check(error.length === 0, `the page shows an error: ${error}`);
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
