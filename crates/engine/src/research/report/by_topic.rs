//! The report written topic by topic (`report_form: "by_topic"`): what a reader who asked the
//! question would keep, from a model too small to write from all the findings at once.
//!
//! A report made a source at a time reads like annotated search hits: a section per retrieved
//! page under that page's title, off-topic pages included, the same fact in three sections,
//! and the one paragraph of synthesis written from memory. So:
//!
//! 1. one short structured call plans the report: a title of its own and 3–6 sections, each
//!    with the sub-question it answers (when the answer cannot be read, the topics the
//!    supervisor delegated are the sections);
//! 2. each source's part of the findings goes to every section it bears on (`assign`), at
//!    most `SOURCES_PER_SECTION` to a section, the strongest first; a source that bears on
//!    none is listed under "Consulted, not cited", not given a section;
//! 3. each section is written by one short call from its sources' excerpts (numbered as in the
//!    run), and only the sentences one of them supports are kept (`support::supported_among`);
//!    a sentence an earlier section already says, one cut off or left without its context
//!    (`[…]`, a lead-in ending in `:`, unbalanced code) is dropped; a section whose call kept
//!    nothing is not written (its question is named as not answered); under a written section
//!    go its sources' own sentences on its question that the report does not say, as marked
//!    quotations (`evidence`);
//!    the same call lists the values its sources give (a setting and its default, a function
//!    and its version), kept where the source gives that value after that name (`facts`) and
//!    listed below the section's prose when it does not give them; the quotations are for
//!    sections without;
//! 4. the answer comes first: one more short call answers the question from the sections'
//!    kept sentences, and only its sentences a section's source supports are kept, cited to
//!    it (else the sections' first sentences are the key points);
//! 5. a sub-question no source answered is named in a note ("not covered").

use super::by_source::{Part, heading, parts, prose, source, unsaid};
use crate::graph::{NodeContext, NodeError};
use crate::lexical::{Terms, Words, bearing, plain_words, terms, word_pairs};
use crate::llm::ResponseSchema;
use crate::research::ResearchDeps;
use crate::research::config::ResearchConfig;
use crate::research::fallbacks::{self, AgentFallback};
use crate::research::messages::{self as msg, Message};
use crate::research::model::{Caller, Role};
use crate::research::support::{self, Sources};
use facts::Fact;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::HashSet;

/// The most sections a report has: past six, a small model's outline repeats itself.
const SECTIONS_MAX: usize = 6;

/// The most sources one section is written from: a section call sees at most this many
/// excerpts (about 1,500 tokens), which a 1.5B model still reads whole.
const SOURCES_PER_SECTION: usize = 4;

/// The characters of one source's findings a section call is shown: its stretches that bear
/// most on the section's question.
const EXCERPT_CHARS: usize = 1_500;

/// How much a source must bear on a section to be written from (`lexical::bearing` over the
/// run's parts: a word of the section's heading or question found in one part of ten weighs 2,
/// in half of them 0.7): two of its words, as a rule. One word alone ("memory", "table") is
/// shared by pages on other subjects. Below it on every section, the source is consulted, not
/// cited.
const MIN_BEARING: f64 = 2.5;

/// How much a source must bear on a section, against the section it bears on most, to be
/// written from there too (see `assign`).
const SECOND_SECTION_SHARE: f64 = 0.6;

/// The fewest parts the bearing is weighed over (see `assign`).
const WEIGHED_AS: usize = 10;

/// The output cap of the outline, of one section and of the answer.
const SHORT_TOKENS: u32 = 500;

/// The most sentences of the answer kept: it answers in a short paragraph.
const ANSWER_SENTENCES: usize = 4;

/// A sentence whose pairs of adjacent content words an earlier kept sentence holds to this
/// share says nothing new (as `by_source::SAID_SHARE` reads "said").
const REPEAT_SHARE: f64 = 0.6;

/// One planned section: its heading and the question it answers.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Planned {
    pub heading: String,
    pub question: String,
}

/// The report's plan as the outline call answers it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default)]
pub struct Outline {
    pub title: String,
    pub sections: Vec<Planned>,
}

/// What `write` hands back: the body to check, the answer call's message (whose id the final
/// message keeps) and what follows the checked report (the sources consulted, not cited).
pub struct Written {
    pub text: String,
    pub message: Message,
    pub appendix: String,
}

