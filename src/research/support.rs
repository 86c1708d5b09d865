//! Reports that cite what this run retrieved, checked sentence by sentence.
//!
//! The report writer is shown one numbered list of the run's sources and the findings with
//! their citations already in that numbering (`renumber_findings`). After it writes, `repair`
//! reads every sentence of the body against the sources it cites: a citation to a number not
//! on the list is removed; one the cited text does not support is moved to a source that does,
//! or removed; a claim without a citation gets one when a source supports it. Support is
//! deterministic: the sentence's content words (stemmed) and every number in it must be found
//! in the source's text, each word weighted by how rare it is among the run's sources (a word
//! every source uses says little about which one supports the sentence), and at least one of
//! the words found must be distinctive (in at most half of the sources). The Sources section is then written from the citations that remain,
//! numbered in order of first use, so a report never lists a reference nobody retrieved.

use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use tantivy::tokenizer::{
    Language, LowerCaser, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer, TokenStream,
};

/// Weighted share of a sentence's content words that must be in a source for it to support
/// the sentence.
pub const SUPPORT_THRESHOLD: f64 = 0.6;

/// A sentence with fewer content words than this is not a claim (a heading-like fragment).
const MIN_CLAIM_WORDS: usize = 3;

/// Headings under which a writer lists its references; that section is rewritten.
const SOURCE_HEADINGS: [&str; 7] = [
    "sources",
    "references",
    "bibliography",
    "works cited",
    "citations",
    "sources cited",
    "reference list",
];

/// One source the writer may cite, by its number (1-based) in `Sources::list`.
#[derive(Clone, Debug)]
pub struct Source {
    pub url: String,
    pub title: String,
    /// The text support is checked against; empty for sources without text (a model's own web
    /// search, MCP results): citations to those are kept unchecked.
    text_terms: HashSet<String>,
    numbers: HashSet<String>,
    has_text: bool,
}

/// The run's sources, numbered once, without duplicates.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub list: Vec<Source>,
    by_key: HashMap<String, usize>,
    /// In how many sources with text each word appears.
    document_frequency: HashMap<String, usize>,
    /// How many sources have text.
    with_text: usize,
}

/// A location in a comparable form: the scheme and host lower-cased, no trailing slash. The
/// fragment stays: two sections of one document are two sources.
pub fn source_key(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
            let sep = if path.is_empty() { "" } else { "/" };
            format!(
                "{}://{}{sep}{path}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            )
        }
        None => url.to_owned(),
    }
}

impl Sources {
    /// From the state's `sources` entries (`url`, `title`, `text`), first occurrence first.
    pub fn from_state(entries: &[Value]) -> Self {
        let mut me = Self::default();
        let mut analyzer = analyzer();
        for e in entries {
            let Some(url) = e["url"].as_str().filter(|u| !u.trim().is_empty()) else {
                continue;
            };
            let key = source_key(url);
            if me.by_key.contains_key(&key) {
                continue;
            }
            let text = e["text"].as_str().unwrap_or_default();
            let (text_terms, numbers) = terms(&mut analyzer, text);
            for word in &text_terms {
                *me.document_frequency.entry(word.clone()).or_insert(0) += 1;
            }
            me.with_text += usize::from(!text.trim().is_empty());
            me.by_key.insert(key, me.list.len());
            me.list.push(Source {
                url: url.trim().to_owned(),
                title: e["title"].as_str().unwrap_or_default().trim().to_owned(),
                has_text: !text.trim().is_empty(),
                text_terms,
                numbers,
            });
        }
        me
    }

