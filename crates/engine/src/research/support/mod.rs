//! Reports that cite what this run retrieved, checked sentence by sentence.
//!
//! The report writer is shown one numbered list of the run's sources and the findings with
//! their citations already in that numbering (`renumber_findings`). After it writes, `repair`
//! reads every sentence of the body against the sources it cites: a citation to a number not
//! on the list is removed; one the cited text does not support is moved to a source that does,
//! or removed; a claim without a citation gets one when a source supports it. Support is
//! deterministic: the sentence's content words (stemmed) and every number in it must be found
//! together in one passage of the source's text (about a paragraph), each word weighted by how
//! rare it is among the run's sources (a word every source uses says little about which one
//! supports the sentence), and at least one of the words found must be distinctive (in at most
//! half of the sources). The Sources section is then written from the citations that remain,
//! numbered in order of first use, so a report never lists a reference nobody retrieved.

use crate::lexical::{WordSet, Words, terms};
pub use crate::research::state::SupportCounts;
use passages::{Ids, Passage, Vocabulary};
use rustc_hash::FxHashMap;

mod cited;
mod layout;
mod markers;
mod passages;
#[cfg(test)]
mod tests;

pub use cited::{CitedSentence, Listed, cited_sentences, listed_sources, supports};
use layout::{
    BlockKind, blocks, body_lines, is_about_itself, is_sources_heading, without_empty_sections,
};
pub use markers::renumber_findings;
use markers::{
    dedup, find_markers, list_entry, number_by_first_use, strip_markers, tidy_spaces, with_markers,
};

/// Weighted share of a sentence's content words that must be in one passage of a source for
/// it to support the sentence. Tuned against citations read by hand
/// (`eval/postgresql-15.read-citations.json`, the test `the_check_agrees_with_its_readers`).
pub const SUPPORT_THRESHOLD: f64 = 0.55;

/// About how many words a passage holds. A long page has most of a sentence's words somewhere
/// without saying what the sentence says: checked against whole pages, 28% of the citations
/// the check kept were wrong by reading; the words must be found near each other.
const PASSAGE_WORDS: usize = 80;

/// A sentence with fewer content words than this is not a claim (a heading-like fragment).
const MIN_CLAIM_WORDS: usize = 3;

/// One source the writer may cite, by its number (1-based) in `Sources::list`.
#[derive(Clone, Debug)]
pub struct Source {
    pub url: String,
    pub title: String,
    /// The text support is checked against, in overlapping passages; none for sources without
    /// text (a model's own web search, MCP results): citations to those are kept unchecked.
    passages: Vec<Passage>,
    has_text: bool,
    /// Its words as written (`lexical::raw_tokens`) in any passage and in its title: where a
    /// claim's names other than the question's are looked for.
    written: Ids,
}

/// Whether a written word is an identifier: letters joined by `_` (`shared_buffers`).
fn is_identifier(word: &str) -> bool {
    word.contains('_') && word.chars().any(char::is_alphabetic)
}

/// The run's sources, numbered once, without duplicates.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub list: Vec<Source>,
    by_key: FxHashMap<String, usize>,
    vocabulary: Vocabulary,
    /// In how many sources with text each word (by its `vocabulary` number) appears.
    document_frequency: FxHashMap<u32, usize>,
    /// How many sources have text.
    with_text: usize,
    /// In how many sources with text each written word (`lexical::raw_tokens`) appears.
    name_frequency: FxHashMap<String, usize>,
    /// The names of the question (`with_question`): a claim may name them without its passage
    /// doing so, unless the passage names another of them instead.
    question_names: WordSet,
}

/// Whether `text` cites anything by number (`[3]`, `[1, 2]`; a markdown link is no citation).
pub fn has_citation(text: &str) -> bool {
    !find_markers(text).is_empty()
}

/// The numbers `text` cites, in order of appearance (repeats kept).
pub fn cited_numbers(text: &str) -> Vec<usize> {
    find_markers(text)
        .into_iter()
        .flat_map(|m| m.numbers)
        .collect()
}

