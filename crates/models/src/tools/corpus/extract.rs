//! A document's text as sections: HTML, Markdown and plain text. A section is what a search hit
//! points at (a page, or the part of it under one heading, with that heading's anchor), so a
//! report can cite `page.html#anchor` rather than a whole manual.

use scraper::{ElementRef, Html, Node};

/// Sections shorter than this (characters of text) are merged into the next one: a heading
/// with one line under it is not worth a search hit of its own.
const MIN_SECTION_CHARS: usize = 200;

/// A block with at least this many links, most of its text theirs, is navigation.
const LINK_LIST_MIN_LINKS: usize = 4;

/// Elements nested deeper than this are read as plain text (no real page comes close; a
/// hostile one nests tens of thousands).
const MAX_HTML_DEPTH: usize = 128;

/// Plain text is cut into sections of about this many characters, on paragraph boundaries.
const TEXT_SECTION_CHARS: usize = 4000;

/// The kinds of file a corpus indexes, by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Html,
    Markdown,
    /// reStructuredText: sections at its underlined headings.
    Rst,
    Text,
    /// The formats read from bytes (`formats.rs`).
    Pdf,
    Docx,
    Odt,
    Epub,
}

impl Format {
    pub fn of(path: &std::path::Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "html" | "htm" | "xhtml" => Some(Self::Html),
            "md" | "markdown" => Some(Self::Markdown),
            "rst" => Some(Self::Rst),
            "txt" | "text" | "adoc" => Some(Self::Text),
            "pdf" => Some(Self::Pdf),
            "docx" => Some(Self::Docx),
            "odt" => Some(Self::Odt),
            "epub" => Some(Self::Epub),
            _ => None,
        }
    }

    /// Whether files of this format are read as text (the others are binary).
    pub fn is_text(self) -> bool {
        matches!(self, Self::Html | Self::Markdown | Self::Rst | Self::Text)
    }
}

/// One searchable part of a document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The fragment that locates it in its document (`#anchor`), when it has one.
    pub anchor: Option<String>,
    /// The document's title, then the section's heading when it has one.
    pub title: String,
    pub text: String,
}

/// The sections of a document; `fallback_title` names it when it names itself nowhere.
pub fn sections(format: Format, content: &str, fallback_title: &str) -> Vec<Section> {
    let (title, raw) = match format {
        Format::Html => html(content),
        Format::Markdown => markdown(content),
        Format::Rst => rst(content),
        // Binary formats are read by `formats.rs`; their text, if any, as plain text.
        _ => (String::new(), text(content)),
    };
    let title = if title.trim().is_empty() {
        fallback_title.to_owned()
    } else {
        title
    };
    finish(&title, raw)
}

/// A section as read, before titles are joined and small ones merged.
pub(super) struct Raw {
    pub(super) anchor: Option<String>,
    pub(super) heading: String,
    pub(super) text: String,
}

pub(super) fn finish(doc_title: &str, raw: Vec<Raw>) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let mut carry: Option<Raw> = None;
    for mut part in raw {
        if let Some(prev) = carry.take() {
            // The earlier heading covers the later one: keep its anchor and heading.
            let joined = join_text(&[&prev.heading, &prev.text, &part.heading, &part.text]);
            part = Raw {
                anchor: prev.anchor.or(part.anchor),
                heading: prev.heading,
                text: joined,
            };
        }
        if part.text.chars().count() < MIN_SECTION_CHARS {
            carry = Some(part);
            continue;
        }
        out.push(section(doc_title, part));
    }
    if let Some(last) = carry {
        match out.last_mut() {
            Some(prev) if !last.text.trim().is_empty() || !last.heading.is_empty() => {
                prev.text = join_text(&[&prev.text, &last.heading, &last.text]);
            }
            Some(_) => {}
            None if !last.text.trim().is_empty() => out.push(section(doc_title, last)),
            None => {}
        }
    }
    out
}