    /// The number (1-based) of the source at `url`.
    pub fn number_of(&self, url: &str) -> Option<usize> {
        self.by_key.get(&source_key(url)).map(|i| i + 1)
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// How much finding `word` in a source tells: high for a word few sources use, near zero
    /// for one they all use. A word no source has weighs as one a single source has: it is
    /// as often an abbreviation or a synonym ("WAL") as an unsupported detail.
    fn weight(&self, word: &str) -> f64 {
        let df = self
            .document_frequency
            .get(word)
            .copied()
            .unwrap_or(0)
            .max(1) as f64;
        ((self.with_text as f64 + 1.0) / (df + 0.5)).ln()
    }

    /// A word in at most half of the sources (any word, with one or two sources).
    fn is_distinctive(&self, word: &str) -> bool {
        let df = self.document_frequency.get(word).copied().unwrap_or(0);
        df * 2 <= self.with_text.max(2)
    }

    /// The list the writer is shown: `[n] Title — location`, one a line.
    pub fn numbered_list(&self) -> String {
        self.list
            .iter()
            .enumerate()
            .map(|(i, s)| format!("[{}] {} — {}", i + 1, display_title(s), s.url))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn display_title(s: &Source) -> &str {
    if s.title.is_empty() { &s.url } else { &s.title }
}

// ---------------------------------------------------------------------------------------------
// Words

fn analyzer() -> TextAnalyzer {
    let builder = TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser);
    match StopWordFilter::new(Language::English) {
        Some(stop) => builder
            .filter(stop)
            .filter(Stemmer::new(Language::English))
            .build(),
        None => TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(Stemmer::new(Language::English))
            .build(),
    }
}

/// Digits and letters written together ("8kB", "v15") are read as separate words, as "8 kB"
/// would be, and thousands separators go ("1,000" is "1000").
fn spaced(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ','
            && prev.is_some_and(|p| p.is_ascii_digit())
            && chars.peek().is_some_and(|n| n.is_ascii_digit())
        {
            continue;
        }
        if let Some(p) = prev
            && ((p.is_ascii_digit() && c.is_alphabetic())
                || (p.is_alphabetic() && c.is_ascii_digit()))
        {
            out.push(' ');
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

/// The stemmed content words of `text`, and (separately) its numbers.
fn terms(analyzer: &mut TextAnalyzer, text: &str) -> (HashSet<String>, HashSet<String>) {
    let mut words = HashSet::new();
    let mut numbers = HashSet::new();
    let spaced = spaced(text);
    let mut stream = analyzer.token_stream(&spaced);
    while stream.advance() {
        let t = &stream.token().text;
        if t.chars().all(|c| c.is_ascii_digit()) {
            numbers.insert(t.trim_start_matches('0').to_owned());
        } else if t.chars().count() >= 2 {
            words.insert(t.clone());
        }
    }
    (words, numbers)
}

/// A claim's words, in order, with repeats (a repeated word counts once in the score).
struct Claim {
    words: HashSet<String>,
    numbers: HashSet<String>,
}

impl Claim {
    fn of(analyzer: &mut TextAnalyzer, text: &str) -> Self {
        let (words, numbers) = terms(analyzer, text);
        Self { words, numbers }
    }

    fn is_claim(&self) -> bool {
        self.words.len() >= MIN_CLAIM_WORDS
    }

    /// How well `source` supports this claim: the weighted share of its words found there; 0
    /// when a number of the claim is missing from it, or when every word found there is one
    /// most sources use (a generic sentence matches any of them equally badly).
    fn score(&self, source: &Source, sources: &Sources) -> f64 {
        if !source.has_text || self.words.is_empty() {
            return 0.0;
        }
        if !self.numbers.iter().all(|n| source.numbers.contains(n)) {
            return 0.0;
        }
        let (mut found, mut total, mut distinctive) = (0.0, 0.0, false);
        for word in &self.words {
            let weight = sources.weight(word);
            total += weight;
            if source.text_terms.contains(word) {
                found += weight;
                distinctive |= sources.is_distinctive(word);
            }
        }
        if !distinctive || total <= 0.0 {
            return 0.0;
        }
        found / total
    }

    fn supported_by(&self, source: &Source, sources: &Sources) -> bool {
        self.score(source, sources) >= SUPPORT_THRESHOLD
    }

    /// The source that supports the claim best, if any does.
    fn best(&self, sources: &Sources) -> Option<usize> {
        let mut best: Option<(usize, f64)> = None;
        for (i, s) in sources.list.iter().enumerate() {
            let score = self.score(s, sources);
            if score >= SUPPORT_THRESHOLD && best.is_none_or(|(_, b)| score > b) {
                best = Some((i + 1, score));
            }
        }
        best.map(|(n, _)| n)
    }
}

// ---------------------------------------------------------------------------------------------
// Citation markers

/// A run of citation markers (`[1]`, `[2, 3]`, `[4][5]`, `[6-8]`) at `start..end`.
#[derive(Debug, PartialEq, Eq)]
struct Markers {
    start: usize,
    end: usize,
    numbers: Vec<usize>,
}

/// The numbers in one bracket's inside, or `None` when it is not a citation.
fn bracket_numbers(inside: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in inside.split([',', ';']) {
        let part = part.trim();
        if part.is_empty() {
            return None;
        }
        if let Some((a, b)) = part.split_once(['-', '–']) {
            let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            if a > b || b - a > 20 {
                return None;
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().ok()?);
        }
    }
    Some(out)
}

/// Every marker run in `text`; markdown links (`[1](url)`) are not citations.
fn find_markers(text: &str) -> Vec<Markers> {
    let bytes = text.as_bytes();
    let mut found: Vec<Markers> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'[' {
            i += 1;
            continue;
        }
        let Some(close) = text[i + 1..].find(']').map(|c| i + 1 + c) else {
            break;
        };
        let inside = &text[i + 1..close];
        let is_link = bytes.get(close + 1) == Some(&b'(');
        match bracket_numbers(inside).filter(|_| !is_link && inside.len() <= 40) {
            Some(numbers) => {
                match found.last_mut() {
                    // `[1][2]` or `[1] [2]`: one run.
                    Some(prev) if text[prev.end..i].trim().is_empty() => {
                        prev.end = close + 1;
                        prev.numbers.extend(numbers);
                    }
                    _ => found.push(Markers {
                        start: i,
                        end: close + 1,
                        numbers,
                    }),
                }
                i = close + 1;
            }
            None => i += 1,
        }
    }
    found
}

fn strip_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for m in find_markers(text) {
        out.push_str(&text[last..m.start]);
        last = m.end;
    }
    out.push_str(&text[last..]);
    out
}

// ---------------------------------------------------------------------------------------------
// Findings

/// A researcher's findings with their citations in the run's numbering: each note's own
/// `[n] Title: URL` list maps its numbers to sources; numbers it does not map are dropped (the
/// writer must not copy them), and the note's list goes (the writer is shown the run's list).
pub fn renumber_findings(note: &str, sources: &Sources) -> String {
    let mut local: HashMap<usize, usize> = HashMap::new();
    let mut body_lines = Vec::new();
    let mut in_list = false;
    for line in note.lines() {
        if is_sources_heading(line).is_some() {
            in_list = true;
            continue;
        }
        if let Some((n, url)) = list_entry(line)
            && (in_list || line.trim_start().starts_with('['))
        {
            if let Some(global) = sources.number_of(&url) {
                local.insert(n, global);
            }
            continue;
        }
        if in_list && line.trim_start().starts_with('#') {
            in_list = false;
        }
        if !in_list || !line.trim().is_empty() {
            body_lines.push(line);
        }
    }
    let body = body_lines.join("\n");
    let mut out = String::with_capacity(body.len());
    let mut last = 0;
    for m in find_markers(&body) {
        out.push_str(&body[last..m.start]);
        let mapped: Vec<usize> = dedup(m.numbers.iter().filter_map(|n| local.get(n).copied()));
        out.push_str(&render_markers(&mapped));
        last = m.end;
    }
    out.push_str(&body[last..]);
    out.trim().to_owned()
}

/// `[n] Title: URL` (or `n. Title - URL`, `- [n] URL`): the number and the URL.
fn list_entry(line: &str) -> Option<(usize, String)> {
    let line = line.trim().trim_start_matches(['-', '*', ' ']);
    let (n, rest) = if let Some(rest) = line.strip_prefix('[') {
        let (n, rest) = rest.split_once(']')?;
        (n.trim().parse().ok()?, rest)
    } else {
        let digits = line.find(|c: char| !c.is_ascii_digit())?;
        let rest = line[digits..].strip_prefix(['.', ')'])?;
        (line[..digits].parse().ok()?, rest)
    };
    let url = rest
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, '<' | '>' | '(' | ')' | ',' | '.')))
        .find(|w| w.contains("://"))?;
    Some((n, url.to_owned()))
}

