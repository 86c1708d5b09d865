//! What a section's sources say that the report does not, quoted under it (`evidence`): the
//! values and names a 1.5B model's section drops, and the answer of a section the model wrote
//! from memory, shown in the source's own words and marked as a quotation.

use super::{Part, Planned, Said, readable, unsaid};
use crate::lexical::{Words, terms};
use crate::research::support::{self, Sources};

/// The most sources quoted under a section for what it left out, and the characters of each
/// source's sentences looked through for it.
const EVIDENCE_QUOTES: usize = 2;
const EVIDENCE_CHARS: usize = 300;

/// The content words of its section's heading and question a quotation holds at the least
/// (`on_the_section`).
const QUOTE_SHARED_WORDS: usize = 3;

/// What the section's sources say on its question that the report does not: for each source
/// (at most `EVIDENCE_QUOTES`), its own sentence that bears most on the question, holds a
/// detail (`holds_a_detail`) and that no sentence of the report already says
/// (`by_source::unsaid`), as a marked quotation. A 1.5B model writing a section keeps its gist
/// and drops the setting names, defaults and numbers that answer; quoting them costs no call
/// and is not passed off as the report's own words.
pub(super) fn evidence<'a>(
    mine: impl Iterator<Item = &'a Part>,
    planned: &Planned,
    all_said: &str,
    asked: &crate::lexical::WordSet,
    said: &mut Said,
    numbered: &Sources,
) -> Vec<String> {
    let query = format!("{} {}", planned.heading, planned.question);
    let mut quotes = Vec::new();
    for part in mine {
        if quotes.len() == EVIDENCE_QUOTES {
            break;
        }
        let own = unsaid(&part.text, &query, all_said, EVIDENCE_CHARS);
        let kept = readable(support::supported_among(&own, &[part.number], numbered));
        if let Some(first) = kept
            .into_iter()
            .find(|s| holds_a_detail(s, asked) && on_the_section(s, &query) && said.add(s))
        {
            quotes.push(format!(
                "> “{}” [{}]",
                support::without_markers(&first),
                part.number
            ));
        }
    }
    quotes
}

/// Whether a sentence shares at least `QUOTE_SHARED_WORDS` content words with its section's
/// heading and question. Ranked within one page, a single rare word was enough to be quoted,
/// and on six questions two quotations in three were off the section's subject ("I/O timing
/// information is displayed in pg_stat_database …" under autovacuum's defaults).
pub(super) fn on_the_section(sentence: &str, query: &str) -> bool {
    let mut words = Words::new();
    let (wanted, _) = terms(&mut words, query);
    let (have, _) = terms(&mut words, &support::without_markers(sentence));
    wanted.intersection(&have).count() >= QUOTE_SHARED_WORDS
}

/// Whether a sentence holds what a small model's section drops: a number, or a name (a
/// setting, a command, a function) the question does not already name. A sentence of a page
/// with neither ("Each of these reasons dictates performing VACUUM …") adds nothing a reader
/// needs quoted.
pub(super) fn holds_a_detail(sentence: &str, asked: &crate::lexical::WordSet) -> bool {
    let plain = support::without_markers(sentence);
    plain.chars().any(|c| c.is_ascii_digit())
        || crate::lexical::names(&plain)
            .iter()
            .any(|n| !asked.contains(n))
}