fn section(doc_title: &str, raw: Raw) -> Section {
    let heading = raw.heading.trim();
    let title = if heading.is_empty() || doc_title.contains(heading) {
        doc_title.to_owned()
    } else {
        format!("{doc_title} — {heading}")
    };
    Section {
        anchor: raw.anchor.filter(|a| !a.is_empty()),
        title,
        text: raw.text,
    }
}

fn join_text(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// HTML

/// Elements whose text is never content.
const SKIPPED: [&str; 10] = [
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "head", "svg",
];

/// Elements that end a line of text.
const BLOCKS: [&str; 24] = [
    "p",
    "div",
    "br",
    "li",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "tr",
    "table",
    "pre",
    "blockquote",
    "section",
    "article",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "hr",
    "figure",
    "caption",
];

/// Navigation, tables of contents and sidebars, whatever tag a generator puts them in.
fn is_chrome(el: &scraper::node::Element) -> bool {
    if el.attr("role") == Some("navigation") {
        return true;
    }
    el.classes().any(|c| {
        let c = c.to_ascii_lowercase();
        c.starts_with("nav")
            || c == "toc"
            || c.contains("sidebar")
            || c.contains("breadcrumb")
            || c == "skip-link"
    })
}

/// Lists and blocks that are mostly links (tables of contents, indexes, "see also" rows of
/// links): they name every topic and hold none, so a query's words find them first.
fn is_link_list(el: ElementRef<'_>) -> bool {
    // Not `div`: a chapter's wrapper holds its table of contents and its opening text both.
    const LISTS: [&str; 4] = ["ul", "ol", "dl", "table"];
    if !LISTS.contains(&el.value().name()) {
        return false;
    }
    let mut links = 0;
    let mut link_chars = 0;
    for a in el
        .descendants()
        .filter_map(ElementRef::wrap)
        .filter(|e| e.value().name() == "a" && e.value().attr("href").is_some())
    {
        links += 1;
        link_chars += a.text().map(|t| t.trim().chars().count()).sum::<usize>();
    }
    if links < LINK_LIST_MIN_LINKS {
        return false;
    }
    let all_chars: usize = el.text().map(|t| t.trim().chars().count()).sum();
    link_chars * 10 >= all_chars * 7
}

/// The text of a heading without the permalink sign generators put after it (`¶`, `§`).
fn heading_text(heading: ElementRef<'_>) -> String {
    collapse(&heading.text().collect::<String>())
        .trim_end_matches(['¶', '§'])
        .trim_end()
        .to_owned()
}

/// A page's title without the site's name: `<title>` is often the page's heading joined to
/// the site's name ("Routine Vacuuming — Example 3.1 documentation", "Site | Page"), which
/// every page shares.
fn page_title(title: &str, h1: &str) -> String {
    const SEPARATORS: [char; 6] = ['—', '–', '-', '|', '·', ':'];
    let (title, h1) = (title.trim(), h1.trim());
    if h1.is_empty() || title == h1 {
        return title.to_owned();
    }
    // The separator stands apart, as in "Page — Site": "Vacuum-based cleaning" is not
    // "Vacuum" joined to a site called "based cleaning".
    let joined = |rest: &str, at_end: bool| {
        let mut chars: Vec<char> = rest.chars().collect();
        if at_end {
            chars.reverse();
        }
        matches!(chars.as_slice(), [space, sep, ..]
            if space.is_whitespace() && SEPARATORS.contains(sep))
    };
    match (title.strip_prefix(h1), title.strip_suffix(h1)) {
        (Some(rest), _) if joined(rest, false) => h1.to_owned(),
        (_, Some(rest)) if joined(rest, true) => h1.to_owned(),
        _ => title.to_owned(),
    }
}

fn heading_level(name: &str) -> Option<u8> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        _ => None,
    }
}

struct HtmlWalk {
    parts: Vec<Raw>,
    current: Raw,
    /// Inside `<pre>`: keep line breaks and spacing.
    pre: usize,
    /// The first `<h1>` of the content (not one in a header or the navigation).
    first_h1: Option<String>,
}

