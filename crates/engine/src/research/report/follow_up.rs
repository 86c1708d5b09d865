//! `answer_follow_up`: a question asked on a thread whose report is written, answered from the
//! sources that report was written from when they can answer it, researched again when they
//! cannot (`follow_up`).
//!
//! Open Deep Research starts over on every message: clarify, brief, supervisor, researchers,
//! report — minutes on a local model, dollars on a hosted one — when the answer to "and what is
//! its default?" is usually in a page already read. Here the sources bearing most on the
//! question are shown to one short call, which answers in a few cited sentences; only the
//! sentences a shown source supports are kept (`support::supported_among`), then the answer
//! is checked like a report (its Sources list, the `citations` event). Nothing kept means the
//! sources hold no answer: under `auto` the question is researched (a new brief, the sources
//! gathered kept), under `answer` the reply says so. The choice and its reason are a `custom`
//! event and the state's `follow_up`.

use super::by_source::prose;
use super::by_topic::{about_the_question, identifiers, readable};
use super::{asked, check_citations};
use crate::graph::{Command, END, NodeContext, NodeError};
use crate::lexical::{Terms, Words, bearing, terms};
use crate::research::config::FollowUp;
use crate::research::events::ResearchEvent;
use crate::research::messages::{self as msg, Message};
use crate::research::metering::{metered, resume_meter};
use crate::research::model::{Caller, Deps, Role, run_config};
use crate::research::state::{AgentState, AgentUpdate, FollowUpMode, FollowUpTurn};
use crate::research::support::{Sources, Uncited};

/// The most sources the answer call is shown (about 1,500 tokens of excerpts).
const SOURCES_SHOWN: usize = 4;

/// The characters of one source the answer call is shown: its stretches bearing most on the
/// question (as a by-topic section is shown them).
const EXCERPT_CHARS: usize = 1_500;

/// The share of the question's content words (weighed by rarity among the sources) one source
/// must hold for the sources to be asked at all: below it ("What is the capital of France?"
/// over a database manual) no call is made and the question is researched. A kept sentence,
/// or a quotation, must hold this share of them too (`bears_on`).
const HELD_SHARE: f64 = 0.5;

/// The output cap of the answer: a few sentences.
const SHORT_TOKENS: u32 = 400;

/// The most sentences of the answer kept.
const ANSWER_SENTENCES: usize = 4;

/// The most sentences, and characters, of a source quoted when the model's answer is not
/// supported.
const QUOTE_SENTENCES: usize = 3;
const QUOTE_CHARS: usize = 500;

/// What the answer call writes when the sources do not answer.
const NOT_IN_SOURCES: &str = "NOT IN THE SOURCES";

/// Whether this turn is a question on a written report: the thread has a report and the
/// user spoke last.
pub(in crate::research) fn is_follow_up(state: &AgentState) -> bool {
    let reported = state
        .final_report
        .as_deref()
        .is_some_and(|r| !r.trim().is_empty());
    let user_spoke = state
        .messages
        .last()
        .is_some_and(|m| m.kind() == msg::Kind::Human);
    reported && user_spoke
}

/// Whether a message asks for more research rather than an answer ("research this further",
/// "look into it more", "search again").
pub(in crate::research) fn asks_for_research(text: &str) -> bool {
    let text = text.to_lowercase();
    const ASKS: [&str; 8] = [
        "research this further",
        "research it further",
        "research further",
        "research more",
        "look into it further",
        "look into this further",
        "search again",
        "dig deeper",
    ];
    ASKS.iter().any(|a| text.contains(a))
}

/// Why this turn re-runs the thread's earlier question, if it does: the same question asked
/// again (a cron on the thread sends it every time) or a request to run the research again.
/// A re-run is researched afresh and its report ends with what changed (`what_changed.rs`).
pub(in crate::research) fn reruns(state: &AgentState) -> Option<&'static str> {
    let mut asked: Vec<String> = state
        .messages
        .iter()
        .filter(|m| m.kind() == msg::Kind::Human)
        .map(Message::text)
        .collect();
    let last = asked.pop()?;
    let key = question_key(&last);
    if !key.is_empty() && asked.iter().any(|a| question_key(a) == key) {
        return Some("the thread's earlier question was asked again");
    }
    let text = last.to_lowercase();
    const AGAIN: [&str; 9] = [
        "run it again",
        "run this again",
        "run the research again",
        "rerun",
        "re-run",
        "research it again",
        "research this again",
        "redo the research",
        "update the report",
    ];
    AGAIN
        .iter()
        .any(|a| text.contains(a))
        .then_some("the message asks to run the research again")
}

