//! Words of English text as the citation check and page excerpts read them: lower-cased,
//! stop words dropped, stemmed (tantivy's analysers, as the corpus index reads documents), and
//! text cut into sentences and passages.

use rustc_hash::{FxHashMap, FxHashSet};
use tantivy::tokenizer::{
    Language, LowerCaser, RawTokenizer, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
    TokenStream,
};

/// Splits text into lower-cased content words and stems each distinct word once.
pub struct Words {
    split: TextAnalyzer,
    stem: TextAnalyzer,
    /// Stems already computed. Pages repeat most of their words, and stemming every
    /// occurrence was half of the report node's cost (8% of a run's server CPU).
    stems: FxHashMap<String, String>,
}

impl Default for Words {
    fn default() -> Self {
        Self::new()
    }
}

impl Words {
    pub fn new() -> Self {
        let split = TextAnalyzer::builder(SimpleTokenizer::default()).filter(LowerCaser);
        let split = match StopWordFilter::new(Language::English) {
            Some(stop) => split.filter(stop).build(),
            None => TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(LowerCaser)
                .build(),
        };
        Self {
            split,
            stem: TextAnalyzer::builder(RawTokenizer::default())
                .filter(Stemmer::new(Language::English))
                .build(),
            stems: FxHashMap::default(),
        }
    }

    /// The stem of one lower-cased word.
    pub fn stem<'a>(&'a mut self, word: &'a str) -> &'a str {
        stem_of(&mut self.stem, &mut self.stems, word)
    }
}

/// The stem of `word`, computed once and remembered in `known`.
fn stem_of<'a>(
    stemmer: &mut TextAnalyzer,
    known: &'a mut FxHashMap<String, String>,
    word: &'a str,
) -> &'a str {
    if !known.contains_key(word) {
        let mut stream = stemmer.token_stream(word);
        let stem = if stream.advance() {
            stream.token().text.clone()
        } else {
            word.to_owned()
        };
        known.insert(word.to_owned(), stem);
    }
    known.get(word).map_or(word, String::as_str)
}

