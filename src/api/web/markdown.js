// The research page's Markdown renderer: the report, as the report writer produces it, to HTML.
// A classic script loaded before app.js, so its functions are globals app.js calls; Node runs
// it the same way (tests/browser/markdown_fuzz.mjs, with node:vm). The report comes from a model
// and quotes the pages it read, so the input is hostile: everything is escaped, only the tags
// made here reach the page, and every step takes time linear in the input's length.
"use strict";

const SAFE_SCHEMES = /^(https?:|file:|mailto:)/i;

/** How deep quotes nest; deeper, `>` is text. Each level renders its lines again in a call of
 * its own, so without a bound 3,000 `>` overflowed the stack. */
const MAX_QUOTE_DEPTH = 8;

const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ENTITIES[c]);
}

// The `s` flag on the line patterns lets `.` match U+2028 and U+2029 as well. Without it a line
// holding one backtracked through its spaces (a long line took seconds) and then did not match
// here, though `isReference` had passed it: the page threw.
const REFERENCE = /^\s*\[(\d+)\]\s+(.*)$/s;

/** The report's own numbered list: number → {title, url}. */
function citedSources(markdown) {
  const map = new Map();
  for (const line of markdown.split("\n")) {
    const m = line.match(REFERENCE);
    if (!m) continue;
    const words = m[2].trim().split(/\s+/);
    const url = words.reverse().find((w) => w.includes("://"));
    if (!url) continue;
    const title = m[2].slice(0, m[2].lastIndexOf(url)).trim().replace(/[:\-—]\s*$/, "").trim();
    map.set(Number(m[1]), { url, title: title || url });
  }
  return map;
}

function link(url, html, extra = "") {
  if (!SAFE_SCHEMES.test(url)) return html;
  return `<a href="${escapeHtml(url)}" target="_blank" rel="noopener noreferrer"${extra}>${html}</a>`;
}

function emphasis(html) {
  return html
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*([^*\s][^*]*?)\*(?![\w*])/g, "$1<em>$2</em>");
}

/** At most this many numbers come from one range such as [3-7]. */
const MAX_RANGE = 20;

function citationLinks(inside, cited) {
  const numbers = [];
  for (const part of inside.split(/[,;]/)) {
    const range = part.trim().match(/^(\d+)\s*[-–]\s*(\d+)$/);
    // Counted, not compared: past 2^53 `n++` leaves n as it was, and the loop never ended.
    if (!range) numbers.push(Number(part.trim()));
    else for (let n = Number(range[1]), k = 0; n <= Number(range[2]) && k < MAX_RANGE; n++, k++) numbers.push(n);
  }
  return numbers.map((n) => {
    const s = cited.get(n);
    if (!s) return `[${n}]`;
    return link(s.url, `[${n}]`, ` class="cite" aria-label="Source ${n}: ${escapeHtml(s.title)}" title="${escapeHtml(s.title)}"`);
  }).join("");
}

// ---------------------------------------------------------------------------------------------
// Inline: code spans, links, citations and addresses, read in one pass from left to right.
//
// A regular expression tried at every `[` or backtick searched to the end of the text each time
// it failed (20,000 `[` took seconds). Here each search for a closing character remembers its
// answer, and the positions asked for only grow, so every stretch of text is searched once.

/** The first index at or after `start` where `pattern` (a /g pattern) matches, -1 for none;
 * the last answer is remembered. */
function searcher(text, pattern) {
  let from = Infinity;
  let found = -1;
  return (start) => {
    // Nothing matches between `from` and `found`: any start in between has the same answer.
    if (start < from || (found !== -1 && start > found)) {
      pattern.lastIndex = start;
      const m = pattern.exec(text);
      from = start;
      found = m ? m.index : -1;
    }
    return found;
  };
}

// Shared by every search: each sets lastIndex just before it runs.
const CLOSE_BRACKET = /\]/g;
const URL_END = /[)\s]/g;
const ANGLE_END = /[>\s]/g;
const BARE_END = /[\s<>()\]]/g;
const BACKTICK = /`/g;
const NOT_BACKTICK = /[^`]/g;

/** The searches one text needs, one each so that each is asked in growing order. */
function searchers(text) {
  return {
    closeBracket: searcher(text, CLOSE_BRACKET),
    urlEnd: searcher(text, URL_END),
    angleEnd: searcher(text, ANGLE_END),
    bareEnd: searcher(text, BARE_END),
    backtick: searcher(text, BACKTICK),
    openRunEnd: searcher(text, NOT_BACKTICK),
    closeRunEnd: searcher(text, NOT_BACKTICK),
  };
}

