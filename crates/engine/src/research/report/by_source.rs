//! The report written source by source (`report_form: "by_source"`), for a report model too
//! small to write from all the findings at once.
//!
//! Given 10–20 thousand characters of findings, a 1.5B model writes a report that leaves out
//! a third of the key facts they hold, pads it with general sentences no source supports (a
//! third of its paragraphs cite nothing), and now and then loops on a heading or copies its
//! instructions back. Shown one source's part of the findings and the question, it restates
//! it in a few sentences, mostly in the source's own words, that the source supports. So:
//!
//! 1. the findings are split by the source each passage cites (`parts`);
//! 2. the parts that bear most on the question (`RESTATED_MAX`) are each restated by its own
//!    short call (in parallel, within the process's cap on
//!    short calls), and only the sentences its source supports are kept (the support check
//!    of `support.rs`, run on each sentence against that one source), and under it the
//!    source's own sentences that bear on the question and the restatement left out (a small
//!    model's restatement keeps the gist and drops the names and numbers that answer); the
//!    other parts are given by those sentences alone, and a part without a word of the
//!    question is left out;
//! 3. one more short call answers the question in a paragraph from those restatements (the
//!    overview; streamed to clients as the report's message);
//! 4. the report is the overview, then a section per source under its title.

use crate::graph::{NodeContext, NodeError};
use crate::lexical::{Terms, Words, bearing, sentence_spans, terms, word_pairs};
use crate::research::ResearchDeps;
use crate::research::config::ResearchConfig;
use crate::research::fallbacks::{self, AgentFallback};
use crate::research::messages::{self as msg, Message};
use crate::research::model::{Caller, Role};
use crate::research::support::{self, Sources};
use crate::tools::engines::truncate_chars;

/// The most characters of one source's findings a restating call is shown: a source the
/// findings quote at length is restated from its first part.
const PART_CHARS: usize = 6_000;

/// The most sources restated by a model call, the ones that bear most on the question: each
/// call took 5-10 s of the two-slot server, and a run that gathered 39 sources made 38 restating
/// calls (834 s in all). The others are given by their own sentences that bear on the question.
const RESTATED_MAX: usize = 10;

/// The output cap of one restating call (a few sentences) and of the overview (a paragraph).
const SHORT_TOKENS: u32 = 400;

/// The most characters of a source's findings quoted when its restatement cannot be used.
const QUOTE_CHARS: usize = 800;

/// The most characters of a source's own sentences added under its restatement: what bears on
/// the question and the restatement left out.
const LEFT_OUT_CHARS: usize = 600;

/// How much a sentence must bear on the question to be added under a restatement: the summed
/// rarity, within its source's part, of the question's words it holds (ln((n + 1) / (df + 0.5))
/// for a word in df of the part's n sentences; one in every sentence weighs nothing). A
/// question word found in one sentence of thirty scores 3, one in three of thirty about 2; an
/// off-topic source's sentences hold few question words and add nothing.
const LEFT_OUT_MIN_SCORE: f64 = 3.0;

/// A sentence whose pairs of adjacent content words (`lexical::word_pairs`) the restatement
/// already holds this share of is said. Shared words alone are not enough: the restatement of
/// a page repeats its subject's words in every sentence, and a sentence of the page that adds
/// a fact about that subject (an exception, a setting, a limit) shares most of its words with
/// it (replayed on the evaluation set's findings and restatements at `ae8fdd7`: counting
/// pairs instead of words, the sections held 95 of the key facts instead of 89).
const SAID_SHARE: f64 = 0.6;

/// The most sentences of the overview kept: it answers the question in a paragraph; past
/// that, a small model is copying the sections below it out.
const OVERVIEW_SENTENCES: usize = 6;

/// One source's part of the findings: its paragraphs, in order, markers removed.
#[derive(Debug, PartialEq)]
pub struct Part {
    /// The source's number in the run's list (1-based).
    pub number: usize,
    pub text: String,
}