/// What the report is about: the conversation, the brief and the topics the supervisor
/// delegated (the outline's fallback).
pub struct Subject<'a> {
    pub question: &'a str,
    pub brief: &'a str,
    pub topics: &'a [String],
}

/// Writes the report topic by topic (see the module's comment). None when no section kept a
/// sentence (the findings are then the report).
pub async fn write(
    deps: &ResearchDeps,
    ctx: &NodeContext,
    cfg: &ResearchConfig,
    subject: &Subject<'_>,
    findings: &str,
    numbered: &Sources,
) -> Result<Option<Written>, NodeError> {
    let caller = &Caller::new(deps, ctx, cfg);
    let parts = parts(findings);
    let outline = outline(caller, subject, numbered).await?;
    let assigned = assign(&parts, &outline.sections, subject.question);
    tracing::info!(
        sections = outline.sections.len(),
        sources = parts.len(),
        consulted = assigned.iter().filter(|a| a.is_empty()).count(),
        "writing the report a topic at a time"
    );
    let plan = Plan {
        outline: &outline,
        parts: &parts,
        assigned: &assigned,
    };
    let calls = outline.sections.iter().enumerate().map(|(i, planned)| {
        let mine: Vec<&Part> = plan.sources_of(i).collect();
        async move { section(caller, subject.question, planned, &mine, numbered).await }
    });
    let mut drafted = Vec::new();
    for written in futures::future::join_all(calls).await {
        drafted.push(written?);
    }
    let mut said = Said::default();
    let (mut sections, uncovered) = fresh_sections(&outline, drafted, &mut said);
    if sections.is_empty() {
        return Ok(None);
    }
    let answered = answer(caller, subject.question, &plan, &sections, numbered).await?;
    if answered.written {
        // What the answer says is not said again below it; a section left with nothing was
        // all in the answer.
        let mut told = Said::default();
        for s in support::sentences(&answered.text) {
            told.add(s);
        }
        for kept in &mut sections {
            kept.sentences.retain(|x| told.add(x));
        }
    }
    let mut text = format!("# {}\n\n{}\n\n", outline.title, answered.text);
    let asked = crate::lexical::names(subject.question);
    text.push_str(&plan.render(&sections, &answered.text, &asked, &mut said, numbered));
    if !uncovered.is_empty() {
        text.push_str(&format!(
            "> Note: the sources found did not answer: {}\n\n",
            uncovered.join("; ")
        ));
    }
    // Every source the report does not cite was consulted: one that bore on no section, and
    // one whose section kept nothing of it.
    let cited: HashSet<usize> = support::cited_numbers(&text).into_iter().collect();
    let consulted: Vec<usize> = parts
        .iter()
        .map(|p| p.number)
        .filter(|n| !cited.contains(n))
        .collect();
    Ok(Some(Written {
        text,
        message: answered.message,
        appendix: consulted_list(&consulted, numbered),
    }))
}

/// The outline and which section each source went to.
struct Plan<'a> {
    outline: &'a Outline,
    parts: &'a [Part],
    assigned: &'a [Vec<usize>],
}

/// A written section: the planned section it is (its index in the outline) and its checked
/// sentences.
struct Kept {
    planned: usize,
    sentences: Vec<String>,
    facts: Vec<Fact>,
}

impl Plan<'_> {
    /// The sources assigned to section `i`.
    fn sources_of(&self, i: usize) -> impl Iterator<Item = &Part> {
        self.parts
            .iter()
            .zip(self.assigned)
            .filter(move |(_, a)| a.contains(&i))
            .map(|(p, _)| p)
    }

    /// The sections under their headings, each followed by what its sources say that the
    /// report does not (`evidence`); a section with neither is left out.
    fn render(
        &self,
        sections: &[Kept],
        answer: &str,
        asked: &crate::lexical::WordSet,
        said: &mut Said,
        numbered: &Sources,
    ) -> String {
        let all_said = std::iter::once(answer)
            .chain(
                sections
                    .iter()
                    .flat_map(|k| k.sentences.iter().map(String::as_str)),
            )
            .collect::<Vec<_>>()
            .join(" ");
        let mut text = String::new();
        let mut listed = HashSet::new();
        for kept in sections {
            let planned = &self.outline.sections[kept.planned];
            // A value the prose gives, or an earlier section lists, is not listed again.
            let facts: Vec<String> = kept
                .facts
                .iter()
                .filter(|f| !f.said_in(&all_said) && listed.insert(f.name.to_ascii_lowercase()))
                .map(Fact::line)
                .collect();
            let quotes = if facts.is_empty() {
                let mine = self.sources_of(kept.planned);
                evidence(mine, planned, &all_said, asked, said, numbered)
            } else {
                Vec::new()
            };
            if kept.sentences.is_empty() && quotes.is_empty() && facts.is_empty() {
                continue;
            }
            text.push_str(&format!("## {}\n\n", planned.heading));
            if !kept.sentences.is_empty() {
                text.push_str(&format!("{}\n\n", kept.sentences.join(" ")));
            }
            if !facts.is_empty() {
                text.push_str(&format!("{}\n\n", facts.join("\n")));
            }
            for q in quotes {
                text.push_str(&format!("{q}\n\n"));
            }
        }
        text
    }
}