fn dedup(numbers: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut seen = HashSet::new();
    numbers.filter(|n| seen.insert(*n)).collect()
}

fn render_markers(numbers: &[usize]) -> String {
    numbers.iter().map(|n| format!("[{n}]")).collect()
}

// ---------------------------------------------------------------------------------------------
// The report

/// What the check found in the report as the model wrote it, and what it changed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SupportCounts {
    /// Body paragraphs (and list items) that make at least one claim.
    pub paragraphs: usize,
    /// Of those, the ones citing a source after the repair.
    pub cited_paragraphs: usize,
    /// Citations as written.
    pub citations: usize,
    /// Citations as written that their source supports.
    pub supported: usize,
    /// Citations as written to sources without text to check (kept).
    pub unchecked: usize,
    /// Unsupported citations moved to a source that supports the sentence.
    pub moved: usize,
    /// Citations removed: to numbers not on the list, or unsupported by any source.
    pub removed: usize,
    /// Citations added to claims that had none, where a source supports them.
    pub attached: usize,
    /// Distinct sources the final report cites (its Sources section).
    pub sources_cited: usize,
}

/// The repaired report and the counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Repaired {
    pub report: String,
    pub counts: SupportCounts,
}

/// A heading that opens a list of references, and its level.
fn is_sources_heading(line: &str) -> Option<usize> {
    let t = line.trim();
    let level = t.chars().take_while(|c| *c == '#').count();
    let name = t[level..]
        .trim()
        .trim_matches(|c: char| c == '*' || c == ':' || c == '_')
        .trim()
        .to_ascii_lowercase();
    let bold = level == 0 && t.starts_with("**");
    let plain = level == 0 && t.ends_with(':') && !t.contains(' ');
    if (level > 0 || bold || plain) && SOURCE_HEADINGS.contains(&name.as_str()) {
        Some(if level == 0 { 7 } else { level })
    } else {
        None
    }
}