/// Digits and letters written together ("8kB", "v15") are read as separate words, as "8 kB"
/// would be, and thousands separators go ("1,000" is "1000").
pub fn spaced(text: &str) -> String {
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

/// The lower-cased content words of `text`, in order (stop words dropped, digits and letters
/// written together split, thousands separators gone).
fn tokens(words: &mut Words, text: &str) -> Vec<String> {
    let spaced = spaced(text);
    let mut out = Vec::new();
    let mut stream = words.split.token_stream(&spaced);
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// Whether a token is a number (compared without its leading zeros).
fn is_number(token: &str) -> bool {
    token.chars().all(|c| c.is_ascii_digit())
}

/// The number a word spells, for the small counts a manual writes out ("The default is three
/// processes"): a claim saying 3 is that number. "One" is left a word: it is as often a pronoun.
fn spelled_number(token: &str) -> Option<&'static str> {
    const SPELLED: [(&str, &str); 11] = [
        ("two", "2"),
        ("three", "3"),
        ("four", "4"),
        ("five", "5"),
        ("six", "6"),
        ("seven", "7"),
        ("eight", "8"),
        ("nine", "9"),
        ("ten", "10"),
        ("eleven", "11"),
        ("twelve", "12"),
    ];
    SPELLED.iter().find(|(w, _)| *w == token).map(|(_, n)| *n)
}

/// One word of `for_each_term`: a stem of two letters or more, or a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Term<'a> {
    Stem(&'a str),
    /// Digits without their leading zeros, or the digits a spelled-out count stands for.
    Number(&'a str),
}

/// Calls `f` with each stemmed content word and each number of `text`, in order, repeats
/// included: what `terms` collects, for callers that keep the words in sets of their own.
pub fn for_each_term(words: &mut Words, text: &str, mut f: impl FnMut(Term<'_>)) {
    let spaced = spaced(text);
    let Words {
        split,
        stem,
        stems: known,
    } = words;
    // Each token read where the analyser holds it: a page's 2,000 words are mostly repeats, and
    // copying each one out was a fifth of the citation check's cost.
    let mut stream = split.token_stream(&spaced);
    while stream.advance() {
        let t = stream.token().text.as_str();
        if is_number(t) {
            f(Term::Number(t.trim_start_matches('0')));
        } else if let Some(n) = spelled_number(t) {
            f(Term::Number(n));
        } else {
            let s = stem_of(stem, known, t);
            if s.chars().count() >= 2 {
                f(Term::Stem(s));
            }
        }
    }
}

/// The stemmed content words of `text`, and (separately) its numbers, digits or spelled out.
pub fn terms(words: &mut Words, text: &str) -> Terms {
    let mut stems = WordSet::default();
    let mut numbers = WordSet::default();
    for_each_term(words, text, |term| {
        let (set, word) = match term {
            Term::Stem(s) => (&mut stems, s),
            Term::Number(n) => (&mut numbers, n),
        };
        // Most words repeat: one is copied only the first time.
        if !set.contains(word) {
            set.insert(word.to_owned());
        }
    });
    (stems, numbers)
}

/// The pairs of content words (stemmed, numbers as they are) that follow each other in
/// `text`, stop words skipped. Two sentences sharing most of their words say the same thing
/// only if they also share most of these: "a regular CREATE INDEX command can run in a
/// transaction block, CREATE INDEX CONCURRENTLY cannot" shares two thirds of its words with
/// "a regular CREATE INDEX command differs from CREATE INDEX CONCURRENTLY, which waits for
/// transactions" and a third of its pairs.
pub fn word_pairs(words: &mut Words, text: &str) -> FxHashSet<(String, String)> {
    let terms: Vec<String> = tokens(words, text)
        .iter()
        .map(|t| {
            if is_number(t) {
                t.trim_start_matches('0').to_owned()
            } else {
                words.stem(t).to_owned()
            }
        })
        .collect();
    terms
        .windows(2)
        .map(|w| (w[0].clone(), w[1].clone()))
        .collect()
}

/// The words of `text` as written, and the parts of each compound ("asyncio.TaskGroup" gives
/// "asyncio.TaskGroup", "asyncio" and "TaskGroup"; "pg_stat_activity" stays whole): what a name
/// of `names` is looked for in.
pub fn raw_tokens(text: &str) -> WordSet {
    let mut out = WordSet::default();
    for_each_raw_token(text, |word| {
        // Most words repeat: one is copied only the first time.
        if !out.contains(word) {
            out.insert(name_key(word));
        }
    });
    out
}

/// Calls `f` with each word of `text` that `raw_tokens` collects, in order, repeats included.
pub fn for_each_raw_token(text: &str, mut f: impl FnMut(&str)) {
    let mut opens = true;
    for written in text.split_whitespace() {
        let word = written.trim_matches(|c: char| !(c.is_alphanumeric() || c == '_'));
        if word.is_empty() {
            continue;
        }
        // "A" opening a sentence is the article, not a name.
        let article = |w: &str| opens && w.chars().count() == 1;
        if !article(word) {
            f(word);
        }
        for part in word_parts(word) {
            if !article(part) {
                f(part);
            }
        }
        opens = ends_sentence(written);
    }
}

/// How a name is compared: as written. "Read Committed" is not the "data committed" of a
/// passage about Repeatable Read, nor "mode B" "a mode".
fn name_key(word: &str) -> String {
    word.to_owned()
}

/// The pieces of a word between characters that are neither letters, digits nor `_`.
fn word_parts(word: &str) -> impl Iterator<Item = &str> {
    word.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|p| !p.is_empty())
}

/// The names a sentence is about, as written: identifiers (`shared_buffers`), words with a
/// capital past their first letter (`WAL`, `TaskGroup`, `GEQO`) and capitalised words that
/// do not open the sentence ("mode B", "in Python"). A passage that supports the sentence
/// names them too: one that says the same of another name ("mode A") shares every other word.
pub fn names(sentence: &str) -> WordSet {
    let mut out = WordSet::default();
    let mut first = true;
    for word in sentence.split_whitespace() {
        // A list marker, a quotation mark or a number opens nothing: the word after it does.
        if !word.chars().any(char::is_alphabetic) {
            first |= ends_sentence(word);
            continue;
        }
        let opens = first;
        first = false;
        for part in word_parts(word) {
            if part.chars().all(|c| c.is_ascii_digit()) || UNITS.contains(&part) {
                continue;
            }
            let mut chars = part.chars();
            let head = chars.next().is_some_and(char::is_uppercase);
            let inner_capital = chars.any(char::is_uppercase);
            let name = part.contains('_') || inner_capital || (head && !opens && part != "I");
            if name {
                out.insert(name_key(part));
            }
        }
        // A new sentence or clause after a colon opens with a capital too.
        if ends_sentence(word) {
            first = true;
        }
    }
    out
}

/// Units written with capitals, which name nothing ("128 MB").
const UNITS: [&str; 8] = ["kB", "KB", "MB", "GB", "TB", "MiB", "GiB", "ms"];

/// Whether a written word ends a sentence or a clause after which a capital is no name:
/// `.`, `:`, `!` or `?`, before any closing quote or bracket ("done.”").
fn ends_sentence(word: &str) -> bool {
    word.trim_end_matches(['"', '\'', '”', '’', ')', ']', '*'])
        .ends_with(['.', ':', '!', '?'])
}

/// Whether a name is a capitalised word and nothing more ("Committed", "Python"): written in
/// lower case in a passage, it may be the same word (a title's word in running text).
pub fn capitalised_only(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(char::is_uppercase)
        && chars.clone().count() > 0
        && chars.all(char::is_lowercase)
}

/// `text`'s words (letters and digits) lower-cased, one space between them: two wordings of a
/// heading or title compared.
pub fn plain_words(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A text's word stems and numbers, as `terms` finds them.
pub type Terms = (WordSet, WordSet);

/// A set of words. The sets are many and their keys short, filled from text the service itself
/// read: a fast hash rather than SipHash, whose cost was a tenth of a run's server CPU.
pub type WordSet = FxHashSet<String>;

/// How much each of `pieces` (the stretches, sentences or sources of one text) bears on a
/// query: the summed rarity of the query's words the piece holds, ln((n + 1) / (df + 0.5)) for
/// a word in df of the n pieces (one that every piece holds tells little), plus the query's
/// numbers it holds.
pub fn bearing(query: &Terms, pieces: &[Terms]) -> Vec<f64> {
    let (wanted, numbers) = query;
    let n = pieces.len() as f64;
    let weights: Vec<(&String, f64)> = wanted
        .iter()
        .map(|w| {
            let df = pieces.iter().filter(|(stems, _)| stems.contains(w)).count() as f64;
            (w, ((n + 1.0) / (df + 0.5)).ln())
        })
        .collect();
    pieces
        .iter()
        .map(|(stems, nums)| {
            let held: f64 = weights
                .iter()
                .filter(|(w, _)| stems.contains(*w))
                .map(|(_, weight)| weight)
                .sum();
            held + numbers.intersection(nums).count() as f64
        })
        .collect()
}

/// `text` in passages of about `words` words, whole sentences each, every passage
/// starting halfway through the one before so that a claim spanning a boundary is still found
/// together.
pub fn passages(text: &str, words: usize) -> Vec<&str> {
    let pieces = sentence_spans(text);
    let mut out = Vec::new();
    let mut first = 0;
    while first < pieces.len() {
        let (mut last, mut count) = (first, 0);
        while last < pieces.len() && (count < words || last == first) {
            count += text[pieces[last].0..pieces[last].1]
                .split_whitespace()
                .count();
            last += 1;
        }
        out.push(&text[pieces[first].0..pieces[last - 1].1]);
        if last >= pieces.len() {
            break;
        }
        first += ((last - first) / 2).max(1);
    }
    out
}

/// Whether a full stop after `before` (the sentence so far) ends the sentence. It does not
/// when it abbreviates ("e.g.", "i.e."), closes an initial after a lower-case word ("adapted
/// from D. Whitley's algorithm": cut there, a report quoted "adapted from D." as a sentence)
/// or belongs to an ellipsis inside a sentence ("INSERT ... ON CONFLICT"). A single capital
/// after a capitalised word ("see Appendix E.") still ends one.
pub fn full_stop_ends_sentence(before: &str) -> bool {
    if before.ends_with('.') || before.ends_with("e.g") || before.ends_with("i.e") {
        return false;
    }
    let mut words = before.rsplit(|c: char| c.is_whitespace() || c == '(');
    let last = words.next().unwrap_or("");
    let is_initial = last.len() == 1 && last.chars().all(|c| c.is_ascii_uppercase());
    let previous = words.find(|w| !w.is_empty());
    !(is_initial && previous.is_some_and(|w| w.chars().next().is_some_and(char::is_lowercase)))
}

/// The byte spans of `text`'s sentences (ending at `.`, `!`, `?`, `:` or `;` before white
/// space, or at a line break; a full stop as `full_stop_ends_sentence` says), empty ones
/// left out.
pub fn sentence_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_none_or(|(_, n)| n.is_whitespace());
        let ends = c == '\n'
            || (matches!(c, '.' | '!' | '?' | ':' | ';')
                && next_is_space
                && (c != '.' || full_stop_ends_sentence(&text[start..i])));
        if ends {
            let end = i + c.len_utf8();
            if !text[start..end].trim().is_empty() {
                spans.push((start, end));
            }
            start = end;
        }
    }
    if !text[start..].trim().is_empty() {
        spans.push((start, text.len()));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORDS: usize = 80;

    #[test]
    fn a_rare_word_of_the_query_bears_more_than_a_common_one() {
        let mut words = Words::new();
        let query = terms(
            &mut words,
            "When does autovacuum start a worker, every 60 seconds?",
        );
        let pieces: Vec<Terms> = [
            "Autovacuum runs in the background.",
            "Autovacuum starts a worker every 60 seconds.",
            "Autovacuum is on by default.",
            "Checkpoints write dirty pages.",
        ]
        .iter()
        .map(|p| terms(&mut words, p))
        .collect();
        let scores = bearing(&query, &pieces);
        // "autovacuum" is in three of four pieces: ln(5 / 3.5); "start", "worker", "every"
        // and "seconds" in one: ln(5 / 1.5) each; "60" is a number the query holds: 1.
        let common = (5.0f64 / 3.5).ln();
        let rare = (5.0f64 / 1.5).ln();
        assert!((scores[0] - common).abs() < 1e-9, "{scores:?}");
        assert!(
            (scores[1] - (common + 4.0 * rare + 1.0)).abs() < 1e-9,
            "{scores:?}"
        );
        assert!((scores[2] - common).abs() < 1e-9, "{scores:?}");
        assert_eq!(scores[3], 0.0);
    }

    /// Stemming each distinct word once gives the words and numbers that stemming every token in
    /// one tokenizer pipeline gave.
    #[test]
    fn stemming_each_distinct_word_once_changes_no_term() {
        let text = "Running runners ran; the RUNNING of 1,000 runs in 8kB pages, v15 and 015 pages. \
                    Vacuuming vacuums vacuumed tables: a table's dead tuples, tuples and TUPLES.";
        let mut pipeline = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(LowerCaser)
            .filter(StopWordFilter::new(Language::English).unwrap())
            .filter(Stemmer::new(Language::English))
            .build();
        let (mut words, mut numbers) = (WordSet::default(), WordSet::default());
        let spaced = spaced(text);
        let mut stream = pipeline.token_stream(&spaced);
        while stream.advance() {
            let t = &stream.token().text;
            if t.chars().all(|c| c.is_ascii_digit()) {
                numbers.insert(t.trim_start_matches('0').to_owned());
            } else if t.chars().count() >= 2 {
                words.insert(t.clone());
            }
        }
        let mut memo = Words::new();
        assert_eq!(terms(&mut memo, text), (words.clone(), numbers.clone()));
        // The memo is shared across texts: a second pass gives the same answer.
        assert_eq!(terms(&mut memo, text), (words.clone(), numbers));
        assert!(
            words.contains("run") && words.contains("vacuum"),
            "{words:?}"
        );
    }

    #[test]
    fn an_initial_or_an_ellipsis_does_not_end_a_sentence() {
        let text = "Parts of GEQO are adapted from D. Whitley's Genitor algorithm. Use \
            INSERT ... ON CONFLICT instead, e.g. for upserts. History is in Appendix E. Ask \
            again.";
        let got: Vec<&str> = sentence_spans(text)
            .into_iter()
            .map(|(s, e)| text[s..e].trim())
            .collect();
        assert_eq!(
            got,
            [
                "Parts of GEQO are adapted from D. Whitley's Genitor algorithm.",
                "Use INSERT ... ON CONFLICT instead, e.g. for upserts.",
                "History is in Appendix E.",
                "Ask again.",
            ]
        );
    }

    #[test]
    fn passages_hold_whole_sentences_and_overlap() {
        let sentence = "one two three four five six seven eight nine ten. ";
        let text = sentence.repeat(30);
        let p = passages(&text, WORDS);
        assert!(p.len() > 3, "{}", p.len());
        for passage in &p {
            assert!(
                passage.trim_start().starts_with("one") && passage.trim_end().ends_with("ten.")
            );
            let words = passage.split_whitespace().count();
            assert!((WORDS..WORDS + 10).contains(&words) || passage.len() < text.len() / 2);
        }
        // Halfway overlap: about twice as many passages as the text has passage lengths.
        assert!(p.len() + 1 >= 2 * (300 / WORDS), "{}", p.len());
        assert_eq!(passages("", WORDS), Vec::<&str>::new());
        assert_eq!(passages("No full stop", WORDS), vec!["No full stop"]);
    }

    #[test]
    fn names_are_identifiers_acronyms_and_capitals_past_the_opening_word() {
        let got = |t: &str| {
            let mut v: Vec<String> = names(t).into_iter().collect();
            v.sort();
            v
        };
        assert_eq!(got("- Autovacuum runs every minute."), Vec::<String>::new());
        assert_eq!(got("> “A Hash index stores 32-bit codes.”"), ["Hash"]);
        assert_eq!(
            got("shared_buffers is 128 MB in PostgreSQL."),
            ["PostgreSQL", "shared_buffers"]
        );
        assert_eq!(
            got("It is done.” Then Python runs."),
            ["Python"],
            "Then opens"
        );
        assert!(
            capitalised_only("Committed") && !capitalised_only("WAL") && !capitalised_only("B")
        );
        let raw = raw_tokens("A checkpoint. In mode B the asyncio.TaskGroup runs.");
        assert!(!raw.contains("A") && raw.contains("B") && raw.contains("TaskGroup"));
    }
}