/// The drafted sections without what an earlier one says, and the questions of those no
/// source answered. A section whose every sentence an earlier one says is answered there. A
/// section the model kept nothing of is named as not answered even when a source that answers
/// was assigned to it: quoting its sources instead was tried and measured (py-02, 2026-12-07:
/// three sections of quotations from the documentation's index and What's New in 2.5, none
/// on exception groups).
fn fresh_sections(
    outline: &Outline,
    drafted: Vec<Drafted>,
    said: &mut Said,
) -> (Vec<Kept>, Vec<String>) {
    let mut sections = Vec::new();
    let mut uncovered = Vec::new();
    for (i, (planned, drafted)) in outline.sections.iter().zip(drafted).enumerate() {
        if drafted.sentences.is_empty() && drafted.facts.is_empty() {
            uncovered.push(planned.question.clone());
            continue;
        }
        let fresh: Vec<String> = drafted
            .sentences
            .into_iter()
            .filter(|s| said.add(s))
            .collect();
        if !fresh.is_empty() || !drafted.facts.is_empty() {
            sections.push(Kept {
                planned: i,
                sentences: fresh,
                facts: drafted.facts,
            });
        }
    }
    (sections, uncovered)
}

/// The sentences kept so far, by their pairs of adjacent content words.
#[derive(Default)]
struct Said {
    words: Words,
    pairs: rustc_hash::FxHashSet<(String, String)>,
}

impl Said {
    /// Keeps `sentence` unless what it says is said already; whether it was kept.
    fn add(&mut self, sentence: &str) -> bool {
        let pairs = word_pairs(&mut self.words, &support::without_markers(sentence));
        let known = pairs.intersection(&self.pairs).count();
        if !pairs.is_empty() && known as f64 >= REPEAT_SHARE * pairs.len() as f64 {
            return false;
        }
        self.pairs.extend(pairs);
        true
    }
}

/// The outline: the model's plan when it gives at least one usable section, else one section
/// per topic the supervisor delegated (or the question as the one section).
async fn outline(
    caller: &Caller<'_>,
    subject: &Subject<'_>,
    numbered: &Sources,
) -> Result<Outline, NodeError> {
    let prompt = caller.deps.prompts.render(
        "outline_report",
        &[("question", subject.question), ("brief", subject.brief)],
    );
    let mut req = caller.request(Role::FinalReport, vec![Message::human(prompt)])?;
    req.max_tokens = req.max_tokens.min(SHORT_TOKENS);
    let planned = match caller
        .structured::<Outline>(req, outline_schema(), None)
        .await
    {
        Ok(o) => Some(o),
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        Err(e) => {
            tracing::warn!(error = %e, "the report's outline could not be read");
            None
        }
    };
    let titles: Vec<&str> = numbered.list.iter().map(|s| s.title.as_str()).collect();
    let outline = planned.map(|o| tidy(o, subject.question, &titles));
    match outline {
        Some(o) if !o.sections.is_empty() => Ok(o),
        _ => {
            fallbacks::record(
                caller.ctx,
                AgentFallback::OutlineFromTopics.as_str(),
                "the outline named no section: the delegated topics are the sections",
            );
            Ok(from_topics(subject))
        }
    }
}

fn outline_schema() -> ResponseSchema {
    ResponseSchema {
        name: "ReportOutline".into(),
        description: "The report's title and its sections, each with the question it answers."
            .into(),
        schema: json!({"type": "object", "properties": {
            "title": {"type": "string", "description": "A short title naming the report's subject."},
            "sections": {"type": "array", "maxItems": SECTIONS_MAX, "items": {"type": "object",
                "properties": {
                    "heading": {"type": "string", "description": "A short heading naming the section's topic."},
                    "question": {"type": "string", "description": "The question the section answers."}},
                "required": ["heading", "question"]}}},
            "required": ["title", "sections"]}),
    }
}

