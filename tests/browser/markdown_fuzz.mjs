// Hostile input for the research page's Markdown renderer (src/api/web/markdown.js).
//   node tests/browser/markdown_fuzz.mjs [--seed N] [--count N] [--renderer path]
// The report it renders comes from a model quoting the pages it read, so any text can reach it.
// First the inputs that once froze or crashed the page, then generated ones (a seeded PRNG, so
// a failure reproduces with the same --seed). Each must render within its time, without
// throwing, to HTML holding only the renderer's own tags and safe links. Exits 1 with the
// failing input on the first failure. Node's standard library only: no npm install needed.
import vm from "node:vm";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, arg, i, all) => {
    if (arg.startsWith("--")) pairs.push([arg.slice(2), all[i + 1]]);
    return pairs;
  }, []),
);
const RENDERER = args.renderer ?? fileURLToPath(new URL("../../src/api/web/markdown.js", import.meta.url));
const SEED = Number(args.seed ?? 20240611);
// The whole run took 18 s on a 2-core machine with a build beside it: a machine three times
// slower still stays under a minute.
const COUNT = Number(args.count ?? 150_000);
const LARGE_COUNT = 100;

/** The CPU time allowed for one input: 50 ms and 5 µs a character (60 ms for 2 KB, about 1 s
 * for 200 KB). The renderer needs a tenth of that; work that grows with the square of the
 * length needs far more (the old one took half a second for 20,000 `[`, two for 50,000
 * backticks). Time is the process's CPU time, not the clock's: on a CI machine running
 * Chromium beside this, a 1,219-character input that needs 0.2 ms took 70 ms by the clock on
 * six tries, the process waiting for a core. An input over its time is still tried again
 * after growing pauses (0.1 s to 1.6 s) and judged by its fastest try (a garbage collection
 * can land on any one input), while work that grows with the square of the length is slow on
 * every try. */
const limitFor = (input) => 50 + input.length / 200;
const RETRY_PAUSES_MS = [100, 200, 400, 800, 1600];
/** The process's CPU time so far, in ms (user and system). */
const cpuMs = () => {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
};
const pause = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
// A batch still running after this is stopped: something in it does not end.
const BATCH_TIMEOUT_MS = 3_000;

// ---------------------------------------------------------------------------------------------
// The renderer, in a context of its own

/** Loads the renderer as the page does (a classic script) to check the globals app.js calls,
 * then again inside a function, where its functions are locals: a vm context's globals are
 * slow to reach, which would slow every call. Returns run(inputs, timeoutMs). */
function load(file) {
  const source = readFileSync(file, "utf8");
  const page = vm.createContext({});
  vm.runInContext(source, page, { filename: file });
  for (const name of ["renderMarkdown", "citedSources", "escapeHtml"]) {
    if (typeof page[name] !== "function") fail(`${file} defines no global ${name}`, "");
  }
  const context = vm.createContext({ now: cpuMs });
  vm.runInContext(
    `const md = (function () {\n${source}\nreturn { renderMarkdown, citedSources };\n})();
     globalThis.runBatch = (inputs) => inputs.map((input) => {
       const start = now();
       try {
         const html = md.renderMarkdown(input, md.citedSources(input));
         return { ms: now() - start, html };
       } catch (e) {
         return { ms: now() - start, error: String((e && e.stack) || e) };
       }
     });`,
    context,
    { filename: file },
  );
  const script = new vm.Script("runBatch(inputs)");
  return (inputs, timeoutMs) => {
    context.inputs = inputs;
    try {
      return script.runInContext(context, { timeout: timeoutMs });
    } catch (e) {
      return null; // stopped: it ran past timeoutMs
    } finally {
      context.inputs = null;
    }
  };
}

// ---------------------------------------------------------------------------------------------
// What the HTML may hold