/// A question in a comparable form: its words, lower-cased.
fn question_key(text: &str) -> String {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The record and the `custom` event of a choice to research, for the update that goes on to
/// the brief.
pub(in crate::research) fn researched(ctx: &NodeContext, reason: &str) -> FollowUpTurn {
    turn(ctx, FollowUpMode::Researched, reason)
}

/// The record and the `custom` event of a re-run of the thread's question.
pub(in crate::research) fn rerun(ctx: &NodeContext, reason: &str) -> FollowUpTurn {
    turn(ctx, FollowUpMode::Rerun, reason)
}

fn turn(ctx: &NodeContext, mode: FollowUpMode, reason: &str) -> FollowUpTurn {
    ResearchEvent::FollowUp {
        mode,
        reason: reason.to_owned(),
    }
    .send(ctx);
    FollowUpTurn {
        mode,
        reason: reason.to_owned(),
        citations: None,
    }
}

/// `answer_follow_up` (see the module's comment).
pub(in crate::research) async fn node(
    deps: Deps,
    state: AgentState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    resume_meter(&ctx, &state).await;
    let cfg = run_config(&ctx)?;
    let question = state.messages.last().map(Message::text).unwrap_or_default();
    if cfg.follow_up == FollowUp::Auto && asks_for_research(&question) {
        return research(&ctx, "the question asks for more research");
    }
    let numbered = Sources::from_state(&state.sources).with_question(&asked(&state));
    let earlier = first_question(&state);
    let shown = shown_sources(&state, &numbered, &question, &earlier);
    let auto = cfg.follow_up == FollowUp::Auto;
    if shown.is_empty() {
        let reason = "no source of the report bears on the question";
        return if auto {
            research(&ctx, reason)
        } else {
            not_answered(&ctx, reason)
        };
    }
    let caller = Caller::new(&deps, &ctx, &cfg);
    let listing = shown
        .iter()
        .map(|s| format!("[{}] {}\n{}", s.number, s.title, s.excerpt))
        .collect::<Vec<_>>()
        .join("\n\n");
    let prompt = deps.prompts.render(
        "answer_follow_up",
        &[
            ("conversation", &conversation(&state, &earlier)),
            ("question", &question),
            ("sources", &listing),
        ],
    );
    let mut req = caller.request(Role::FinalReport, vec![Message::human(prompt)])?;
    req.max_tokens = req.max_tokens.min(SHORT_TOKENS);
    let message = Message::from_model(caller.call(req, true).await?.message);
    let written = message.text();
    let numbers: Vec<usize> = shown.iter().map(|s| s.number).collect();
    let kept = supported_answer(&written, &question, &numbers, &numbered);
    tracing::debug!(written = %written, kept = kept.len(), sources = ?numbers,
        "a follow-up answered");
    if kept.is_empty()
        && let Some(quote) = quoted(&shown, &question)
    {
        // The model's answer did not stand (on the 1.5B model, a wrong default in two tries of
        // two): the source's own words that answer are quoted instead, marked as a quotation.
        return answered(&ctx, &state, &numbered, message, &quote, shown.len(), true);
    }
    if kept.is_empty() {
        let reason = "the report's sources support no answer to it";
        return if auto {
            research(&ctx, reason)
        } else {
            not_answered(&ctx, reason)
        };
    }
    let answer: Vec<String> = kept.into_iter().take(ANSWER_SENTENCES).collect();
    let text = answer.join(" ");
    answered(&ctx, &state, &numbered, message, &text, shown.len(), false)
}

/// The answer, checked as a report, as the run's last message (under the streamed message's
/// id, so a client ends with the checked answer in place of the tokens it saw).
fn answered(
    ctx: &NodeContext,
    state: &AgentState,
    numbered: &Sources,
    mut message: Message,
    text: &str,
    sources_shown: usize,
    quoted: bool,
) -> Result<Command, NodeError> {
    let checked = check_citations(ctx, text, &state.sources, numbered, Uncited::Remove);
    let reason = if quoted {
        format!(
            "quoted from the report's sources ({sources_shown} shown): the model's answer was \
             not supported"
        )
    } else {
        format!("answered from {sources_shown} of the report's sources")
    };
    ResearchEvent::FollowUp {
        mode: FollowUpMode::Answered,
        reason: reason.clone(),
    }
    .send(ctx);
    message.set_text(&checked.report);
    Command::write(AgentUpdate {
        messages: Some(vec![message]),
        follow_up: Some(FollowUpTurn {
            mode: FollowUpMode::Answered,
            reason,
            citations: Some(checked.support),
        }),
        ..metered(ctx)
    })
    .map(|c| c.goto(END))
}

/// The stretch of a shown source that answers the question in its own words, as a marked
/// quotation: the sentence bearing most on the question that names the question's setting
/// (when it names one), with the sentences after it up to the first that gives a number
/// (manuals say "The default is three processes." after naming the setting), at most
/// `QUOTE_SENTENCES` and `QUOTE_CHARS`. None when no source has a sentence both naming what
/// was asked and giving a detail (a number, or a name the question does not use).
fn quoted(shown: &[Shown], question: &str) -> Option<String> {
    let wanted = identifiers(question);
    let mut words = Words::new();
    let asked = asked_terms(&mut words, question);
    let asked_names = crate::lexical::names(question);
    for s in shown {
        let text = s.text.as_str();
        let spans = crate::lexical::sentence_spans(text);
        let pieces: Vec<Terms> = spans
            .iter()
            .map(|&(a, b)| terms(&mut words, &text[a..b]))
            .collect();
        let scores = bearing(&asked, &pieces);
        let names_it = |i: usize| {
            let plain = &text[spans[i].0..spans[i].1];
            wanted.is_empty() || wanted.iter().any(|w| plain.contains(w.as_str()))
        };
        let Some(best) = (0..spans.len())
            .filter(|&i| names_it(i) && scores[i] > 0.0)
            .max_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(b.cmp(&a)))
        else {
            continue;
        };
        let mut end = best;
        let gives_number = |i: usize| !pieces[i].1.is_empty();
        while !gives_number(end) && end + 1 < spans.len() && end + 1 < best + QUOTE_SENTENCES {
            end += 1;
        }
        let stretch = text[spans[best].0..spans[end].1].trim();
        if !bears_on(stretch, question) {
            continue;
        }
        let detail = gives_number(end)
            || crate::lexical::names(stretch)
                .iter()
                .any(|n| !asked_names.contains(n));
        if detail && stretch.chars().count() <= QUOTE_CHARS {
            let flat = stretch.split_whitespace().collect::<Vec<_>>().join(" ");
            return Some(format!("> “{flat}” [{}]", s.number));
        }
    }
    None
}

