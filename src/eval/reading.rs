//! Scores that read a report as its reader does: the body only (not the title, which is often
//! the question, nor the headings and the Sources list), the facts the question did not
//! already state, how much of the body was pasted from the sources, and whether its sections
//! are topics or retrieved pages.

use super::{Fact, Question, normalize_text, ratio};
use crate::lexical::plain_words;
use crate::research::support::{self, Sources};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// A run of this many words found verbatim in a retrieved text is copied.
pub const COPIED_RUN_WORDS: usize = 8;

/// Headings under which a report lists what it did not cite; like Sources, not body.
const LIST_HEADINGS: [&str; 3] = ["sources", "consulted, not cited", "references"];

/// One report as its reader reads it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Reading {
    /// The key facts scored: those no wording of which is in the question itself.
    pub scored_facts: usize,
    /// Of those, the ones the body states.
    pub body_facts: Vec<String>,
    pub body_recall: f64,
    /// Body words in runs of `COPIED_RUN_WORDS` or more copied verbatim from a retrieved text.
    pub copied_share: f64,
    /// The same, over the prose only: quotations marked as such (`> ` lines) left out.
    pub copied_prose_share: f64,
    /// The share of the body's words in marked quotations.
    pub quoted_share: f64,
    /// Section headings (`##` and below, lists left out), and those that are a source's title.
    pub headings: usize,
    pub source_title_headings: usize,
    /// Body sentences that make a claim, cite nothing and that no retrieved text supports.
    pub uncited_unsupported: usize,
    /// Sections whose cited sources hold none of the question's key facts.
    pub off_topic_sections: usize,
    /// The body's first paragraph (the answer, in a report that gives one first).
    pub opening: String,
}

/// Reads `report` against the question and what the run retrieved: `texts` are the texts of
/// `sources`, in their order.
pub fn read(q: &Question, report: &str, sources: &Sources, texts: &[&str]) -> Reading {
    let body = body(report);
    let scored: Vec<&Fact> = q
        .facts
        .iter()
        .filter(|f| !in_question(f, &q.question))
        .collect();
    let flat = normalize_text(&body);
    let body_facts: Vec<String> = scored
        .iter()
        .filter(|f| f.any.iter().any(|w| flat.contains(&normalize_text(w))))
        .map(|f| f.fact.clone())
        .collect();
    let titles: HashSet<String> = sources.list.iter().map(|s| plain_words(&s.title)).collect();
    let headings = section_headings(report);
    Reading {
        scored_facts: scored.len(),
        body_recall: ratio(body_facts.len(), scored.len()),
        body_facts,
        copied_share: copied_share(&body, texts),
        copied_prose_share: copied_share(&prose_of(&body), texts),
        quoted_share: ratio(words(&quoted_of(&body)).len(), words(&body).len()),
        headings: headings.len(),
        source_title_headings: headings
            .iter()
            .filter(|h| titles.contains(&plain_words(h)))
            .count(),
        uncited_unsupported: support::audit(report, sources).uncited_unsupported,
        off_topic_sections: off_topic_sections(q, report, sources, texts),
        opening: opening(&body),
    }
}

/// Whether the question already states the fact in one of its wordings.
fn in_question(fact: &Fact, question: &str) -> bool {
    let asked = normalize_text(question);
    fact.any.iter().any(|w| asked.contains(&normalize_text(w)))
}

fn list_heading(line: &str) -> bool {
    let name = line.trim_start_matches('#').trim().to_lowercase();
    LIST_HEADINGS.contains(&name.trim_end_matches(':'))
}

/// The report without its title, headings, notes and lists of sources: what the reader reads
/// as what was found.
pub fn body(report: &str) -> String {
    let mut out = Vec::new();
    let mut in_list = false;
    for line in report.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            in_list = list_heading(t);
            continue;
        }
        if in_list || t.starts_with("> Note:") {
            continue;
        }
        out.push(line);
    }
    out.join("\n").trim().to_owned()
}

/// The `##`-and-deeper headings of the body (the title and lists left out).
fn section_headings(report: &str) -> Vec<String> {
    report
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("##") && !list_heading(l))
        .map(|l| l.trim_start_matches('#').trim().to_owned())
        .collect()
}