/// The model's outline made usable: headings on one line without markdown, none repeated, none
/// a source's own title (a section is a topic, not a page), at most `SECTIONS_MAX`; a title
/// that is the question itself, or none, replaced (`title_for`).
fn tidy(outline: Outline, question: &str, source_titles: &[&str]) -> Outline {
    let same = |a: &str, b: &str| plain_words(a) == plain_words(b);
    let mut sections: Vec<Planned> = Vec::new();
    for s in outline.sections {
        let heading = heading(&s.heading);
        let asked = msg::excerpt(&s.question, 200);
        let asked = if asked.trim().is_empty() {
            heading.clone()
        } else {
            asked
        };
        let usable = !s.heading.trim().is_empty()
            && !sections.iter().any(|k| same(&k.heading, &heading))
            && !source_titles.iter().any(|t| same(t, &heading));
        if usable && sections.len() < SECTIONS_MAX {
            sections.push(Planned {
                heading,
                question: asked,
            });
        }
    }
    let title = heading(&outline.title);
    let asked = msg::excerpt(question, 200);
    let title = if outline.title.trim().is_empty() || same(&title, &asked) {
        title_for(&sections, question)
    } else {
        title
    };
    Outline { title, sections }
}

/// A title when the model gave none of its own: the sections' topics ("Autovacuum, its
/// thresholds and monitoring"), else the question's words without the asking.
fn title_for(sections: &[Planned], question: &str) -> String {
    let headings: Vec<&str> = sections
        .iter()
        .map(|s| s.heading.as_str())
        .take(3)
        .collect();
    match headings.as_slice() {
        [] => {
            let asked = msg::excerpt(question, 120);
            let asked = asked.trim_end_matches(['?', '.', ' ']);
            format!("Research report: {asked}")
        }
        [one] => (*one).to_owned(),
        [first @ .., last] => format!("{} and {}", first.join(", "), last),
    }
}

/// The outline when the model gave none: a section per delegated topic, else one for the
/// question.
fn from_topics(subject: &Subject<'_>) -> Outline {
    let mut sections: Vec<Planned> = subject
        .topics
        .iter()
        .filter(|t| !t.trim().is_empty())
        .take(SECTIONS_MAX)
        .map(|t| Planned {
            heading: heading(&msg::excerpt(first_sentence(t), 80)),
            question: msg::excerpt(t, 200),
        })
        .collect();
    if sections.is_empty() {
        sections.push(Planned {
            heading: "What the sources say".to_owned(),
            question: msg::excerpt(subject.question, 200),
        });
    }
    Outline {
        title: title_for(&sections, subject.question),
        sections,
    }
}

fn first_sentence(text: &str) -> &str {
    support::sentences(text)
        .first()
        .copied()
        .unwrap_or(text)
        .trim()
}