/** The length of the `http://`, `https://` or `file://` at `at`, or 0. */
function schemeAt(text, at) {
  for (const scheme of ["http://", "https://", "file://"]) if (text.startsWith(scheme, at)) return scheme.length;
  return 0;
}

/** `code` at p: the backticks from p, then text, then at least as many backticks. */
function codeSpanAt(text, p, find) {
  const open = find.openRunEnd(p);
  if (open === -1) return null;
  const close = find.backtick(open);
  if (close === -1) return null;
  const closeEnd = find.closeRunEnd(close);
  if ((closeEnd === -1 ? text.length : closeEnd) - close < open - p) return null;
  return { end: close + (open - p), html: `<code>${escapeHtml(text.slice(open, close))}</code>` };
}

/** [text](url) at p. */
function linkAt(text, p, find) {
  const close = find.closeBracket(p + 1);
  if (close <= p + 1 || text[close + 1] !== "(") return null;
  const end = find.urlEnd(close + 2);
  if (end <= close + 2 || text[end] !== ")") return null;
  return { end: end + 1, html: link(text.slice(close + 2, end), emphasis(escapeHtml(text.slice(p + 1, close)))) };
}

/** [1], [1, 2] or [1-3] at p, not followed by "(". Reads only digits, spaces and separators. */
function citationAt(text, p, cited) {
  const digits = (at) => {
    while (at < text.length && text[at] >= "0" && text[at] <= "9") at++;
    return at;
  };
  const spaces = (at) => {
    while (at < text.length && /\s/.test(text[at])) at++;
    return at;
  };
  let at = digits(p + 1);
  if (at === p + 1) return null;
  for (;;) {
    const separator = spaces(at);
    if (!",;–-".includes(text[separator] ?? "x")) break;
    const number = spaces(separator + 1);
    const after = digits(number);
    if (after === number) return null;
    at = after;
  }
  if (text[at] !== "]" || text[at + 1] === "(") return null;
  return { end: at + 1, html: citationLinks(text.slice(p + 1, at), cited) };
}

/** <http://…> at p. */
function angleLinkAt(text, p, find) {
  const start = p + 1 + schemeAt(text, p + 1);
  if (start === p + 1) return null;
  const end = find.angleEnd(start);
  if (end <= start || text[end] !== ">") return null;
  const url = text.slice(p + 1, end);
  return { end: end + 1, html: link(url, escapeHtml(url)) };
}

/** A bare address at p; it stops before trailing punctuation. */
function bareLinkAt(text, p, find) {
  const start = p + schemeAt(text, p);
  if (start === p) return null;
  const stop = find.bareEnd(start);
  let last = (stop === -1 ? text.length : stop) - 1;
  while (last > start && ".,;:!?'\"".includes(text[last])) last--;
  if (last <= start) return null;
  const url = text.slice(p, last + 1);
  return { end: last + 1, html: link(url, escapeHtml(url)) };
}

/** What starts at p, if anything: {end, html}. */
function inlineAt(text, p, find, cited) {
  switch (text[p]) {
    case "`": return codeSpanAt(text, p, find);
    case "[": return linkAt(text, p, find) ?? citationAt(text, p, cited);
    case "<": return angleLinkAt(text, p, find);
    case "h":
    case "f": return bareLinkAt(text, p, find);
    default: return null;
  }
}

function inline(text, cited) {
  const find = searchers(text);
  let out = "";
  let last = 0;
  for (let p = 0; p < text.length;) {
    const token = inlineAt(text, p, find, cited);
    if (!token) {
      p++;
      continue;
    }
    if (p > last) out += emphasis(escapeHtml(text.slice(last, p)));
    out += token.html;
    p = last = token.end;
  }
  return out + emphasis(escapeHtml(text.slice(last)));
}

// ---------------------------------------------------------------------------------------------
// Blocks

const isTableRow = (l) => /^\s*\|.*\|\s*$/s.test(l);
const listItem = (l) => l.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/s);
const isReference = (l) => /^\s*\[\d+\]\s+\S/.test(l);
const isFence = (l) => /^\s*```/.test(l);

/** `## Title ##`: 1 to 6 `#` and a space, then the title without its closing `#`. Read by
 * hand: as one pattern (`\s*#*\s*$` after a lazy title) a long run of spaces or `#` inside
 * the title took for ever. */