/// How deep a page may nest the elements that must be closed explicitly. The HTML parser's
/// scope checks walk the stack of open elements at every tag, so its time grows with the
/// square of the nesting: 8,000 nested `<ul><li>` took 14 s to parse. No real page comes near.
pub(super) const MAX_HTML_NESTING: usize = 1000;

/// Void elements and those whose end tag may be left out: a page that never closes its `<p>`s
/// or `<li>`s is not nested by them.
const UNCOUNTED: [&str; 32] = [
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "thead",
    "tbody", "tfoot", "colgroup", "caption", "rp", "rt", "html", "head",
];

/// The deepest nesting of explicitly closed elements in a page, found by a linear scan of its
/// tags (comments, and the contents of `<script>` and `<style>`, passed over). An estimate, on
/// the high side for pages that leave such elements open, which is itself unusual.
pub(super) fn nesting_depth(content: &str) -> usize {
    let lower = content.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let (mut at, mut depth, mut deepest) = (0, 0usize, 0usize);
    while let Some(offset) = lower[at..].find('<') {
        at += offset + 1;
        if lower[at..].starts_with("!--") {
            at = lower[at..]
                .find("-->")
                .map_or(bytes.len(), |end| at + end + 3);
            continue;
        }
        let closing = bytes.get(at) == Some(&b'/');
        let start = at + usize::from(closing);
        let end = lower[start..]
            .find(|c: char| !c.is_ascii_alphanumeric())
            .map_or(bytes.len(), |n| start + n);
        let name = &lower[start..end];
        if name.is_empty() || UNCOUNTED.contains(&name) || name == "body" {
            continue;
        }
        let tag_end = lower[end..].find('>').map_or(bytes.len(), |n| end + n);
        if closing {
            depth = depth.saturating_sub(1);
        } else if !lower[..tag_end].ends_with('/') {
            depth += 1;
            deepest = deepest.max(depth);
            if name == "script" || name == "style" {
                let close = format!("</{name}");
                at = lower[tag_end..]
                    .find(&close)
                    .map_or(bytes.len(), |n| tag_end + n);
                continue;
            }
        }
        at = tag_end;
    }
    deepest
}

pub(super) fn html(content: &str) -> (String, Vec<Raw>) {
    let doc = Html::parse_document(content);
    let root = doc.root_element();
    let title = root
        .descendants()
        .filter_map(ElementRef::wrap)
        .find(|e| e.value().name() == "title")
        .map(|e| collapse(&e.text().collect::<String>()))
        .unwrap_or_default();
    let body = root
        .descendants()
        .filter_map(ElementRef::wrap)
        .find(|e| e.value().name() == "body")
        .unwrap_or(root);
    let mut walk = HtmlWalk {
        parts: Vec::new(),
        current: Raw {
            anchor: None,
            heading: String::new(),
            text: String::new(),
        },
        pre: 0,
        first_h1: None,
    };
    walk.element(body);
    let last = std::mem::replace(
        &mut walk.current,
        Raw {
            anchor: None,
            heading: String::new(),
            text: String::new(),
        },
    );
    walk.parts.push(last);
    let parts = walk
        .parts
        .into_iter()
        .map(|mut p| {
            p.text = tidy(&p.text);
            p
        })
        .filter(|p| !p.text.is_empty() || !p.heading.is_empty())
        .collect();
    let h1 = walk.first_h1.take().unwrap_or_default();
    let title = if title.is_empty() {
        h1
    } else {
        page_title(&title, &h1)
    };
    (title, parts)
}

/// One step of the walk over a page: a node to read, or the end of an element whose closing
/// needs something (a line break after a block, leaving `<pre>`).
enum Step<'a> {
    Visit(ego_tree::NodeRef<'a, Node>, usize),
    Leave { block: bool, pre: bool },
}

impl HtmlWalk {
    /// Walks the element's children in document order with a stack of its own, not the
    /// thread's: a page of 50,000 nested `<span>`s overflowed the stack of the recursive walk
    /// and took the server down at every start.
    fn element(&mut self, el: ElementRef<'_>) {
        let mut steps: Vec<Step<'_>> = el.children().rev().map(|c| Step::Visit(c, 1)).collect();
        while let Some(step) = steps.pop() {
            match step {
                Step::Leave { block, pre } => {
                    if pre {
                        self.pre -= 1;
                    }
                    if block {
                        self.current.text.push('\n');
                    }
                }
                Step::Visit(node, depth) => self.visit(node, depth, &mut steps),
            }
        }
    }