/// The words a question asks with, not about: left out of what a source must hold.
const ASKING: [&str; 16] = [
    "what", "which", "how", "why", "when", "where", "who", "whom", "whose", "does", "do", "did",
    "can", "could", "tell", "explain",
];

/// The content words of a question, its asking words left out ("what", "how", "does": the
/// stop words of statements are not those of questions).
fn asked_terms(words: &mut Words, question: &str) -> Terms {
    let content: Vec<&str> = question
        .split_whitespace()
        .filter(|w| {
            let bare = w
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            !ASKING.contains(&bare.as_str())
        })
        .collect();
    terms(words, &content.join(" "))
}

/// Whether a sentence holds at least `HELD_SHARE` of the question's content words: a true
/// sentence on something else does not answer it (the 1.5B model, asked how to create a GIN
/// index after a report on autovacuum, restated the report's question's answer).
fn bears_on(sentence: &str, question: &str) -> bool {
    let mut words = Words::new();
    let (asked, _) = asked_terms(&mut words, question);
    let (held, _) = terms(
        &mut words,
        &crate::research::support::without_markers(sentence),
    );
    let share = asked.intersection(&held).count() as f64;
    !asked.is_empty() && share >= HELD_SHARE * asked.len() as f64
}

/// Whether the question asks for a quantity ("How often …", "what is the default …"): its
/// answer gives a number. On the 1.5B model, "The default settings control how often and how
/// many workers run [1]" answered "How often does the launcher start a worker by default?".
fn asks_for_a_quantity(question: &str) -> bool {
    let q = question.to_lowercase();
    [
        "how often",
        "how many",
        "how much",
        "how large",
        "how long",
        "how big",
        "default",
    ]
    .iter()
    .any(|a| q.contains(a))
}