function headingOf(line) {
  const marks = line.match(/^(#{1,6})\s/);
  if (!marks) return null;
  const text = line.slice(marks[1].length).trim();
  let end = text.length;
  while (end > 0 && text[end - 1] === "#") end--;
  return { level: marks[1].length, text: text.slice(0, end).trimEnd() };
}

/** A table is a row with a separator line under it; a row alone is text. */
const startsTable = (lines, i) =>
  isTableRow(lines[i]) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}/.test(lines[i + 1]);

/** Markdown as the report writer produces it (headings, paragraphs, lists, quotes, tables,
 * code), to HTML. Everything is escaped first; only the tags made here reach the page. */
function renderMarkdown(markdown, cited) {
  return renderBlocks(markdown.replace(/\r/g, "").split("\n"), cited, 0);
}

/** The lines as blocks, `depth` quotes deep. Every branch consumes at least one line. */
function renderBlocks(lines, cited, depth) {
  const quotes = depth < MAX_QUOTE_DEPTH;
  const html = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isFence(line)) {
      const code = [];
      i++;
      while (i < lines.length && !isFence(lines[i])) code.push(lines[i++]);
      i++;
      html.push(`<pre><code>${escapeHtml(code.join("\n"))}</code></pre>`);
      continue;
    }
    const heading = headingOf(line);
    if (heading) {
      const level = Math.min(heading.level + 2, 6);
      html.push(`<h${level}>${inline(heading.text, cited)}</h${level}>`);
      i++;
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      html.push("<hr>");
      i++;
      continue;
    }
    if (startsTable(lines, i)) {
      i = renderTable(lines, i, cited, html);
      continue;
    }
    if (isReference(line)) {
      i = renderReferences(lines, i, html);
      continue;
    }
    if (listItem(line)) {
      i = renderList(lines, i, cited, html);
      continue;
    }
    if (quotes && /^\s*>/.test(line)) {
      const quote = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quote.push(lines[i++].replace(/^\s*>\s?/, ""));
      html.push(`<blockquote>${renderBlocks(quote, cited, depth + 1)}</blockquote>`);
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    i = renderParagraph(lines, i, cited, quotes, html);
  }
  return html.join("\n");
}

/** The table from its head row at `i`; returns the line after it. */
function renderTable(lines, i, cited, html) {
  const cells = (l) => l.trim().replace(/^\||\|$/g, "").split("|").map((c) => inline(c.trim(), cited));
  const head = cells(lines[i]).map((c) => `<th scope="col">${c}</th>`).join("");
  i += 2;
  const body = [];
  while (i < lines.length && isTableRow(lines[i])) body.push(`<tr>${cells(lines[i++]).map((c) => `<td>${c}</td>`).join("")}</tr>`);
  html.push(`<table><thead><tr>${head}</tr></thead><tbody>${body.join("")}</tbody></table>`);
  return i;
}

/** The report's own list of references ("[1] Title: location"): one entry a line, the
 * location a link; its numbers are not citations. */
function renderReferences(lines, i, html) {
  const entries = [];
  while (i < lines.length && isReference(lines[i])) {
    const [, n, rest] = lines[i++].match(REFERENCE);
    entries.push(`<li id="reference-${n}">[${n}] ${inline(rest, new Map())}</li>`);
  }
  html.push(`<ul class="references">${entries.join("")}</ul>`);
  return i;
}

/** A list; an indented line under an item continues it. */
function renderList(lines, i, cited, html) {
  const ordered = /\d/.test(listItem(lines[i])[1]);
  const items = [];
  while (i < lines.length && listItem(lines[i])) {
    let text = listItem(lines[i])[2];
    i++;
    while (i < lines.length && lines[i].trim() && !listItem(lines[i]) && /^\s+/.test(lines[i])) text += ` ${lines[i++].trim()}`;
    items.push(`<li>${inline(text, cited)}</li>`);
  }
  const tag = ordered ? "ol" : "ul";
  html.push(`<${tag}>${items.join("")}</${tag}>`);
  return i;
}

/** A paragraph: its first line whatever it looks like (no other block took it), then lines up
 * to a blank one or the start of another block. */
function renderParagraph(lines, i, cited, quotes, html) {
  const text = [lines[i++].trim()];
  const ends = (l) =>
    !l.trim() || /^(#{1,6}\s|\s*```|\s*\[\d+\]\s+\S)/.test(l) || (quotes && /^\s*>/.test(l)) || listItem(l);
  while (i < lines.length && !ends(lines[i]) && !startsTable(lines, i)) text.push(lines[i++].trim());
  html.push(`<p>${inline(text.join(" "), cited)}</p>`);
  return i;
}