    fn visit<'a>(
        &mut self,
        node: ego_tree::NodeRef<'a, Node>,
        depth: usize,
        steps: &mut Vec<Step<'a>>,
    ) {
        match node.value() {
            Node::Text(t) => {
                if self.pre > 0 {
                    self.current.text.push_str(t);
                } else {
                    self.current.text.push_str(&collapse_keep_edges(t));
                }
            }
            Node::Element(e) => {
                let Some(el) = ElementRef::wrap(node) else {
                    return;
                };
                let name = e.name();
                // Past this depth no page is laid out by its tags any more: read the rest as
                // plain text, so each deeper element costs no check of its descendants.
                if depth > MAX_HTML_DEPTH {
                    self.current.text.push(' ');
                    self.current
                        .text
                        .push_str(&collapse(&el.text().collect::<String>()));
                    return;
                }
                if SKIPPED.contains(&name) || is_chrome(e) || is_link_list(el) {
                    return;
                }
                if let Some(level) = heading_level(name) {
                    if level == 1 && self.first_h1.is_none() {
                        self.first_h1 = Some(heading_text(el));
                    }
                    self.start_section(el);
                    return;
                }
                let block = BLOCKS.contains(&name);
                if block {
                    self.current.text.push('\n');
                } else if matches!(name, "td" | "th") {
                    self.current.text.push_str(" | ");
                }
                let pre = name == "pre";
                if pre {
                    self.pre += 1;
                }
                steps.push(Step::Leave { block, pre });
                steps.extend(node.children().rev().map(|c| Step::Visit(c, depth + 1)));
            }
            _ => {}
        }
    }

    fn start_section(&mut self, heading: ElementRef<'_>) {
        let text = heading_text(heading);
        let anchor = anchor_of(heading);
        let next = Raw {
            anchor,
            heading: text,
            text: String::new(),
        };
        let done = std::mem::replace(&mut self.current, next);
        self.parts.push(done);
    }
}

/// The fragment that lands on a heading: its own id, an anchor inside it, or the id of the
/// element it heads (DocBook and many generators put the id on the enclosing section).
fn anchor_of(heading: ElementRef<'_>) -> Option<String> {
    if let Some(id) = heading.value().id() {
        return Some(id.to_owned());
    }
    let inner = heading
        .descendants()
        .filter_map(ElementRef::wrap)
        .find_map(|e| e.value().id().or_else(|| e.value().attr("name")));
    if let Some(id) = inner {
        return Some(id.to_owned());
    }
    // A few levels up: the enclosing section is near, and a walk to the root from every
    // heading of a deeply nested page would be quadratic.
    heading
        .ancestors()
        .take(8)
        .filter_map(ElementRef::wrap)
        .take_while(|e| e.value().name() != "body")
        .find_map(|e| e.value().id())
        .map(str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Markdown and text

fn markdown(content: &str) -> (String, Vec<Raw>) {
    let mut title = String::new();
    let mut parts = Vec::new();
    let mut current = Raw {
        anchor: None,
        heading: String::new(),
        text: String::new(),
    };
    let mut fenced = false;
    for line in content.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
        }
        let hashes = trimmed.chars().take_while(|c| *c == '#').count();
        let is_heading = !fenced
            && (1..=6).contains(&hashes)
            && trimmed[hashes..].starts_with(' ')
            && !line.starts_with("    ");
        if is_heading {
            let heading = trimmed[hashes..].trim().trim_end_matches('#').trim();
            if hashes == 1 && title.is_empty() {
                title = heading.to_owned();
            }
            let next = Raw {
                anchor: Some(slug(heading)),
                heading: heading.to_owned(),
                text: String::new(),
            };
            parts.push(std::mem::replace(&mut current, next));
        } else {
            current.text.push_str(line);
            current.text.push('\n');
        }
    }
    parts.push(current);
    (title, tidied(parts))
}