/// `text` without its citation markers, spacing tidied.
pub fn without_markers(text: &str) -> String {
    tidy_spaces(&strip_markers(text)).trim().to_owned()
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
    pub fn from_state(entries: &[crate::research::state::Source]) -> Self {
        let mut me = Self::default();
        let mut words = Words::new();
        for e in entries {
            let url = e.url.as_str();
            if url.trim().is_empty() {
                continue;
            }
            let key = source_key(url);
            if me.by_key.contains_key(&key) {
                continue;
            }
            let text = e.text.as_str();
            let vocabulary = &mut me.vocabulary;
            let mut passages: Vec<Passage> = crate::lexical::passages(text, PASSAGE_WORDS)
                .into_iter()
                .map(|p| Passage::of(&mut words, vocabulary, p))
                .collect();
            for i in 1..passages.len() {
                passages[i].identifiers_before = passages[i - 1].identifiers.clone();
            }
            let in_source: Ids = passages.iter().flat_map(|p| &p.terms).copied().collect();
            for id in in_source {
                *me.document_frequency.entry(id).or_insert(0) += 1;
            }
            let mut written: Ids = passages.iter().flat_map(|p| &p.raw).copied().collect();
            crate::lexical::for_each_raw_token(&e.title, |word| {
                written.insert(vocabulary.intern(word));
            });
            // A name a source uses is one it writes as a name, not a word opening a sentence.
            let named = crate::lexical::names(text);
            for name in named {
                *me.name_frequency.entry(name).or_insert(0) += 1;
            }
            me.with_text += usize::from(!text.trim().is_empty());
            me.by_key.insert(key, me.list.len());
            me.list.push(Source {
                url: url.trim().to_owned(),
                title: e.title.trim().to_owned(),
                has_text: !text.trim().is_empty(),
                passages,
                written,
            });
        }
        me
    }

    /// Whether `set` holds `word`.
    fn has(&self, set: &Ids, word: &str) -> bool {
        self.vocabulary.id(word).is_some_and(|id| set.contains(&id))
    }

    /// The same sources, read with the names of the question the report answers (see
    /// `Claim::names_match`).
    pub fn with_question(mut self, question: &str) -> Self {
        self.question_names = crate::lexical::names(question);
        self
    }

    /// A name most of the run's sources hold (the documentation's or the product's own
    /// name): a claim may use it where its passage does not.
    fn is_common_name(&self, name: &str) -> bool {
        let df = self.name_frequency.get(name).copied().unwrap_or(0);
        df > 0 && (df == self.with_text || (self.with_text >= 3 && df * 2 >= self.with_text))
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
        let df = self.frequency(word).max(1) as f64;
        ((self.with_text as f64 + 1.0) / (df + 0.5)).ln()
    }

    /// A word in at most half of the sources (any word, with one or two sources).
    fn is_distinctive(&self, word: &str) -> bool {
        self.frequency(word) * 2 <= self.with_text.max(2)
    }

    /// In how many sources with text `word` appears.
    fn frequency(&self, word: &str) -> usize {
        self.vocabulary
            .id(word)
            .and_then(|id| self.document_frequency.get(&id))
            .copied()
            .unwrap_or(0)
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

/// A claim's words, in order, with repeats (a repeated word counts once in the score).
struct Claim {
    words: WordSet,
    numbers: WordSet,
    /// What it is about by name (`lexical::names`): identifiers, acronyms, proper names.
    names: WordSet,
}

impl Claim {
    fn of(vocabulary: &mut Words, text: &str) -> Self {
        let (words, numbers) = terms(vocabulary, text);
        let names = crate::lexical::names(text);
        Self {
            words,
            numbers,
            names,
        }
    }

    /// Whether `passage` is about what the claim names. Every name of the claim that the
    /// run's sources use must be in it, but a name most of them hold, and a name of the
    /// question (the reader's own words for the subject) unless the passage names another of
    /// the question's names that the claim does not, or an identifier of its own: then the
    /// claim says of one thing what the passage says of another ("in mode B, this happens
    /// automatically", cited to a passage about mode A). Most of the words being there is not enough: such a claim shares all the
    /// others. A name no source uses is left to the words' weights: as often as not it is an
    /// abbreviation ("WAL" for the write-ahead log) or a synonym.
    fn names_match(&self, passage: &Passage, source: &Source, sources: &Sources) -> bool {
        let holds = |words: &Ids, name: &String| {
            sources.has(words, name)
                || (crate::lexical::capitalised_only(name)
                    && sources.has(words, &name.to_lowercase()))
        };
        let mut question_name_missing = false;
        for name in &self.names {
            if sources.has(&passage.raw, name) || sources.is_common_name(name) {
                continue;
            }
            if sources.question_names.contains(name) {
                // The question's own names are held to the passage, as written.
                question_name_missing = true;
                continue;
            }
            // Another name: the source may name it anywhere (its title, a passage before),
            // in lower case if it is only a capitalised word; a name no source uses is left to
            // the words' weights, unless it is an identifier: "WAL" may stand for the
            // write-ahead log, but no source writes `autovacuum_threshold` for
            // `autovacuum_vacuum_threshold` (a setting the model named from memory).
            if holds(&passage.raw, name)
                || holds(&source.written, name)
                || (!sources.name_frequency.contains_key(name) && !is_identifier(name))
            {
                continue;
            }
            return false;
        }
        !question_name_missing
            || !(sources
                .question_names
                .iter()
                .any(|q| !self.names.contains(q) && holds(&passage.raw, q))
                || self.passage_names_another_identifier(passage, sources))
    }

    /// Whether the passage, or the one before it, names an identifier
    /// (`effective_io_concurrency`) that the claim does not and that few sources use. A claim
    /// whose passage leaves out the question's own name is supported only while that name can
    /// be understood there ("this parameter"); a passage about another setting says nothing of
    /// the question's.
    fn passage_names_another_identifier(&self, passage: &Passage, sources: &Sources) -> bool {
        let before = passage.identifiers_before.iter();
        passage.identifiers.iter().chain(before).any(|&id| {
            let word = sources.vocabulary.word(id);
            !self.names.contains(word)
                && !sources.question_names.contains(word)
                && !sources.is_common_name(word)
        })
    }

    fn is_claim(&self) -> bool {
        self.words.len() >= MIN_CLAIM_WORDS
    }

    /// How well `source` supports this claim: the weighted share of its words found in its
    /// best passage; 0 for a passage missing a number of the claim, or where every word found
    /// is one most sources use (a generic sentence matches any of them equally badly).
    fn score(&self, source: &Source, sources: &Sources) -> f64 {
        self.best_passage(source, sources)
            .map_or(0.0, |(_, score)| score)
    }

    /// The passage of `source` that supports the claim best (its index among the source's
    /// passages) and its score, as `score` reads them.
    fn best_passage(&self, source: &Source, sources: &Sources) -> Option<(usize, f64)> {
        if !source.has_text || self.words.is_empty() {
            return None;
        }
        // A word no source holds has no number, and is in no passage.
        let weighted: Vec<(Option<u32>, f64, bool)> = self
            .words
            .iter()
            .map(|w| {
                let id = sources.vocabulary.id(w);
                (id, sources.weight(w), sources.is_distinctive(w))
            })
            .collect();
        let total: f64 = weighted.iter().map(|(_, weight, _)| weight).sum();
        if total <= 0.0 {
            return None;
        }
        let numbers: Vec<u32> = self
            .numbers
            .iter()
            .map(|n| sources.vocabulary.id(n))
            .collect::<Option<_>>()?;
        let mut best: Option<(usize, f64)> = None;
        for (i, passage) in source.passages.iter().enumerate() {
            if !numbers.iter().all(|n| passage.numbers.contains(n))
                || !self.names_match(passage, source, sources)
            {
                continue;
            }
            let (mut found, mut distinctive) = (0.0, false);
            for (id, weight, rare) in &weighted {
                if id.is_some_and(|id| passage.terms.contains(&id)) {
                    found += weight;
                    distinctive |= rare;
                }
            }
            let score = found / total;
            if distinctive && best.is_none_or(|(_, b)| score > b) {
                best = Some((i, score));
            }
        }
        best
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
// The report

/// The repaired report and the counts.
#[derive(Clone, Debug, PartialEq)]
pub struct Repaired {
    pub report: String,
    pub counts: SupportCounts,
}

/// What becomes of a claim left without a citation because no retrieved text supports it
/// (it cited nothing, or only sources that do not support it). `audit` counts only the ones
/// that cite nothing: on a finished report, the others were removed or kept cited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uncited {
    /// Left out, and counted: in a report a writer wrote, it is the writer's memory.
    Remove,
    /// Kept, and counted: in findings shown as they were gathered (a partial report, the
    /// findings standing for a report that was not written), under a note that says so.
    Keep,
}

/// The report with each claim's citations checked and repaired, and its Sources section
/// rewritten; claims without support removed.
pub fn repair(report: &str, sources: &Sources) -> Repaired {
    repair_with(report, sources, Uncited::Remove)
}

/// The note under a report whose unsupported sentences went. When nothing but headings is
/// left, it says so: the reader learns the search did not answer, not that the page broke.
fn left_out_note(n: usize, body: &str) -> String {
    let said = body
        .lines()
        .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    if !said {
        return format!(
            "\n\n> Note: no retrieved source supports what was written ({n} {}), so none of \
             it is shown: the sources found do not seem to answer the question. Research it \
             again with other search terms or other sources.",
            if n == 1 { "sentence" } else { "sentences" }
        );
    }
    let (these, were) = if n == 1 {
        ("sentence", "was")
    } else {
        ("sentences", "were")
    };
    format!("\n\n> Note: {n} {these} that no retrieved source supports {were} left out.")
}

/// `repair`, with what becomes of unsupported claims that cite nothing said by `uncited`.
pub fn repair_with(report: &str, sources: &Sources, uncited: Uncited) -> Repaired {
    let mut words = Words::new();
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
        let (text, claims) = repair_block(&block.text, sources, uncited, &mut words, &mut counts);
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
    let body = without_empty_sections(&body);
    let (body, cited) = number_by_first_use(&body);
    counts.sources_cited = cited.len();
    let mut report = body.trim_end().to_owned();
    if counts.uncited_unsupported > 0 && uncited == Uncited::Remove {
        report.push_str(&left_out_note(counts.uncited_unsupported, &body));
    }
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

/// The sentences of a block: each ends at `.`, `!` or `?` followed by white space (a full stop
/// as `lexical::full_stop_ends_sentence` says), with the citation markers right after it
/// (`… fact. [1] Next …`) kept with it.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let ends = matches!(c, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace())
            && (c != b'.' || crate::lexical::full_stop_ends_sentence(&text[start..i]))
            // "1. " opening a sentence is not an end.
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

/// The sentences of `text` that source `number` supports, each ending with its marker; a
/// sentence too short to be a claim goes with them. What the source does not support (a
/// small model's own additions to a passage it was asked to restate) is left out.
pub fn supported_by_source(text: &str, number: usize, sources: &Sources) -> String {
    let Some(source) = number.checked_sub(1).and_then(|i| sources.list.get(i)) else {
        return String::new();
    };
    let mut words = Words::new();
    let mut kept: Vec<String> = Vec::new();
    let mut any_claim = false;
    for sentence in sentences(text) {
        let plain = tidy_spaces(&strip_markers(sentence));
        let plain = plain.trim();
        // Nothing but punctuation (a "[…]" left between two quoted stretches) says nothing.
        if !plain.chars().any(char::is_alphanumeric) {
            continue;
        }
        let claim = Claim::of(&mut words, plain);
        if !source.has_text || !claim.is_claim() || claim.supported_by(source, sources) {
            any_claim |= claim.is_claim();
            kept.push(with_markers(plain, &[number]));
        }
    }
    // Fragments alone are no statement.
    if any_claim {
        kept.join(" ")
    } else {
        String::new()
    }
}

/// The sentences of `text` that one of the sources `numbers` supports, each ending with the
/// markers of those among them that do: a sentence is kept under the ones it cites that
/// support it, else under the one of `numbers` that supports it best. Sentences no listed
/// source supports, and fragments that are no claim, are left out; a sentence cited to a
/// source without text to check is kept as cited.
pub fn supported_among(text: &str, numbers: &[usize], sources: &Sources) -> Vec<String> {
    let mut words = Words::new();
    let mut kept = Vec::new();
    for sentence in sentences(text) {
        let plain = tidy_spaces(&strip_markers(sentence));
        let plain = plain.trim();
        let claim = Claim::of(&mut words, plain);
        if !claim.is_claim() {
            continue;
        }
        let listed = |n: &usize| numbers.contains(n);
        let source = |n: usize| n.checked_sub(1).and_then(|i| sources.list.get(i));
        let cited: Vec<usize> = dedup(cited_numbers(sentence).into_iter())
            .into_iter()
            .filter(listed)
            .collect();
        let mut keep: Vec<usize> = cited
            .iter()
            .copied()
            .filter(|&n| source(n).is_some_and(|s| !s.has_text || claim.supported_by(s, sources)))
            .collect();
        if keep.is_empty() {
            let best = numbers
                .iter()
                .filter_map(|&n| source(n).map(|s| (n, claim.score(s, sources))))
                .filter(|(_, score)| *score >= SUPPORT_THRESHOLD)
                .max_by(|a, b| a.1.total_cmp(&b.1));
            keep.extend(best.map(|(n, _)| n));
        }
        if !keep.is_empty() {
            kept.push(with_markers(plain, &keep));
        }
    }
    kept
}

/// The passage of source `number`'s `text` (the text `sources` was made from) that supports
/// `sentence` at the check's bar, if one does: what a reader of the report's evidence is shown.
pub fn matched_passage<'t>(
    sentence: &str,
    number: usize,
    sources: &Sources,
    text: &'t str,
) -> Option<&'t str> {
    let source = number.checked_sub(1).and_then(|i| sources.list.get(i))?;
    let claim = Claim::of(&mut Words::new(), &tidy_spaces(&strip_markers(sentence)));
    if !claim.is_claim() {
        return None;
    }
    let (index, score) = claim.best_passage(source, sources)?;
    if score < SUPPORT_THRESHOLD {
        return None;
    }
    crate::lexical::passages(text, PASSAGE_WORDS)
        .get(index)
        .copied()
}

/// One block checked; whether it makes a claim.
fn repair_block(
    text: &str,
    sources: &Sources,
    uncited: Uncited,
    words: &mut Words,
    counts: &mut SupportCounts,
) -> (String, bool) {
    let mut out = String::with_capacity(text.len() + 16);
    let mut any_claim = false;
    for sentence in sentences(text) {
        let plain = strip_markers(sentence);
        let claim = Claim::of(words, &plain);
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
        if keep.is_empty() && sources.with_text > 0 {
            // A claim no retrieved text supports is the writer's memory, not the research.
            counts.uncited_unsupported += 1;
            if uncited == Uncited::Remove {
                continue;
            }
        }
        out.push_str(&with_markers(&plain, &dedup(keep.into_iter())));
    }
    (out, any_claim)
}

/// The counts of `repair` for a finished report, read again from scratch (the evaluation's
/// independent check): every citation in the body against the report's own Sources list.
pub fn audit(report: &str, sources: &Sources) -> SupportCounts {
    // The report's numbers refer to its Sources section: map them to the run's sources.
    let mut by_number: FxHashMap<usize, usize> = FxHashMap::default();
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
    let mut words = Words::new();
    let mut counts = SupportCounts::default();
    let lines = body_lines(report);
    for block in blocks(&lines) {
        if block.kind == BlockKind::Verbatim {
            continue;
        }
        let mut any_claim = false;
        let mut cited = false;
        for sentence in sentences(&block.text) {
            let claim = Claim::of(&mut words, &strip_markers(sentence));
            any_claim |= claim.is_claim();
            if claim.is_claim()
                && !has_citation(sentence)
                && sources.with_text > 0
                && claim.best(sources).is_none()
            {
                counts.uncited_unsupported += 1;
            }
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