/// Wrapper tags a small model copies from the prompt (`<Report>`) on lines of their own.
fn is_stray_tag(line: &str) -> bool {
    let t = line.trim();
    t.len() > 2
        && t.starts_with('<')
        && t.ends_with('>')
        && t[1..t.len() - 1]
            .trim_start_matches('/')
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ')
}

/// A closing paragraph about the report itself ("This report provides…").
fn is_about_itself(paragraph: &str) -> bool {
    let p = paragraph.trim().to_ascii_lowercase();
    let head: String = p.chars().take(80).collect();
    [
        "this report",
        "in this report",
        "the report above",
        "this document",
        "i hope",
    ]
    .iter()
    .any(|s| head.starts_with(s) || head.contains(&format!(" {s} ")))
}

/// The report's lines without stray tags and without the writer's own list of references.
fn body_lines(report: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in report.lines() {
        if is_stray_tag(line) {
            continue;
        }
        if let Some(level) = is_sources_heading(line) {
            skipping = Some(level);
            continue;
        }
        if let Some(level) = skipping {
            let t = line.trim();
            let heading = t.chars().take_while(|c| *c == '#').count();
            if heading > 0 && heading <= level {
                skipping = None;
            } else {
                continue;
            }
        }
        out.push(line);
    }
    out
}