/// The findings split by the source each paragraph cites first. A paragraph without a citation
/// belongs with the next one that has one: a passage the researcher was shown may span several
/// paragraphs and is cited once, after its last. Paragraphs after the last citation go with
/// it. Sources appear in the order the findings first cite them.
pub fn parts(findings: &str) -> Vec<Part> {
    let mut out: Vec<Part> = Vec::new();
    let mut pending: Vec<String> = Vec::new();
    for paragraph in findings
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        pending.push(support::without_markers(paragraph));
        let Some(number) = support::cited_numbers(paragraph).first().copied() else {
            continue;
        };
        let text = std::mem::take(&mut pending).join("\n\n");
        match out.iter_mut().find(|p| p.number == number) {
            Some(part) => {
                part.text.push_str("\n\n");
                part.text.push_str(&text);
            }
            None => out.push(Part { number, text }),
        }
    }
    if let Some(last) = out.last_mut() {
        for p in pending {
            last.text.push_str("\n\n");
            last.text.push_str(&p);
        }
    }
    for part in &mut out {
        part.text = truncate_chars(part.text.trim(), PART_CHARS).to_owned();
    }
    out
}

/// One source's section of the report: the restatement (or the quote that stands for it) and,
/// under it, the source's own sentences that bear on the question and the restatement left out.
struct Section {
    number: usize,
    text: String,
    left_out: String,
}

/// The report's text (before the citation check) and the overview call's message, whose id
/// the final message keeps (clients merge the tokens they were streamed with it).
pub struct Written {
    pub text: String,
    pub message: Message,
}

/// Writes the report source by source (see the module's comment). `question` is the
/// conversation; `title` the report's heading. None when no source's restatement kept a
/// sentence (the findings are then the report: `findings_as_report`).
pub async fn write(
    deps: &ResearchDeps,
    ctx: &NodeContext,
    cfg: &ResearchConfig,
    question: &str,
    title: &str,
    findings: &str,
    numbered: &Sources,
) -> Result<Option<Written>, NodeError> {
    let caller = &Caller::new(deps, ctx, cfg);
    let parts = parts(findings);
    let treatments = treatments(&parts, question, RESTATED_MAX);
    let count = |t: Treatment| treatments.iter().filter(|&&x| x == t).count();
    tracing::info!(
        restated = count(Treatment::Restated),
        own_words = count(Treatment::OwnWords),
        left_out = count(Treatment::LeftOut),
        "writing the report a source at a time"
    );
    let calls = parts
        .iter()
        .zip(treatments)
        .map(|(part, treatment)| async move {
            match treatment {
                Treatment::Restated => restate(caller, question, part, numbered).await,
                Treatment::OwnWords => Ok(own_words(part, question, numbered)),
                Treatment::LeftOut => Ok(None),
            }
        });
    let mut sections = Vec::new();
    for section in futures::future::join_all(calls).await {
        sections.extend(section?);
    }
    if sections.is_empty() {
        return Ok(None);
    }
    let (overview, message) = overview(caller, question, &sections).await?;
    let mut text = format!("# {title}\n\n");
    if !overview.is_empty() {
        text.push_str(&overview);
        text.push_str("\n\n");
    }
    for s in &sections {
        let heading = source(numbered, s.number)
            .map_or_else(|| format!("Source {}", s.number), |src| heading(&src.title));
        text.push_str(&format!("## {heading}\n\n{}\n\n", s.text));
        if !s.left_out.is_empty() {
            text.push_str(&format!("{}\n\n", s.left_out));
        }
    }
    Ok(Some(Written { text, message }))
}

/// What becomes of one source's part of the findings.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Treatment {
    /// Restated by a model call, with what the restatement left out under it.
    Restated,
    /// Given by its own sentences that bear on the question, without a call.
    OwnWords,
    /// Not in the report: it holds no word of the question.
    LeftOut,
}