/// The sections each part goes to (none: consulted, not cited): every section whose heading
/// and question it bears on at least `MIN_BEARING`, strongest claims first, at most
/// `SOURCES_PER_SECTION` to a section. A page often answers several of the outline's questions
/// (one on autovacuum names its thresholds, its workers and its naptime): given to one section
/// only, the others were written without it and said their question went unanswered. What two
/// sections would say twice, `Said` drops. A source that holds none of the identifiers the
/// question names (`identifiers`) goes to none: a page on `vacuum_cost_delay` shares "default"
/// and "value" with a section on `shared_buffers`' default, and its sentences were written there.
fn assign(parts: &[Part], sections: &[Planned], question: &str) -> Vec<Vec<usize>> {
    let wanted = identifiers(question);
    let on_the_question =
        |p: &Part| wanted.is_empty() || wanted.iter().any(|id| p.text.contains(id.as_str()));
    let mut words = Words::new();
    let mut found: Vec<Terms> = parts.iter().map(|p| terms(&mut words, &p.text)).collect();
    // A run with few sources is weighed as if it had `WEIGHED_AS` (the rest empty): with two
    // sources, a word one of them holds would otherwise weigh 0.7, and no source of a run
    // that found one could reach `MIN_BEARING`.
    found.resize(parts.len().max(WEIGHED_AS), Terms::default());
    let scores: Vec<Vec<f64>> = sections
        .iter()
        .map(|s| {
            let query = terms(&mut words, &format!("{} {}", s.heading, s.question));
            bearing(&query, &found)
        })
        .collect();
    // Why a source went to a section or to none (`RUST_LOG=deep_research_engine::research::report=debug`).
    for (s, per_part) in sections
        .iter()
        .zip(&scores)
        .filter(|_| tracing::enabled!(tracing::Level::DEBUG))
    {
        let weighed: Vec<(usize, f64)> = parts
            .iter()
            .zip(per_part)
            .map(|(p, score)| (p.number, (score * 10.0).round() / 10.0))
            .collect();
        tracing::debug!(section = %s.heading, ?weighed, "how much each source bears on a section");
    }
    // Strongest claims first, so a full section holds its best sources.
    let mut wishes: Vec<(usize, usize, f64)> = Vec::new();
    for (si, per_part) in scores.iter().enumerate() {
        for (pi, &score) in per_part.iter().enumerate().take(parts.len()) {
            if score >= MIN_BEARING && on_the_question(&parts[pi]) {
                wishes.push((pi, si, score));
            }
        }
    }
    // A source's other sections are those it bears on nearly as much as on its best: one that
    // names a section's words in passing is not written from there.
    let mut best = vec![0.0f64; parts.len()];
    for &(pi, _, score) in &wishes {
        best[pi] = best[pi].max(score);
    }
    wishes.retain(|&(pi, _, score)| score >= SECOND_SECTION_SHARE * best[pi]);
    wishes.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut out = vec![Vec::new(); parts.len()];
    let mut taken = vec![0usize; sections.len()];
    for (pi, si, _) in wishes {
        if taken[si] < SOURCES_PER_SECTION {
            out[pi].push(si);
            taken[si] += 1;
        }
    }
    for sections in &mut out {
        sections.sort_unstable();
    }
    out
}

/// The identifiers a question names: words with `_` (`shared_buffers`) or a capital inside
/// lower-case letters (`TaskGroup`), not acronyms ("WAL") nor capitalised words, which name
/// the subject less surely.
pub(super) fn identifiers(question: &str) -> Vec<String> {
    let mut out: Vec<String> = crate::lexical::names(question)
        .into_iter()
        .filter(|n| {
            let camel =
                n.chars().skip(1).any(char::is_uppercase) && n.chars().any(char::is_lowercase);
            (n.contains('_') && n.chars().any(char::is_alphabetic)) || camel
        })
        .collect();
    out.sort();
    out
}

/// What one section's calls gave: its checked sentences and the values its sources give.
#[derive(Default)]
struct Drafted {
    sentences: Vec<String>,
    facts: Vec<Fact>,
}

/// One section: its checked sentences and the values its sources give, from one short
/// structured call shown its sources' excerpts. Sentences are kept where one of the sources
/// supports them, values where a source gives them after their name (`facts::checked`);
/// nothing for a section no source bears on or whose call failed.
async fn section(
    caller: &Caller<'_>,
    question: &str,
    planned: &Planned,
    mine: &[&Part],
    numbered: &Sources,
) -> Result<Drafted, NodeError> {
    if mine.is_empty() {
        return Ok(Drafted::default());
    }
    let shown = shown(planned, mine, numbered);
    let prompt = caller.deps.prompts.render(
        "write_section",
        &[
            ("question", question),
            ("heading", &planned.heading),
            ("section_question", &planned.question),
            ("sources", &shown),
        ],
    );
    let mut req = caller.request(Role::FinalReport, vec![Message::human(prompt)])?;
    req.max_tokens = req.max_tokens.min(SHORT_TOKENS);
    let answer = {
        // The process-wide cap of short calls (page summaries use it too).
        let _slot = caller.deps.summary_slots.acquire().await;
        caller
            .structured::<facts::Drafting>(req, facts::schema(), None)
            .await
    };
    let drafting = match answer {
        Ok(d) => d,
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        Err(e) => {
            tracing::warn!(section = %planned.heading, error = %e, "writing a section failed");
            facts::Drafting::default()
        }
    };
    let numbers: Vec<usize> = mine.iter().map(|p| p.number).collect();
    let written = prose(&drafting.sentences.join(" "));
    // Nothing kept: the section's sources did not answer its question (or the call failed),
    // and the report says so rather than quoting pages that do not answer. Measured on six
    // questions, the quotations that stood for such sections were off-topic pages' sentences.
    let wanted = identifiers(question);
    let mut kept = readable(support::supported_among(&written, &numbers, numbered));
    kept.retain(|s| about_the_question(s, &wanted));
    let facts = facts::checked(drafting.facts, mine);
    tracing::debug!(section = %planned.heading, sources = ?numbers, written = %written,
        kept = kept.len(), facts = facts.len(), "a section written");
    Ok(Drafted {
        sentences: kept,
        facts,
    })
}