/// Anchors for a document's headings, a repeated one numbered as GitHub numbers them
/// (`examples`, `examples-1`): two sections under one name would be one location.
#[derive(Default)]
pub(super) struct Anchors(std::collections::HashMap<String, usize>);

impl Anchors {
    pub(super) fn of(&mut self, heading: &str) -> String {
        let base = slug(heading);
        let seen = self.0.entry(base.clone()).or_insert(0);
        *seen += 1;
        if *seen == 1 {
            base
        } else {
            format!("{base}-{}", *seen - 1)
        }
    }
}

/// The parts with their text tidied, empty ones (no text, no heading) left out.
fn tidied(parts: Vec<Raw>) -> Vec<Raw> {
    parts
        .into_iter()
        .map(|mut p| {
            p.text = tidy(&p.text);
            p
        })
        .filter(|p| !p.text.is_empty() || !p.heading.is_empty())
        .collect()
}

/// The anchor GitHub and most Markdown renderers give a heading.
pub fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// reStructuredText: a heading is a line underlined (and perhaps overlined) with one
/// punctuation character repeated at least as long as it; the first is the title.
fn rst(content: &str) -> (String, Vec<Raw>) {
    let lines: Vec<&str> = content.lines().collect();
    let mut anchors = Anchors::default();
    let mut title = String::new();
    let mut parts = Vec::new();
    let mut current = Raw {
        anchor: None,
        heading: String::new(),
        text: String::new(),
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let under = lines.get(i + 1).map_or("", |l| l.trim_end());
        if !line.trim().is_empty()
            && !is_rst_rule(line)
            && is_rst_rule(under)
            && under.chars().count() >= line.trim().chars().count()
        {
            let heading = line.trim().to_owned();
            if title.is_empty() {
                title = heading.clone();
            }
            let next = Raw {
                anchor: Some(anchors.of(&heading)),
                heading,
                text: String::new(),
            };
            parts.push(std::mem::replace(&mut current, next));
            i += 2;
            continue;
        }
        // An overline belongs to the heading under it.
        if !(is_rst_rule(line) && lines.get(i + 2).is_some_and(|l| l.trim_end() == line)) {
            current.text.push_str(line);
            current.text.push('\n');
        }
        i += 1;
    }
    parts.push(current);
    (title, tidied(parts))
}

/// A line of one punctuation character repeated (at least three times).
fn is_rst_rule(line: &str) -> bool {
    let mut chars = line.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    "=-~^\"'`#*+_:.".contains(first) && line.chars().count() >= 3 && chars.all(|c| c == first)
}

fn text(content: &str) -> Vec<Raw> {
    let mut parts = Vec::new();
    let mut current = String::new();
    for para in content.split("\n\n") {
        if current.chars().count() + para.chars().count() > TEXT_SECTION_CHARS
            && !current.is_empty()
        {
            parts.push(std::mem::take(&mut current));
        }
        current.push_str(para);
        current.push_str("\n\n");
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|t| Raw {
            anchor: None,
            heading: String::new(),
            text: tidy(&t),
        })
        .filter(|p| !p.text.is_empty())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Whitespace

/// Runs of whitespace as one space.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Like `collapse`, but a text node that starts or ends with whitespace keeps one space there
/// (`a <b>bold</b> word` must not become `aboldword`).
fn collapse_keep_edges(text: &str) -> String {
    let inner = collapse(text);
    if inner.is_empty() {
        return if text.is_empty() {
            String::new()
        } else {
            " ".into()
        };
    }
    let lead = if text.starts_with(char::is_whitespace) {
        " "
    } else {
        ""
    };
    let trail = if text.ends_with(char::is_whitespace) {
        " "
    } else {
        ""
    };
    format!("{lead}{inner}{trail}")
}

/// Trims every line, drops blank runs to one blank line, and strips trailing spaces.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim();
        let line = line.trim_start_matches("| ").trim_end_matches(" |").trim();
        if line.is_empty() || line == "|" {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