/** Each tag the renderer makes, with the attributes it gives it. */
const TAGS = {
  p: [], h3: [], h4: [], h5: [], h6: [], strong: [], em: [], code: [], pre: [], hr: [],
  blockquote: [], ol: [], ul: ["class"], li: ["id"], table: [], thead: [], tbody: [], tr: [],
  th: ["scope"], td: [], a: ["href", "target", "rel", "class", "aria-label", "title"],
};
const TAG = /<(\/?)([a-z0-9]+)((?:\s[a-z-]+="[^"<>]*")*)>/y;
const ATTRIBUTE = /\s([a-z-]+)="([^"]*)"/g;
const SAFE_HREF = /^(https?:|file:|mailto:)/i;
/** Between tags: what escaping turns into entities, and an & that starts none of them. */
const UNESCAPED = /[<>"']|&(?!amp;|lt;|gt;|quot;|#39;)/;
const unescape = (s) => s.replace(/&lt;|&gt;|&quot;|&#39;|&amp;/g, (e) => ({ "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'", "&amp;": "&" })[e]);

/** What is wrong with the HTML, or null: a tag or attribute the renderer does not make, a link
 * to another scheme, or a character of the input left unescaped. */
function problemIn(html) {
  let last = 0;
  for (let at = html.indexOf("<"); ; at = html.indexOf("<", last)) {
    const text = html.slice(last, at === -1 ? html.length : at);
    const raw = text.match(UNESCAPED);
    if (raw) return `an unescaped ${raw[0]} in the text near: ${text.slice(Math.max(0, raw.index - 30), raw.index + 30)}`;
    if (at === -1) return null;
    TAG.lastIndex = at;
    const tag = TAG.exec(html);
    if (!tag) return `a "<" that starts no tag the renderer makes: ${html.slice(at, at + 60)}`;
    const [whole, closing, name, attributes] = tag;
    if (!Object.hasOwn(TAGS, name)) return `the tag <${name}>`;
    if (closing && attributes) return `attributes on a closing tag: ${whole}`;
    for (const [, attribute, value] of attributes.matchAll(ATTRIBUTE)) {
      if (!TAGS[name].includes(attribute)) return `the attribute ${attribute} on <${name}>`;
      if (attribute === "href" && !SAFE_HREF.test(unescape(value))) return `the link ${value}`;
    }
    last = at + whole.length;
  }
}

// ---------------------------------------------------------------------------------------------
// Checking inputs

function fail(reason, input) {
  const shown = JSON.stringify(input.length > 300 ? `${input.slice(0, 300)}…` : input);
  console.error(`markdown_fuzz FAILED (seed ${SEED}): ${reason}\n  input (${input.length} characters): ${shown}`);
  process.exit(1);
}

/** Renders the inputs in one batch; any input that fails is reported (named by `label(i)`) and
 * the run ends. Returns the longest CPU time one took. */
function check(run, inputs, label) {
  let results = run(inputs, BATCH_TIMEOUT_MS);
  if (!results) {
    // Something in the batch did not end: find which, each on its own with a short timeout.
    inputs.forEach((input, i) => {
      const stop = 4 * limitFor(input);
      if (!run([input], stop)) fail(`${label(i)}: still running after ${stop.toFixed(0)} ms (stopped)`, input);
    });
    results = run(inputs, 10 * BATCH_TIMEOUT_MS);
    if (!results) fail(`the batch from ${label(0)} (${inputs.length} inputs) did not end, though each input alone did`, inputs.join("\n"));
  }
  let slowest = 0;
  results.forEach((result, i) => {
    const input = inputs[i];
    const limit = limitFor(input);
    if (result.error) fail(`${label(i)}: threw ${result.error.split("\n").slice(0, 3).join(" / ")}`, input);
    let ms = result.ms;
    for (const wait of RETRY_PAUSES_MS) {
      if (ms <= limit) break;
      pause(wait);
      const again = run([input], 4 * limit);
      if (again) ms = Math.min(ms, again[0].ms);
    }
    if (ms > limit) fail(`${label(i)}: took ${ms.toFixed(0)} ms of CPU (allowed ${limit.toFixed(0)} ms)`, input);
    const problem = problemIn(result.html);
    if (problem) fail(`${label(i)}: ${problem}`, input);
    slowest = Math.max(slowest, ms);
  });
  return slowest;
}

// ---------------------------------------------------------------------------------------------
// The inputs

/** The inputs that once froze, crashed or slowed the page, and their kin. */
const FIXED = {
  "a table row without a separator": "| a |",
  "a table row then text": "| a |\nand then text",
  "text, a table row, text": "text\n| a |\nmore text",
  "3,000 >": ">".repeat(3_000),
  "100,000 >": ">".repeat(100_000),
  "50,000 '> '": "> ".repeat(50_000),
  "20,000 [": "[".repeat(20_000),
  "200,000 [": "[".repeat(200_000),
  "50,000 ![": "![".repeat(50_000),
  "50,000 ** after a word": `a ${"**".repeat(50_000)}`,
  "50,000 ** (a rule)": "**".repeat(50_000),
  "50,000 backticks after a word": `a ${"`".repeat(50_000)}`,
  "50,000 backticks (a fence)": "`".repeat(50_000),
  "50,000 `x": `a ${"`x".repeat(50_000)}`,
  "20,000 [a](": "[a](".repeat(20_000),
  "30,000 [1](": "[1](".repeat(30_000),
  "20,000 <http://": "<http://".repeat(20_000),
  "100,000 <": `a ${"<".repeat(100_000)}`,
  "deeply nested list": Array.from({ length: 1_000 }, (_, i) => `${" ".repeat(i)}- item ${i}`).join("\n"),
  "list of lists on one line": `${"- ".repeat(20_000)}x`,
  "quotes and lists nested": Array.from({ length: 2_000 }, (_, i) => `${"> - ".repeat(i % 40)}x`).join("\n"),
  "10,000 pipes": "|".repeat(10_000),
  "10,000 pipes as a table": `${"|".repeat(10_000)}\n|---|\n${"| a ".repeat(5_000)}|`,
  "a huge citation range": "[100000000000000000000-100000000000000000001]",
  "a reference with U+2028": "[1] a\u2028b",
  "a list item with U+2028 after spaces": `- ${" ".repeat(20_000)}a\u2028b`,
  "a heading with a run of spaces": `# a${" ".repeat(50_000)}b`,
  "a heading with a run of #": `# a${"#".repeat(50_000)}b`,
  "100,000 &": "&".repeat(100_000),
  "script and javascript:": '<script>alert(1)</script> [x](javascript:alert(1)) <javascript:alert(1)> "q" \'a\'',
};

/** A report as the writer makes it, with what each part must become. */
const SAMPLE = [
  "# Findings\n\nBatteries store *energy* in **cells** [1], and `code` too [1, 2].\n\n- one\n- two\n  continued\n\n",
  "> quoted [2]\n\n| k | v |\n|---|---|\n| a | <b> |\n\n```\nx < y\n```\n\n---\n\n",
  "[1] Cells: https://e.example/cells\n[2] More - http://m.example/",
].join("");
const SAMPLE_PARTS = [
  "<h3>Findings</h3>", "<em>energy</em>", "<strong>cells</strong>", "<code>code</code>",
  '<a href="https://e.example/cells" target="_blank" rel="noopener noreferrer" class="cite" aria-label="Source 1: Cells" title="Cells">[1]</a>',
  "<li>two continued</li>", "<blockquote><p>quoted", '<th scope="col">v</th>', "<td>&lt;b&gt;</td>",
  "<pre><code>x &lt; y</code></pre>", "<hr>", '<li id="reference-2">[2] More - <a href="http://m.example/"',
];

/** What generated inputs are made of: Markdown's own marks, words, links, hostile text. */
const PIECES = [
  "\n", "\n", "\n", "\n\n", " ", " ", " ", "  ", "    ", "\t", "#", "# ", "## ", "###### ", "####### ",
  ">", "> ", ">>", "-", "- ", "* ", "+ ", "1. ", "2) ", "---", "***", "_", "*", "**", "|", "| ",
  " |", "|---|", "| --- | :-- |", "`", "``", "```", "```\n", "[", "]", "(", ")", "![", "[1]", "[2]",
  "[1, 2]", "[1-3]", "[2–4]", "[1] ", "[9] ", "[1](", "<", ">", "<http://", "<https://q.example/r>",
  "http://", "https://a.example/b?c=d&e", "file:///tmp/x", "mailto:a@b", "javascript:alert(1)",
  "[t](http://u.example)", "[t](javascript:alert(1))", "[t](", "<script>", "</p>", "<img src=x>",
  "&", "&amp;", '"', "'", ".", ",", ";", ":", "!", "?", "word", "text", "a", "b", "x", "1", "42",
  "\u2028", "\u00a0", "–", "—", "é", "😀", "\\", "\r",
];

/** A PRNG that a seed fixes (mulberry32). */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = (rand, list) => list[Math.floor(rand() * list.length)];

/** Up to about 2 KB of pieces; most inputs are short. */
function smallInput(rand) {
  const length = Math.floor(rand() * rand() * 2_048);
  let input = "";
  while (input.length < length) input += pick(rand, PIECES);
  return input;
}

/** A few pieces repeated to 20–200 KB: runaway work shows on repetition. */
function largeInput(rand) {
  const snippet = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => pick(rand, PIECES)).join("");
  const length = 20_000 + Math.floor(rand() * 180_000);
  const lead = pick(rand, ["", "a ", "- ", "> ", "| ", "# ", "[1] "]);
  return lead + snippet.repeat(Math.ceil(length / snippet.length)).slice(0, length);
}

// ---------------------------------------------------------------------------------------------

const started = performance.now();
const run = load(RENDERER);

const [sample] = run([SAMPLE], BATCH_TIMEOUT_MS) ?? [{}];
for (const part of SAMPLE_PARTS) {
  if (!sample.html?.includes(part)) fail(`the sample report lacks ${part}: ${sample.html ?? sample.error}`, SAMPLE);
}

let slowest = 0;
for (const [name, input] of Object.entries(FIXED)) {
  slowest = Math.max(slowest, check(run, [input], () => name));
}

const rand = prng(SEED);
let characters = 0;
const BATCH = 500;
for (let done = 0; done < COUNT; done += BATCH) {
  const inputs = Array.from({ length: Math.min(BATCH, COUNT - done) }, () => smallInput(rand));
  characters += inputs.reduce((sum, input) => sum + input.length, 0);
  slowest = Math.max(slowest, check(run, inputs, (i) => `generated input ${done + i}`));
}
for (let i = 0; i < LARGE_COUNT; i++) {
  const input = largeInput(rand);
  characters += input.length;
  slowest = Math.max(slowest, check(run, [input], () => `large generated input ${i}`));
}

const seconds = ((performance.now() - started) / 1000).toFixed(1);
console.log(
  `markdown_fuzz passed: ${Object.keys(FIXED).length} fixed inputs and the sample report, ` +
    `${COUNT} generated and ${LARGE_COUNT} large generated (seed ${SEED}, ` +
    `${(characters / 1e6).toFixed(1)} M characters); slowest ${slowest.toFixed(1)} ms of CPU; ${seconds} s`,
);