/// The report with each claim's citations checked and repaired, and its Sources section
/// rewritten.
pub fn repair(report: &str, sources: &Sources) -> Repaired {
    let mut analyzer = analyzer();
    let mut counts = SupportCounts::default();
    let lines = body_lines(report);
    let mut blocks = blocks(&lines);
    // The closing paragraph about the report itself goes.
    if let Some(pos) = blocks.iter().rposition(|b| b.kind == BlockKind::Prose)
        && is_about_itself(&blocks[pos].text)
        && blocks[pos + 1..].iter().all(|b| b.text.trim().is_empty())
    {
        blocks.remove(pos);
    }
    for block in &mut blocks {
        if block.kind == BlockKind::Verbatim {
            continue;
        }
        let (text, claims) = repair_block(&block.text, sources, &mut analyzer, &mut counts);
        block.text = text;
        if claims {
            counts.paragraphs += 1;
            if !find_markers(&block.text).is_empty() {
                counts.cited_paragraphs += 1;
            }
        }
    }
    let body = blocks
        .iter()
        .map(|b| b.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let (body, cited) = number_by_first_use(&body);
    counts.sources_cited = cited.len();
    let mut report = body.trim_end().to_owned();
    if !cited.is_empty() {
        report.push_str("\n\n### Sources\n\n");
        let lines: Vec<String> = cited
            .iter()
            .enumerate()
            .filter_map(|(i, n)| {
                let s = sources.list.get(n - 1)?;
                Some(format!("[{}] {}: {}", i + 1, display_title(s), s.url))
            })
            .collect();
        report.push_str(&lines.join("\n"));
        report.push('\n');
    }
    Repaired { report, counts }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockKind {
    /// Paragraphs and list items: claims to check.
    Prose,
    /// Headings, blank lines, code and tables: left as they are.
    Verbatim,
}

struct Block {
    kind: BlockKind,
    text: String,
}

/// Lines grouped into paragraphs (a list item or table row is one of its own), headings, code
/// and blank lines kept as they are.
fn blocks(lines: &[&str]) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut fenced = false;
    for line in lines {
        let t = line.trim();
        if t.starts_with("```") {
            fenced = !fenced;
        }
        // Tables keep their shape: a marker added after a row's last cell would break it.
        let verbatim = fenced
            || t.starts_with("```")
            || t.is_empty()
            || t.starts_with('#')
            || t.starts_with('|')
            || t.starts_with("> Note:");
        let starts_item = t.starts_with(['-', '*', '+', '>'])
            || t.split_once(['.', ')'])
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if verbatim {
            out.push(Block {
                kind: BlockKind::Verbatim,
                text: (*line).to_owned(),
            });
            continue;
        }
        match out.last_mut() {
            Some(prev) if prev.kind == BlockKind::Prose && !starts_item => {
                prev.text.push('\n');
                prev.text.push_str(line);
            }
            _ => out.push(Block {
                kind: BlockKind::Prose,
                text: (*line).to_owned(),
            }),
        }
    }
    out
}

/// The sentences of a block: each ends at `.`, `!` or `?` followed by white space, with the
/// citation markers right after it (`… fact. [1] Next …`) kept with it.
fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let ends = matches!(c, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace())
            // "e.g. " and "1. " inside a sentence are not ends.
            && !text[start..i].ends_with("e.g")
            && !text[start..i].ends_with("i.e")
            && !(i > 0 && bytes[i - 1].is_ascii_digit() && text[start..i].trim().chars().all(|c| c.is_ascii_digit()));
        if ends {
            let mut end = i + 1;
            // Markers after the full stop belong to this sentence.
            let rest = &text[end..];
            let lead = rest.len() - rest.trim_start().len();
            if let Some(m) = find_markers(rest).first().filter(|m| m.start == lead) {
                end += m.end;
            }
            out.push(&text[start..end]);
            start = end;
            i = end;
            continue;
        }
        i += 1;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// One block checked; whether it makes a claim.
fn repair_block(
    text: &str,
    sources: &Sources,
    analyzer: &mut TextAnalyzer,
    counts: &mut SupportCounts,
) -> (String, bool) {
    let mut out = String::with_capacity(text.len() + 16);
    let mut any_claim = false;
    for sentence in sentences(text) {
        let plain = strip_markers(sentence);
        let claim = Claim::of(analyzer, &plain);
        let written: Vec<usize> = dedup(find_markers(sentence).into_iter().flat_map(|m| m.numbers));
        if !claim.is_claim() {
            // Not a claim: its markers are checked only for existence.
            let keep: Vec<usize> = written
                .iter()
                .copied()
                .filter(|n| (1..=sources.len()).contains(n))
                .collect();
            counts.citations += written.len();
            counts.removed += written.len() - keep.len();
            counts.supported += keep.len();
            out.push_str(&with_markers(&plain, &keep));
            continue;
        }
        any_claim = true;
        let mut keep: Vec<usize> = Vec::new();
        for n in &written {
            counts.citations += 1;
            let Some(source) = n.checked_sub(1).and_then(|i| sources.list.get(i)) else {
                counts.removed += 1;
                continue;
            };
            if !source.has_text {
                counts.unchecked += 1;
                keep.push(*n);
            } else if claim.supported_by(source, sources) {
                counts.supported += 1;
                keep.push(*n);
            } else {
                match claim
                    .best(sources)
                    .filter(|b| !written.contains(b) && !keep.contains(b))
                {
                    Some(better) => {
                        counts.moved += 1;
                        keep.push(better);
                    }
                    None => counts.removed += 1,
                }
            }
        }
        if keep.is_empty()
            && let Some(best) = claim.best(sources)
        {
            counts.attached += 1;
            keep.push(best);
        }
        out.push_str(&with_markers(&plain, &dedup(keep.into_iter())));
    }
    (out, any_claim)
}

/// A sentence with its markers before its final punctuation ("… fact [1].").
fn with_markers(sentence: &str, numbers: &[usize]) -> String {
    // `strip_markers` leaves the space that stood before a marker: drop it.
    let lead_len = sentence.len() - sentence.trim_start().len();
    let (lead, core) = sentence.split_at(lead_len);
    let core = tidy_spaces(core.trim_end());
    let trail = &sentence[sentence.trim_end().len()..];
    if numbers.is_empty() {
        return format!("{lead}{core}{trail}");
    }
    let markers = render_markers(numbers);
    let (head, stop) = match core.char_indices().last() {
        Some((i, '.' | '!' | '?' | ':' | ';')) => core.split_at(i),
        _ => (core.as_str(), ""),
    };
    format!("{lead}{} {markers}{stop}{trail}", head.trim_end())
}

/// Doubled spaces and a space before punctuation, which removing markers leaves.
fn tidy_spaces(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == ' ' && out.ends_with(' ') {
            continue;
        }
        if matches!(c, '.' | ',' | ';' | ':' | '!' | '?') && out.ends_with(' ') {
            out.pop();
        }
        out.push(c);
    }
    out
}