/// The excerpts a section's call is shown: each source's stretches that bear most on the
/// section's question, under its number and title.
fn shown(planned: &Planned, mine: &[&Part], numbered: &Sources) -> String {
    let query = format!("{} {}", planned.heading, planned.question);
    mine.iter()
        .map(|p| {
            let title = source(numbered, p.number).map_or("", |s| s.title.as_str());
            let excerpt = crate::tools::excerpts::excerpts(&p.text, &query, EXCERPT_CHARS);
            format!("[{}] {title}\n{excerpt}", p.number)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The answer above the sections: the answer call's sentences that a source of the sections
/// supports, each cited to it, at most `ANSWER_SENTENCES`; when none is kept, the sections' first
/// sentences as key points. The call streams, and its message is the report's.
async fn answer(
    caller: &Caller<'_>,
    question: &str,
    plan: &Plan<'_>,
    sections: &[Kept],
    numbered: &Sources,
) -> Result<Answered, NodeError> {
    let findings = sections
        .iter()
        .map(|k| {
            let heading = &plan.outline.sections[k.planned].heading;
            let values = k
                .facts
                .iter()
                .map(|f| format!("{}: {} [{}].", f.name, f.value, f.source));
            let said: Vec<String> = k.sentences.iter().cloned().chain(values).collect();
            format!("{heading}: {}", said.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let numbers: Vec<usize> = sections
        .iter()
        .flat_map(|k| {
            let cited = k.sentences.iter().flat_map(|x| support::cited_numbers(x));
            cited.chain(k.facts.iter().map(|f| f.source))
        })
        .collect();
    let prompt = caller.deps.prompts.render(
        "answer_from_sections",
        &[("question", question), ("findings", &findings)],
    );
    let mut req = caller.request(Role::FinalReport, vec![Message::human(prompt)])?;
    req.max_tokens = req.max_tokens.min(SHORT_TOKENS);
    let message = match caller.call(req, true).await {
        Ok(resp) => Message::from_model(resp.message),
        Err(NodeError::Cancelled) => return Err(NodeError::Cancelled),
        // The sections stand: their first sentences answer instead.
        Err(e) => {
            tracing::warn!(error = %e, "the answer above the sections could not be written");
            Message::ai(&format!("run-{}", uuid::Uuid::new_v4()), "")
        }
    };
    // A sentence the model left uncited is kept under the section source that supports it.
    // The answer joins sentences of several sections: one pointing back has nothing to point at.
    let wanted = identifiers(question);
    let mut kept = readable(support::supported_among(
        &prose(&message.text()),
        &numbers,
        numbered,
    ));
    kept.retain(|s| !points_back(&support::without_markers(s)) && about_the_question(s, &wanted));
    if kept.is_empty() {
        let points: Vec<String> = sections
            .iter()
            .filter_map(|k| k.sentences.iter().find(|x| !x.starts_with('>')))
            .take(ANSWER_SENTENCES)
            .map(|s| format!("- {s}"))
            .collect();
        return Ok(Answered {
            text: points.join("\n"),
            message,
            written: false,
        });
    }
    let text = kept
        .into_iter()
        .take(ANSWER_SENTENCES)
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Answered {
        text,
        message,
        written: true,
    })
}

/// The answer above the sections, the message its call streamed, and whether the model wrote
/// it (else it is the sections' first sentences, as key points).
struct Answered {
    text: String,
    message: Message,
    written: bool,
}

/// "Consulted, not cited": the sources that bore on no section, by title and location.
fn consulted_list(numbers: &[usize], numbered: &Sources) -> String {
    let lines: Vec<String> = numbers
        .iter()
        .filter_map(|&n| source(numbered, n))
        .map(|s| {
            let title = if s.title.is_empty() { &s.url } else { &s.title };
            format!("- {}: {}", heading(title), s.url)
        })
        .collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!("\n\n### Consulted, not cited\n\n{}\n", lines.join("\n"))
    }
}

mod facts;
mod quotes;
mod sentences;

use quotes::evidence;

use sentences::points_back;
pub(super) use sentences::{about_the_question, readable};

#[cfg(test)]
mod tests;