/// Whether a sentence gives a number (in digits or spelled out).
fn gives_a_number(sentence: &str) -> bool {
    let mut words = Words::new();
    !terms(
        &mut words,
        &crate::research::support::without_markers(sentence),
    )
    .1
    .is_empty()
}

/// The sentences of the model's answer that stand: supported by a shown source, on the
/// question asked, and giving a number when it asks for one; none when the model said the
/// sources do not answer.
fn supported_answer(
    written: &str,
    question: &str,
    numbers: &[usize],
    numbered: &Sources,
) -> Vec<String> {
    if written.contains(NOT_IN_SOURCES) {
        return Vec::new();
    }
    // A sentence naming settings but none the follow-up names answers another question
    // (the 1.5B model answered the one before: "autovacuum_max_workers is 5" to a question
    // on autovacuum_vacuum_scale_factor).
    let wanted = identifiers(question);
    let mut kept = readable(crate::research::support::supported_among(
        &prose(written),
        numbers,
        numbered,
    ));
    let quantity = asks_for_a_quantity(question);
    kept.retain(|s| {
        about_the_question(s, &wanted) && bears_on(s, question) && (!quantity || gives_a_number(s))
    });
    kept
}

/// Goes on to a new brief, saying why.
fn research(ctx: &NodeContext, reason: &str) -> Result<Command, NodeError> {
    let upd = AgentUpdate {
        follow_up: Some(researched(ctx, reason)),
        ..metered(ctx)
    };
    Ok(Command::write(upd)?.goto("write_research_brief"))
}

/// The reply under `follow_up = "answer"` when the sources hold no answer: it says so, and how
/// to have the question researched, rather than answering from the model's memory.
fn not_answered(ctx: &NodeContext, reason: &str) -> Result<Command, NodeError> {
    ResearchEvent::FollowUp {
        mode: FollowUpMode::Answered,
        reason: reason.to_owned(),
    }
    .send(ctx);
    let text = "The sources this report was written from do not answer that question. Ask \
                again with `follow_up` set to `research` (or say \"research this further\") to \
                have it researched.";
    let message = Message::ai(&format!("run-{}", uuid::Uuid::new_v4()), text);
    Ok(Command::write(AgentUpdate {
        messages: Some(vec![message]),
        follow_up: Some(FollowUpTurn {
            mode: FollowUpMode::Answered,
            reason: reason.to_owned(),
            citations: None,
        }),
        ..metered(ctx)
    })?
    .goto(END))
}

/// The question the report answers: the user's first message (follow-ups since are left out:
/// shown them, the 1.5B model answered the one before instead of the one asked).
fn first_question(state: &AgentState) -> String {
    state
        .messages
        .iter()
        .find(|m| m.kind() == msg::Kind::Human)
        .map(Message::text)
        .unwrap_or_default()
}

/// What the answer call is told of the conversation: the report's question and title (a
/// follow-up leans on them: "and its default?").
fn conversation(state: &AgentState, earlier: &str) -> String {
    let title = state
        .final_report
        .as_deref()
        .and_then(|r| r.lines().find(|l| l.starts_with("# ")))
        .map(|l| l.trim_start_matches("# ").trim())
        .unwrap_or_default();
    format!("Asked: {earlier}\nReport: {title}")
}

/// One source as the answer call is shown it.
struct Shown {
    number: usize,
    title: String,
    excerpt: String,
    /// The source's whole text (a quotation is looked for in all of it).
    text: String,
}

