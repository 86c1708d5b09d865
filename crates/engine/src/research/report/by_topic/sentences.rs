//! Which of a section's sentences a reader can read where they stand: none cut off or pasted
//! without what it leans on, none pointing back at a sentence that is not there, none about
//! another identifier than the question's.

use super::super::by_source::says_something;
use crate::research::support;

/// The sentences a reader can read on their own: none that says nothing, that was cut off or
/// pasted without what it leans on (an elision, a lead-in ending in `:`, code or brackets left
/// open), that opens a section with a word pointing back ("This", "Therefore"), or that talks
/// about the passage instead of its subject.
pub(in crate::research::report) fn readable(sentences: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in sentences {
        let text = support::without_markers(&s);
        let points_back = points_back(&text);
        // An elision at either end (a sentence cut out of its context) breaks it; one inside
        // ("INSERT ... ON CONFLICT") is the manual's own.
        let plain = text.trim().trim_end_matches(['.', '!', '?']);
        let elided = |t: &str| {
            t.starts_with(['…']) || t.starts_with("...") || t.ends_with('…') || t.ends_with("...")
        };
        let open_paren = text
            .rfind('(')
            .is_some_and(|o| text.rfind(')').is_none_or(|c| c < o));
        let broken = elided(plain)
            || text.contains("[…]")
            || text.trim_end().ends_with(':')
            || text.matches('`').count() % 2 == 1
            || open_paren
            || text.to_lowercase().contains("the passage");
        if says_something(&s) && !broken && !(out.is_empty() && points_back) {
            out.push(s);
        }
    }
    out
}

/// Whether a sentence opens with a word pointing back at one before it ("It", "This",
/// "However,"): it reads only after that one.
pub(super) fn points_back(text: &str) -> bool {
    let first_word = text.split_whitespace().next().unwrap_or("");
    [
        "This",
        "These",
        "Therefore,",
        "Thus,",
        "However,",
        "It",
        "Its",
        "Such",
    ]
    .contains(&first_word)
}

/// Whether a sentence is about what the question names: when the question names identifiers
/// (`wanted`), a sentence naming identifiers but none of those is about another setting that a
/// source it was written from also describes ("The server_version_num setting reports …" in a
/// report on `shared_buffers`).
pub(in crate::research::report) fn about_the_question(sentence: &str, wanted: &[String]) -> bool {
    if wanted.is_empty() {
        return true;
    }
    let named: Vec<String> = crate::lexical::names(&support::without_markers(sentence))
        .into_iter()
        .filter(|n| n.contains('_'))
        .collect();
    named.is_empty() || named.iter().any(|n| wanted.contains(n))
}