/// The body's lines that are not marked quotations.
fn prose_of(body: &str) -> String {
    body.lines()
        .filter(|l| !l.trim_start().starts_with('>'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The body's marked quotations (`> ` lines).
fn quoted_of(body: &str) -> String {
    body.lines()
        .filter(|l| l.trim_start().starts_with('>'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The body's first paragraph.
fn opening(body: &str) -> String {
    body.split("\n\n")
        .map(str::trim)
        .find(|p| !p.is_empty())
        .unwrap_or_default()
        .to_owned()
}

/// Lower-cased words of `text`, citation markers and punctuation left out.
fn words(text: &str) -> Vec<String> {
    support::without_markers(text)
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The share of `body`'s words that stand in a run of `COPIED_RUN_WORDS` or more found word
/// for word in one of `texts`.
pub fn copied_share(body: &str, texts: &[&str]) -> f64 {
    let mine = words(body);
    if mine.len() < COPIED_RUN_WORDS {
        return 0.0;
    }
    let mut known: HashSet<&[String]> = HashSet::new();
    let theirs: Vec<Vec<String>> = texts.iter().map(|t| words(t)).collect();
    for t in &theirs {
        known.extend(t.windows(COPIED_RUN_WORDS));
    }
    let mut copied = vec![false; mine.len()];
    for (i, run) in mine.windows(COPIED_RUN_WORDS).enumerate() {
        if known.contains(run) {
            copied[i..i + COPIED_RUN_WORDS]
                .iter_mut()
                .for_each(|c| *c = true);
        }
    }
    ratio(copied.iter().filter(|c| **c).count(), mine.len())
}

/// Sections (`##`) whose cited sources hold no key fact of the question: a retrieved page on
/// another subject given a section of its own.
fn off_topic_sections(q: &Question, report: &str, sources: &Sources, texts: &[&str]) -> usize {
    let listed = listed_sources(report, sources);
    let holds_fact = |global: usize| {
        texts.get(global.wrapping_sub(1)).is_some_and(|t| {
            let flat = normalize_text(t);
            q.facts
                .iter()
                .any(|f| f.any.iter().any(|w| flat.contains(&normalize_text(w))))
        })
    };
    let mut off = 0;
    for section in report.split("\n## ").skip(1) {
        let heading = section.lines().next().unwrap_or_default();
        // The section runs to the next heading of any level (a Sources list included).
        let section = section.split("\n#").next().unwrap_or_default();
        if list_heading(heading) {
            continue;
        }
        let cited: Vec<usize> = support::cited_numbers(section)
            .into_iter()
            .filter_map(|n| listed.get(n.wrapping_sub(1)).copied().flatten())
            .collect();
        if !cited.is_empty() && !cited.iter().any(|&g| holds_fact(g)) {
            off += 1;
        }
    }
    off
}

/// The report's Sources list as the run's source numbers (1-based), in the report's order.
fn listed_sources(report: &str, sources: &Sources) -> Vec<Option<usize>> {
    let mut out = Vec::new();
    let mut in_list = false;
    for line in report.lines() {
        let t = line.trim();
        if t.starts_with('#') {
            in_list = t
                .trim_start_matches('#')
                .trim()
                .eq_ignore_ascii_case("sources");
            continue;
        }
        if in_list && t.starts_with('[') {
            let url = t.split_whitespace().find(|w| w.contains("://"));
            out.push(url.and_then(|u| sources.number_of(u)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question() -> Question {
        serde_json::from_value(json!({
            "id": "q", "question": "How does autovacuum use autovacuum_naptime?",
            "facts": [
                {"fact": "naptime", "any": ["autovacuum_naptime"]},
                {"fact": "one minute", "any": ["60 seconds", "1min"]},
                {"fact": "threshold", "any": ["autovacuum_vacuum_threshold"]}
            ]
        }))
        .unwrap()
    }

    fn sources() -> (Sources, Vec<String>) {
        let texts = vec![
            "The autovacuum launcher starts a worker every autovacuum_naptime, 60 seconds by default, for each database.".to_owned(),
            "The genetic query optimizer searches join orders with a genetic algorithm of its own.".to_owned(),
        ];
        let state: Vec<crate::research::state::Source> = serde_json::from_value(json!([
            {"url": "file:///d/vacuum.html", "title": "Routine Vacuuming", "text": texts[0]},
            {"url": "file:///d/geqo.html", "title": "Genetic Query Optimizer", "text": texts[1]}
        ]))
        .unwrap();
        (Sources::from_state(&state), texts)
    }

    #[test]
    fn the_body_is_read_without_title_headings_lists_and_the_questions_own_facts() {
        let (sources, texts) = sources();
        let text: Vec<&str> = texts.iter().map(String::as_str).collect();
        let report = "# How does autovacuum use autovacuum_naptime?\n\nThe launcher wakes every \
            60 seconds [1].\n\n## Routine Vacuuming\n\nThe autovacuum launcher starts a worker every \
            autovacuum_naptime, 60 seconds by default, for each database [1].\n\n\
            ## Genetic Query Optimizer\n\nThe genetic query optimizer searches join orders [2].\n\n\
            Quantum computers will replace databases.\n\n\
            ### Sources\n\n[1] Routine Vacuuming: file:///d/vacuum.html\n\
            [2] Genetic Query Optimizer: file:///d/geqo.html\n";
        let r = read(&question(), report, &sources, &text);
        assert_eq!(r.scored_facts, 2, "the question states autovacuum_naptime");
        assert_eq!(r.body_facts, ["one minute"]);
        assert_eq!(r.body_recall, 0.5);
        assert_eq!((r.headings, r.source_title_headings), (2, 2));
        assert_eq!(r.off_topic_sections, 1, "the GEQO section holds no fact");
        assert_eq!(r.uncited_unsupported, 1);
        assert_eq!(r.opening, "The launcher wakes every 60 seconds [1].");
        assert!(
            r.copied_share > 0.4 && r.copied_share < 0.8,
            "{}",
            r.copied_share
        );
    }

    #[test]
    fn words_copied_in_long_runs_count_and_short_shared_phrases_do_not() {
        let page = "the autovacuum launcher starts a worker every minute for each database";
        let copied = "The autovacuum launcher starts a worker every minute for each database.";
        let own = "Every minute, one worker per database is started by the launcher.";
        assert_eq!(copied_share(copied, &[page]), 1.0);
        assert_eq!(copied_share(own, &[page]), 0.0);
    }
}