/// The body with its citation numbers renumbered 1, 2, 3… in order of first use; the list of
/// original numbers in that order.
fn number_by_first_use(body: &str) -> (String, Vec<usize>) {
    let mut order: Vec<usize> = Vec::new();
    let mut new_number: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = String::with_capacity(body.len());
    let mut last = 0;
    for m in find_markers(body) {
        out.push_str(&body[last..m.start]);
        let renumbered: Vec<usize> = m
            .numbers
            .iter()
            .map(|n| {
                *new_number.entry(*n).or_insert_with(|| {
                    order.push(*n);
                    order.len()
                })
            })
            .collect();
        out.push_str(&render_markers(&dedup(renumbered.into_iter())));
        last = m.end;
    }
    out.push_str(&body[last..]);
    (out, order)
}

/// The counts of `repair` for a finished report, read again from scratch (the evaluation's
/// independent check): every citation in the body against the report's own Sources list.
pub fn audit(report: &str, sources: &Sources) -> SupportCounts {
    // The report's numbers refer to its Sources section: map them to the run's sources.
    let mut by_number: HashMap<usize, usize> = HashMap::new();
    let mut in_list = false;
    for line in report.lines() {
        if is_sources_heading(line).is_some() {
            in_list = true;
            continue;
        }
        if in_list && let Some((n, url)) = list_entry(line) {
            match sources.number_of(&url) {
                Some(global) => by_number.insert(n, global),
                // Cited but never retrieved: no source to check against.
                None => by_number.insert(n, usize::MAX),
            };
        }
    }
    let mut analyzer = analyzer();
    let mut counts = SupportCounts::default();
    let lines = body_lines(report);
    for block in blocks(&lines) {
        if block.kind == BlockKind::Verbatim {
            continue;
        }
        let mut any_claim = false;
        let mut cited = false;
        for sentence in sentences(&block.text) {
            let claim = Claim::of(&mut analyzer, &strip_markers(sentence));
            any_claim |= claim.is_claim();
            for n in find_markers(sentence).into_iter().flat_map(|m| m.numbers) {
                counts.citations += 1;
                cited = true;
                match by_number
                    .get(&n)
                    .and_then(|g| g.checked_sub(1))
                    .and_then(|i| sources.list.get(i))
                {
                    Some(s) if !s.has_text => counts.unchecked += 1,
                    Some(s) if !claim.is_claim() || claim.supported_by(s, sources) => {
                        counts.supported += 1
                    }
                    _ => counts.removed += 1,
                }
            }
        }
        if any_claim {
            counts.paragraphs += 1;
            counts.cited_paragraphs += usize::from(cited);
        }
    }
    counts.sources_cited = by_number.len();
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sources() -> Sources {
        Sources::from_state(&[
            json!({"url": "file:///docs/vacuum.html#basics", "title": "Vacuuming",
                   "text": "VACUUM reclaims storage occupied by dead tuples. The autovacuum daemon runs every 60 seconds by default."}),
            json!({"url": "https://example.org/wal", "title": "WAL",
                   "text": "The write-ahead log records every change before the data files are written; segments are 16 MB."}),
            json!({"url": "https://example.org/wal/", "title": "duplicate"}),
            json!({"url": "https://native.example/page", "title": "Native"}),
        ])
    }

    #[test]
    fn the_list_is_numbered_once_per_location() {
        let s = sources();
        assert_eq!(s.len(), 3);
        assert_eq!(s.number_of("https://EXAMPLE.org/wal/"), Some(2));
        assert!(
            s.numbered_list()
                .starts_with("[1] Vacuuming — file:///docs/vacuum.html#basics\n[2] WAL")
        );
    }

    #[test]
    fn supported_citations_stay_and_the_sources_section_is_rewritten() {
        let report = "<Report>\n# Maintenance\n\nVACUUM reclaims the storage held by dead tuples [1]. \
                      The write-ahead log records every change before data files are written [2].\n\n\
                      ### Sources\n[1] Energy Efficiency Institute (2025)\n[2] National Lab: https://invented.example\n</Report>";
        let r = repair(report, &sources());
        assert_eq!(r.counts.citations, 2);
        assert_eq!(r.counts.supported, 2);
        assert_eq!(r.counts.removed, 0);
        assert!(!r.report.contains("<Report>") && !r.report.contains("Energy Efficiency"));
        assert!(!r.report.contains("invented.example"));
        assert!(r.report.contains("dead tuples [1]."), "{}", r.report);
        assert!(r.report.ends_with("### Sources\n\n[1] Vacuuming: file:///docs/vacuum.html#basics\n[2] WAL: https://example.org/wal\n"), "{}", r.report);
        assert_eq!((r.counts.paragraphs, r.counts.cited_paragraphs), (1, 1));
    }

    #[test]
    fn wrong_unknown_and_missing_citations_are_repaired() {
        let report = "# T\n\nThe write-ahead log records every change before data files are written [1].\n\n\
                      Segments of the write-ahead log are 16 MB [9].\n\n\
                      The autovacuum daemon runs every 60 seconds by default.\n\n\
                      Quantum computers will replace databases by 2030 [2].";
        let r = repair(report, &sources());
        assert_eq!(r.counts.citations, 3);
        assert_eq!(
            r.counts.moved, 1,
            "the WAL claim moves from [1] to the WAL page"
        );
        assert_eq!(
            r.counts.removed, 2,
            "[9] is unknown; the quantum claim has no support"
        );
        assert_eq!(
            r.counts.attached, 2,
            "the 16 MB and autovacuum claims get their sources"
        );
        // Numbered by first use: the WAL page is cited first.
        assert!(
            r.report.contains("data files are written [1]."),
            "{}",
            r.report
        );
        assert!(r.report.contains("16 MB [1]."), "{}", r.report);
        assert!(r.report.contains("by default [2]."), "{}", r.report);
        assert!(r.report.contains("by 2030."), "{}", r.report);
        assert!(
            r.report
                .contains("[1] WAL: https://example.org/wal\n[2] Vacuuming"),
            "{}",
            r.report
        );
        assert_eq!((r.counts.paragraphs, r.counts.cited_paragraphs), (4, 3));
    }

    #[test]
    fn a_number_missing_from_the_source_means_no_support() {
        let report = "The autovacuum daemon runs every 30 seconds by default [1].";
        let r = repair(report, &sources());
        assert_eq!((r.counts.supported, r.counts.removed), (0, 1));
        assert!(!r.report.contains('['));
    }

    #[test]
    fn sources_without_text_are_kept_unchecked_and_closing_meta_paragraphs_go() {
        let report = "A native page says something quite specific here [3].\n\nThis report provides an overview of maintenance.";
        let r = repair(report, &sources());
        assert_eq!(r.counts.unchecked, 1);
        assert!(r.report.contains("specific here [1]."));
        assert!(!r.report.contains("This report provides"));
    }

    #[test]
    fn findings_are_renumbered_into_the_runs_list() {
        let note = "**Findings**\nWAL records changes [1]. Vacuum reclaims space [2][3].\n\n### Sources\n[1] WAL: https://example.org/wal\n[2] Vacuum: file:///docs/vacuum.html#basics\n[3] Made up: https://nowhere.example/";
        let out = renumber_findings(note, &sources());
        assert_eq!(
            out,
            "**Findings**\nWAL records changes [2]. Vacuum reclaims space [1]."
        );
    }

    #[test]
    fn markers_are_found_in_every_common_form() {
        let m = find_markers("a [1] b [2, 3][4] c [5-7] d [x] e [8](http://l) f");
        let numbers: Vec<Vec<usize>> = m.into_iter().map(|m| m.numbers).collect();
        assert_eq!(numbers, vec![vec![1], vec![2, 3, 4], vec![5, 6, 7]]);
        assert_eq!(spaced("8kB and 1,000 rows"), "8 kB and 1000 rows");
    }

    /// Four manual sections that all speak of the database server, its values and its
    /// configuration, as every section of a product manual does.
    fn manual() -> Sources {
        let common = "The database server reads each value from its configuration.";
        Sources::from_state(&[
            json!({"url": "file:///m/memory.html#shared-buffers", "title": "Memory",
                   "text": format!("{common} shared_buffers sets the amount of memory used for shared memory buffers; the default is 128 megabytes.")}),
            json!({"url": "file:///m/textsearch.html#configurations", "title": "Configurations",
                   "text": format!("{common} A text search configuration is chosen for the specific language of the documents.")}),
            json!({"url": "file:///m/index.html#tip", "title": "CREATE INDEX",
                   "text": format!("{common} Building an index can use maintenance_work_mem.")}),
            json!({"url": "file:///m/wal.html", "title": "WAL",
                   "text": format!("{common} Checkpoints flush dirty buffers to disk.")}),
        ])
    }

    #[test]
    fn words_every_source_uses_weigh_little_and_a_generic_sentence_gets_no_source() {
        // Unweighted, five of its eight words (62%) are in the text-search section; weighted,
        // the three words no source has outweigh the four every source has.
        let report = "This value can be adjusted based on the specific needs of the database and the server configuration.\n\n\
                      The database server reads the value from its configuration.";
        let r = repair(report, &manual());
        assert_eq!(r.counts.attached, 0, "{}", r.report);
        assert!(!r.report.contains('['), "{}", r.report);
    }

    #[test]
    fn the_rare_words_decide_which_section_a_claim_is_moved_to() {
        // Cited to the index tip, which shares only the words every section uses: moved to
        // the section that has the rare ones (shared_buffers, 128 megabytes).
        let report = "The database server configuration value shared_buffers sets the memory for shared buffers, 128 megabytes by default [3].";
        let r = repair(report, &manual());
        assert_eq!((r.counts.supported, r.counts.moved), (0, 1), "{}", r.report);
        assert!(
            r.report
                .contains("[1] Memory: file:///m/memory.html#shared-buffers"),
            "{}",
            r.report
        );
    }

    #[test]
    fn the_audit_reads_a_finished_report_against_its_own_list() {
        let r = repair(
            "VACUUM reclaims the storage held by dead tuples [1].\n\nWAL segments are 16 MB [2].",
            &sources(),
        );
        let a = audit(&r.report, &sources());
        assert_eq!((a.citations, a.supported, a.removed), (2, 2, 0));
        let invented = "Claims about storage and tuples held by vacuum [1].\n\n### Sources\n[1] X: https://invented.example/";
        let a = audit(invented, &sources());
        assert_eq!((a.citations, a.supported, a.removed), (1, 0, 1));
    }
}