/// The treatment of each part: the `max` that bear most on the question (`relevance`;
/// among equals, the earlier) restated, the others in their own words, and those holding
/// no word or number of the question left out.
fn treatments(parts: &[Part], question: &str, max: usize) -> Vec<Treatment> {
    let scores = relevance(parts, question);
    let mut order: Vec<usize> = (0..parts.len()).filter(|&i| scores[i] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut out = vec![Treatment::LeftOut; parts.len()];
    for (rank, i) in order.into_iter().enumerate() {
        out[i] = if rank < max {
            Treatment::Restated
        } else {
            Treatment::OwnWords
        };
    }
    out
}

/// How much each part bears on the question, weighed across the parts (`lexical::bearing`: a
/// word of the question every part holds still counts a little; a part with none scores 0).
fn relevance(parts: &[Part], question: &str) -> Vec<f64> {
    let mut words = Words::new();
    let query = terms(&mut words, question);
    let found: Vec<Terms> = parts.iter().map(|p| terms(&mut words, &p.text)).collect();
    bearing(&query, &found)
}

/// A section of the part's own sentences that bear most on the question, as the source
/// supports them; None when none bears enough (`LEFT_OUT_MIN_SCORE`).
fn own_words(part: &Part, question: &str, numbered: &Sources) -> Option<Section> {
    let sentences = unsaid(&part.text, question, "", LEFT_OUT_CHARS);
    let text = kept(&sentences, part.number, numbered);
    (!text.is_empty()).then(|| Section {
        number: part.number,
        text,
        left_out: String::new(),
    })
}

/// Source `number` (1-based) of the run's list.
pub(super) fn source(numbered: &Sources, number: usize) -> Option<&support::Source> {
    number.checked_sub(1).and_then(|i| numbered.list.get(i))
}

/// A source's title as a heading: one line, without markdown of its own.
pub(super) fn heading(title: &str) -> String {
    let flat = msg::excerpt(title, 120);
    let plain = flat.trim_start_matches(['#', ' ']);
    if plain.is_empty() {
        "Source".to_owned()
    } else {
        plain.to_owned()
    }
}

/// One source's part restated: the sentences of the model's answer that the source supports,
/// and the part's own sentences the answer left out that bear on the question (a 1.5B model's
/// restatement keeps the gist and drops the setting names, defaults and numbers that answer
/// it: restatements alone kept 62% of the key facts the evaluation set's findings held).
/// When the call fails, or the source supports none of them (a dense page paraphrased past
/// recognition, or a passage the model could only invent about), the section quotes the part
/// instead: its stretches that share the most words with the question, in the source's own
/// words. Cancellation stops the whole step.
async fn restate(
    caller: &Caller<'_>,
    question: &str,
    part: &Part,
    numbered: &Sources,
) -> Result<Option<Section>, NodeError> {
    let title = source(numbered, part.number).map_or("", |s| s.title.as_str());
    let prompt = caller.deps.prompts.render(
        "restate_source",
        &[
            ("question", question),
            ("number", &part.number.to_string()),
            ("title", title),
            ("passage", &part.text),
        ],
    );
    let mut req = caller.request(Role::FinalReport, vec![Message::human(prompt)])?;
    req.max_tokens = req.max_tokens.min(SHORT_TOKENS);
    let answer = {
        // The process-wide cap of page summaries: both are short calls that a small local
        // server answers a few at a time.
        let _slot = caller.deps.summary_slots.acquire().await;
        caller.call(req, false).await
    };
    let restated = match answer {
        Ok(resp) => {
            let written = prose(&Message::from_model(resp.message).text());
            kept(&written, part.number, numbered)
        }
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        Err(e) => {
            tracing::warn!(source = part.number, error = %e, "restating a source failed");
            String::new()
        }
    };
    let left_out = if restated.is_empty() {
        String::new()
    } else {
        let sentences = unsaid(&part.text, question, &restated, LEFT_OUT_CHARS);
        kept(&sentences, part.number, numbered)
    };
    let text = if restated.is_empty() {
        fallbacks::record(
            caller.ctx,
            AgentFallback::SourceKeptAsFound.as_str(),
            &format!(
                "source [{}]: its restatement kept no sentence the source supports; quoted",
                part.number
            ),
        );
        let quoted = crate::tools::excerpts::excerpts(&part.text, question, QUOTE_CHARS);
        kept(&prose(&quoted), part.number, numbered)
    } else {
        restated
    };
    Ok((!text.is_empty()).then_some(Section {
        number: part.number,
        text,
        left_out,
    }))
}

/// The sentences of `text` that source `number` supports (`support::supported_by_source`)
/// and that say something (`says_something`).
fn kept(text: &str, number: usize, numbered: &Sources) -> String {
    let supported = support::supported_by_source(text, number, numbered);
    support::sentences(&supported)
        .into_iter()
        .filter(|s| says_something(s))
        .collect::<String>()
        .trim()
        .to_owned()
}

/// Words no statement ends with: a sentence that does was cut off ("The passage ends with.").
const DANGLING: [&str; 6] = ["with", "the", "a", "an", "and", "or"];

/// Whether a sentence says something. A small model restating a page copies its section
/// numbers and headings out as sentences ("9.15.3.", "See Section 32.4.2.", "SET STORAGE.":
/// 17 of 1,762 sentences of 43 reports, none holding a key fact) and the support check keeps
/// them, as it keeps every sentence too short to be a claim. One says something when a word
/// of it is in lower case or it has three words, and it does not end on a word no statement
/// ends with.
pub(super) fn says_something(sentence: &str) -> bool {
    let plain = support::without_markers(sentence);
    let plain = plain.trim_end_matches(['.', '!', '?', ':', ';', ' ']);
    let words: Vec<&str> = plain
        .split(|c: char| !(c.is_alphabetic() || c == '_' || c == '\''))
        .map(|w| w.trim_start_matches(['_', '\'']))
        .filter(|w| w.chars().count() >= 2)
        .collect();
    let Some(last) = words.last() else {
        return false;
    };
    if plain.ends_with(last) && DANGLING.contains(&last.to_lowercase().as_str()) {
        return false;
    }
    let lower = |w: &&str| w.chars().any(char::is_lowercase) && !w.chars().any(char::is_uppercase);
    words.iter().any(lower) || words.len() >= 3
}

/// The sentences of `part` that bear most on `question` (see `LEFT_OUT_MIN_SCORE`) and that
/// `said` does not mostly say already (`SAID_SHARE`), best first up to `budget` characters, put
/// back in the part's order and joined as prose.
pub(super) fn unsaid(part: &str, question: &str, said: &str, budget: usize) -> String {
    let mut words = Words::new();
    let query = terms(&mut words, question);
    let said_pairs = word_pairs(&mut words, said);
    let (said_words, _) = terms(&mut words, said);
    let spans = sentence_spans(part);
    let found: Vec<Terms> = spans
        .iter()
        .map(|&(s, e)| terms(&mut words, &part[s..e]))
        .collect();
    let scores = bearing(&query, &found);
    let mut is_said = |i: usize| {
        let (s, e) = spans[i];
        let pairs = word_pairs(&mut words, &part[s..e]);
        let (known, all) = if pairs.is_empty() {
            // A sentence of one word: said when the restatement holds it.
            let stems = &found[i].0;
            let known = stems.iter().filter(|w| said_words.contains(*w)).count();
            (known, stems.len())
        } else {
            (pairs.intersection(&said_pairs).count(), pairs.len())
        };
        known as f64 >= SAID_SHARE * all as f64
    };
    let mut ranked: Vec<(usize, f64)> = (0..found.len())
        .filter(|&i| !found[i].0.is_empty() && !is_said(i))
        .map(|i| (i, scores[i]))
        .filter(|(_, score)| *score >= LEFT_OUT_MIN_SCORE)
        .collect();
    // Best first; among equals, the earlier.
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut chosen = Vec::new();
    let mut used = 0;
    for (i, _) in ranked {
        let length = part[spans[i].0..spans[i].1].trim().chars().count();
        if used + length <= budget {
            chosen.push(i);
            used += length + 1;
        }
    }
    chosen.sort_unstable();
    chosen
        .iter()
        .map(|&i| part[spans[i].0..spans[i].1].trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A model's answer as one paragraph of prose: headings and blank lines dropped, and the
/// framing a small model puts in front of a restated fact ("The passage explains that …")
/// taken off, the fact kept.
pub(super) fn prose(text: &str) -> String {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            // A list item's marker: the item is a sentence of the paragraph.
            let unlisted = ["- ", "* ", "• "]
                .iter()
                .find_map(|m| l.strip_prefix(m))
                .unwrap_or(l);
            match unlisted.split_once(". ") {
                Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => rest,
                _ => unlisted,
            }
        })
        .collect::<Vec<_>>()
        .join(" ");
    unframed(&joined)
}

/// Verbs a small model frames a restated fact with ("It also mentions that …"): after "It",
/// only these are framing ("It follows that …" is not).
const REPORTING: [&str; 9] = [
    "mentions",
    "explains",
    "states",
    "notes",
    "says",
    "specifies",
    "suggests",
    "adds",
    "emphasizes",
];

/// `text` without "The passage (also) explains that", "It also mentions that" and the like
/// where a sentence starts.
fn unframed(text: &str) -> String {
    const OPENINGS: [&str; 5] = [
        "The passage ",
        "This passage ",
        "Finally, the passage ",
        "According to the passage, ",
        "It ",
    ];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((at, opening)) = OPENINGS
        .iter()
        .filter_map(|o| rest.find(o).map(|i| (i, *o)))
        .min()
    {
        out.push_str(&rest[..at]);
        let after = &rest[at + opening.len()..];
        let starts_sentence = {
            let before = out.trim_end();
            before.is_empty() || before.ends_with(['.', '!', '?', ']'])
        };
        // The framing ends at "that " within its first few words ("also mentions that ");
        // after "It", only "also" and a reporting verb may come before it.
        let framing_end = if opening.starts_with("According") {
            Some(0)
        } else {
            let reporting = |w: &str| w == "also" || REPORTING.contains(&w);
            after
                .split_inclusive(' ')
                .take(4)
                .scan((0, true), |(len, framing), w| {
                    *len += w.len();
                    let that = w == "that ";
                    let found = (*len, that && *framing);
                    *framing &= opening != "It " || that || reporting(w.trim_end());
                    Some(found)
                })
                .find(|(_, that)| *that)
                .map(|(len, _)| len)
        };
        match framing_end.filter(|_| starts_sentence) {
            Some(end) => {
                let fact = &after[end..];
                let mut chars = fact.chars();
                if let Some(first) = chars.next() {
                    out.extend(first.to_uppercase());
                    rest = chars.as_str();
                } else {
                    rest = fact;
                }
            }
            None => {
                out.push_str(opening);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The answer to the question in a paragraph, from the sections (empty when the model's
/// answer is no answer: its instructions copied back), and the streamed message.
async fn overview(
    caller: &Caller<'_>,
    question: &str,
    sections: &[Section],
) -> Result<(String, Message), NodeError> {
    let notes = sections
        .iter()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    let prompt = caller.deps.prompts.render(
        "overview_from_sources",
        &[("question", question), ("notes", &notes)],
    );
    let mut req = caller.request(Role::FinalReport, vec![Message::human(prompt)])?;
    req.max_tokens = req.max_tokens.min(SHORT_TOKENS);
    let resp = caller.call(req, true).await?;
    let cut_off = resp.finish_reason == crate::llm::FinishReason::Length;
    let message = Message::from_model(resp.message);
    let text = first_sentences(&prose(&message.text()), OVERVIEW_SENTENCES, cut_off);
    let instructions = caller.deps.prompts.render("overview_from_sources", &[]);
    if super::copies_instructions(&text, &instructions) {
        return Ok((String::new(), message));
    }
    Ok((text, message))
}

/// At most `max` sentences of `text`; with `cut_off` (the answer stopped at its output cap),
/// without its unfinished last one.
fn first_sentences(text: &str, max: usize, cut_off: bool) -> String {
    let mut all = support::sentences(text);
    if cut_off
        && all
            .last()
            .is_some_and(|s| !support::without_markers(s).ends_with(['.', '!', '?']))
    {
        all.pop();
    }
    all.into_iter()
        .take(max)
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_split_by_the_source_each_passage_cites() {
        let findings = "Preamble nobody cites.\n\nVACUUM reclaims storage.\n[…]\nIt runs in \
            parallel. [2]\n\nAutovacuum is on by default. [1]\n\nA second passage of the same \
            page. [2]\n\nA line after the last marker.";
        let got = parts(findings);
        assert_eq!(
            got,
            vec![
                Part {
                    number: 2,
                    text: "Preamble nobody cites.\n\nVACUUM reclaims storage.\n[…]\nIt runs in \
                           parallel.\n\nA second passage of the same page."
                        .into()
                },
                Part {
                    number: 1,
                    text: "Autovacuum is on by default.\n\nA line after the last marker.".into()
                },
            ]
        );
    }

    #[test]
    fn what_a_restatement_left_out_is_added_from_the_source() {
        let part = "The autovacuum launcher starts a worker in each database every \
            autovacuum_naptime seconds. A maximum of autovacuum_max_workers worker processes run \
            at the same time. Autovacuum checks for tables with many updated or deleted tuples. \
            The statistics views show how many rows each table holds. Some administrators \
            schedule VACUUM from cron. Logging can be configured per session.";
        let question = "How often does the autovacuum daemon start a worker, and how many \
            autovacuum workers run at once?";
        let said = "Autovacuum checks for tables with many updated or deleted tuples [1].";
        let got = unsaid(part, question, said, 600);
        assert_eq!(
            got,
            "The autovacuum launcher starts a worker in each database every autovacuum_naptime \
             seconds. A maximum of autovacuum_max_workers worker processes run at the same time."
        );
        // What was said is not repeated, and nothing else bears on the question.
        let all_said = format!("{said} {got}");
        assert_eq!(unsaid(part, question, &all_said, 600), "");
        // A sentence past the budget is left out.
        assert_eq!(
            unsaid(part, question, said, 80),
            "A maximum of autovacuum_max_workers worker processes run at the same time."
        );
    }

    #[test]
    fn a_sentence_that_adds_a_fact_about_the_same_subject_is_not_said() {
        // From the evaluation set (pg-10): the restatement holds most of the words of the
        // sentence that answers "what caveats apply", but not what it says.
        let part = "CREATE INDEX CONCURRENTLY performs two scans of the table and waits for \
            existing transactions to terminate. Another difference is that a regular CREATE \
            INDEX command can be performed within a transaction block, but CREATE INDEX \
            CONCURRENTLY cannot. Statistics are collected on table columns.";
        let question = "How does CREATE INDEX CONCURRENTLY differ from a regular CREATE INDEX, \
            and what caveats apply?";
        let said = "A regular CREATE INDEX command differs from CREATE INDEX CONCURRENTLY, which \
            performs two scans of the table and waits for all existing transactions to terminate \
            [1].";
        assert_eq!(
            unsaid(part, question, said, 600),
            "Another difference is that a regular CREATE INDEX command can be performed within a \
             transaction block, but CREATE INDEX CONCURRENTLY cannot."
        );
    }

    #[test]
    fn the_parts_that_bear_most_on_the_question_are_restated() {
        let part = |number, text: &str| Part {
            number,
            text: text.to_owned(),
        };
        let parts = [
            part(1, "Checkpoints write dirty pages to disk."),
            part(
                2,
                "VACUUM reclaims dead tuples. Autovacuum launches workers.",
            ),
            part(3, "VACUUM can run in parallel."),
            part(4, "The autovacuum launcher wakes every minute by default."),
        ];
        let question = "How does VACUUM work, and when does the autovacuum launcher start a \
            worker by default?";
        use Treatment::*;
        assert_eq!(
            treatments(&parts, question, 2),
            [LeftOut, Restated, OwnWords, Restated],
            "{:?}",
            relevance(&parts, question)
        );
        assert_eq!(
            treatments(&parts, question, 10),
            [LeftOut, Restated, Restated, Restated]
        );
    }

    #[test]
    fn a_sentence_that_says_nothing_is_not_kept() {
        for nothing in [
            "9.15.3 [6].",
            "See Section 32.4.2 [8].",
            "Style Guide J.5.1 [13].",
            "SET STORAGE [2].",
            "The passage ends with [6].",
            "[…]",
        ] {
            assert!(!says_something(nothing), "{nothing}");
        }
        for something in [
            "FREEZE [ boolean ]",
            "ON CONFLICT command [3].",
            "Substitute your paths appropriately [11].",
            "The default is 60 seconds [1].",
            "autovacuum_naptime is 1min.",
            "The privilege to update the table is granted to joe [1].",
        ] {
            assert!(says_something(something), "{something}");
        }
    }

    #[test]
    fn an_answer_becomes_one_paragraph() {
        assert_eq!(
            prose("# Title\n\nFirst line.\nSecond line.\n\n## More\nThird."),
            "First line. Second line. Third."
        );
    }

    #[test]
    fn an_overview_is_a_few_whole_sentences() {
        let text = "One [1]. Two [2]. Three [1]. Four [2]. Five [1]. Six [2]. Seven [1]. Eight";
        assert_eq!(
            first_sentences(text, 6, false),
            "One [1]. Two [2]. Three [1]. Four [2]. Five [1]. Six [2]."
        );
        assert_eq!(
            first_sentences("One [1]. Two [2]. Three is cut", 6, true),
            "One [1]. Two [2]."
        );
        assert_eq!(
            first_sentences("One [1]. Two [2]. Three", 6, false),
            "One [1]. Two [2]. Three"
        );
    }

    #[test]
    fn the_framing_of_a_restated_fact_is_taken_off() {
        assert_eq!(
            prose(
                "The passage explains that plain VACUUM takes no exclusive lock [1]. The \
                 passage also mentions that the option list can be in any order [1]. \
                 According to the passage, autovacuum is on [1]. The passage describes locks \
                 [1]. A note on the passage that matters [1]. It also mentions that WAL is \
                 written first [2]. It explains that a checkpoint flushes pages [2]. It follows \
                 that nothing is lost [2]. Finally, the passage notes that GIN is inverted [3]."
            ),
            "Plain VACUUM takes no exclusive lock [1]. The option list can be in any order \
             [1]. Autovacuum is on [1]. The passage describes locks [1]. A note on the \
             passage that matters [1]. WAL is written first [2]. A checkpoint flushes pages \
             [2]. It follows that nothing is lost [2]. GIN is inverted [3]."
        );
    }
}