/// The sources that bear most on the follow-up (its own words weighing twice the earlier
/// questions'), at most `SOURCES_SHOWN`, each by its excerpts on both; none when no source
/// holds `HELD_SHARE` of the follow-up's content words.
fn shown_sources(
    state: &AgentState,
    numbered: &Sources,
    question: &str,
    earlier: &str,
) -> Vec<Shown> {
    let query = format!("{question}\n{earlier}");
    let mut candidates: Vec<Shown> = Vec::new();
    for source in &state.sources {
        let Some(number) = numbered.number_of(&source.url) else {
            continue;
        };
        if source.text.trim().is_empty() || candidates.iter().any(|c| c.number == number) {
            continue;
        }
        candidates.push(Shown {
            number,
            title: source.title.clone(),
            excerpt: crate::tools::excerpts::excerpts(&source.text, &query, EXCERPT_CHARS),
            text: source.text.clone(),
        });
    }
    let mut words = Words::new();
    let asked: Terms = asked_terms(&mut words, question);
    let before: Terms = terms(&mut words, earlier);
    let pieces: Vec<Terms> = candidates
        .iter()
        .map(|c| terms(&mut words, &format!("{} {}", c.title, c.excerpt)))
        .collect();
    // Weighed by rarity among the sources: a word one source holds ("GIN" in a page on
    // indexes) weighs much, one every source holds ("table") little. A word none holds weighs
    // as one a single source has: as often the question's phrasing ("How large") as its subject.
    let n = pieces.len() as f64;
    let weight = |w: &String| {
        let df = pieces.iter().filter(|(stems, _)| stems.contains(w)).count() as f64;
        ((n + 1.0) / (df.max(1.0) + 0.5)).ln()
    };
    let total: f64 = asked.0.iter().map(weight).sum();
    let held_most = pieces
        .iter()
        .map(|(stems, _)| {
            asked
                .0
                .iter()
                .filter(|w| stems.contains(*w))
                .map(weight)
                .sum()
        })
        .fold(0.0, f64::max);
    if asked.0.is_empty() || held_most < HELD_SHARE * total {
        return Vec::new();
    }
    let (own, context) = (bearing(&asked, &pieces), bearing(&before, &pieces));
    let mut ranked: Vec<(f64, Shown)> = candidates
        .into_iter()
        .enumerate()
        .map(|(i, c)| (2.0 * own[i] + context[i], c))
        .filter(|(score, _)| *score > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    ranked
        .into_iter()
        .take(SOURCES_SHOWN)
        .map(|(_, c)| c)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_for_research_is_told_from_a_question() {
        assert!(asks_for_research("Please research this further."));
        assert!(asks_for_research("Can you dig deeper into replication?"));
        assert!(!asks_for_research(
            "What is the default of autovacuum_naptime?"
        ));
        assert!(!asks_for_research("How was the research done?"));
    }

    const WORKERS: &str = "autovacuum_max_workers (integer) Specifies the maximum number of \
        autovacuum processes (other than the autovacuum launcher) that may be running at any \
        one time. The default is three. This parameter can only be set at server start. \
        autovacuum_naptime (integer) Specifies the minimum delay between autovacuum runs on \
        any given database. The default is one minute (1min).";

    fn shown() -> Vec<Shown> {
        vec![Shown {
            number: 3,
            title: "Automatic Vacuuming".into(),
            excerpt: WORKERS.into(),
            text: WORKERS.into(),
        }]
    }

    /// Where the model's answer does not stand, the source's own words answer: the sentence
    /// naming the setting asked about, up to the one that gives its number.
    #[test]
    fn the_quotation_names_what_was_asked_and_gives_its_number() {
        let quote = quoted(
            &shown(),
            "What is the default value of autovacuum_max_workers?",
        );
        assert_eq!(
            quote.as_deref(),
            Some(
                "> “autovacuum_max_workers (integer) Specifies the maximum number of autovacuum \
                 processes (other than the autovacuum launcher) that may be running at any one \
                 time. The default is three.” [3]"
            )
        );
        assert_eq!(
            quoted(&shown(), "How do I create a GIN index on a jsonb column?"),
            None
        );
    }

    #[test]
    fn a_question_for_a_quantity_is_told_from_one_for_a_reason() {
        assert!(asks_for_a_quantity(
            "How often does the launcher start a worker?"
        ));
        assert!(asks_for_a_quantity("And its default?"));
        assert!(!asks_for_a_quantity("Why does VACUUM FULL lock the table?"));
        assert!(gives_a_number("The default is three [1]."));
        assert!(gives_a_number("It wakes every 60 seconds."));
        assert!(!gives_a_number(
            "The default settings control how often workers run [1]."
        ));
    }

    #[test]
    fn a_true_sentence_on_something_else_does_not_answer() {
        let asked = "How often does the autovacuum launcher start a worker by default?";
        assert!(!bears_on(
            "The autovacuum daemon decides to vacuum a table based on the number of updated \
             tuples [1].",
            asked
        ));
        assert!(bears_on(
            "The autovacuum launcher starts a worker every minute by default [1].",
            asked
        ));
    }
}
