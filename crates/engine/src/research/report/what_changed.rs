//! "What changed since <date>": the end of a report that re-runs the thread's earlier question
//! (a cron on the thread, "run it again"). It is computed, not written: the last report's
//! Sources list and cited sentences against this run's pages and checked report.
//!
//! - New and dropped sources: the two Sources lists, by location.
//! - Claims no longer supported: each cited sentence of the last report read against the pages
//!   it cited as this run read them again, with the check every report gets (a page not read
//!   again is counted, not judged).
//! - Figures that moved: a sentence of the last report and one of this report with most of
//!   their words in common and other numbers.

use crate::lexical::{Terms, Words, terms};
use crate::research::state::{
    AgentState, ChangedSource, FollowUpMode, MovedFigure, UnsupportedClaim, WhatChanged,
};
use crate::research::support::{self, CitedSentence, Listed, Sources};
use std::collections::HashSet;

/// The share of their words (Jaccard, numbers aside) two sentences must have in common to be
/// read as one statement with other figures.
const SAME_STATEMENT: f64 = 0.6;

/// The most entries of each list kept.
const MOST: usize = 20;

/// On a re-run, what changed since the last report, and its section added to `report` (before
/// the Sources list); `None` on any other run.
pub(super) fn append(
    state: &AgentState,
    numbered: &Sources,
    report: &mut String,
) -> Option<WhatChanged> {
    let rerun = state
        .follow_up
        .as_ref()
        .is_some_and(|t| t.mode == FollowUpMode::Rerun);
    let previous = state.final_report.as_deref().filter(|_| rerun)?;
    let changes = compare(previous, state.reported_at.as_deref(), report, numbered);
    insert_before_sources(report, &section(&changes));
    Some(changes)
}

/// What changed from the `previous` report to `report`, whose sources `numbered` holds.
pub(super) fn compare(
    previous: &str,
    since: Option<&str>,
    report: &str,
    numbered: &Sources,
) -> WhatChanged {
    let (before, now) = (
        support::listed_sources(previous),
        support::listed_sources(report),
    );
    let claims = support::cited_sentences(previous);
    let moved = moved_figures(&claims, &support::cited_sentences(report));
    let mut unsupported = Vec::new();
    let mut not_reread = 0;
    for claim in &claims {
        let reread: Vec<(&String, bool)> = claim
            .urls
            .iter()
            .filter_map(|u| support::supports(&claim.text, u, numbered).map(|s| (u, s)))
            .collect();
        if reread.is_empty() {
            not_reread += 1;
        } else if reread.iter().all(|(_, s)| !s) && !moved.iter().any(|m| m.before == claim.text) {
            let sources = reread
                .iter()
                .map(|(u, _)| named(u, &before, numbered))
                .collect();
            unsupported.push(UnsupportedClaim {
                claim: claim.text.clone(),
                sources,
            });
        }
    }
    unsupported.truncate(MOST);
    WhatChanged {
        since: since.map(str::to_owned),
        new_sources: missing_from(&now, &before),
        dropped_sources: missing_from(&before, &now),
        unsupported,
        moved,
        not_reread,
    }
}

/// The sources of `list` that `other` does not hold.
fn missing_from(list: &[Listed], other: &[Listed]) -> Vec<ChangedSource> {
    let keys: HashSet<String> = other.iter().map(|l| support::source_key(&l.url)).collect();
    list.iter()
        .filter(|l| !keys.contains(&support::source_key(&l.url)))
        .take(MOST)
        .map(|l| ChangedSource {
            url: l.url.clone(),
            title: l.title.clone(),
        })
        .collect()
}

/// A cited location by its title on the last report's list (else this run's).
fn named(url: &str, listed: &[Listed], numbered: &Sources) -> ChangedSource {
    let key = support::source_key(url);
    let title = listed
        .iter()
        .find(|l| support::source_key(&l.url) == key)
        .map(|l| l.title.clone())
        .or_else(|| {
            let n = numbered.number_of(url)?;
            numbered.list.get(n - 1).map(|s| s.title.clone())
        })
        .unwrap_or_default();
    ChangedSource {
        url: url.to_owned(),
        title,
    }
}

/// Sentences of `before` that a sentence of `after` restates with other numbers (and none
/// restates with the same ones).
fn moved_figures(before: &[CitedSentence], after: &[CitedSentence]) -> Vec<MovedFigure> {
    let mut words = Words::new();
    let after: Vec<(&CitedSentence, Terms)> = after
        .iter()
        .map(|s| (s, terms(&mut words, &s.text)))
        .collect();
    let mut out = Vec::new();
    for old in before {
        let (old_words, old_numbers) = terms(&mut words, &old.text);
        if old_numbers.is_empty() {
            continue;
        }
        let same: Vec<&(&CitedSentence, Terms)> = after
            .iter()
            .filter(|(_, (w, _))| jaccard(&old_words, w) >= SAME_STATEMENT)
            .collect();
        if same.iter().any(|(_, (_, n))| *n == old_numbers) {
            continue;
        }
        let best = same
            .iter()
            .filter(|(_, (_, n))| !n.is_empty())
            .max_by(|a, b| jaccard(&old_words, &a.1.0).total_cmp(&jaccard(&old_words, &b.1.0)));
        if let Some((new, _)) = best {
            out.push(MovedFigure {
                before: old.text.clone(),
                after: new.text.clone(),
            });
        }
    }
    out.truncate(MOST);
    out
}

fn jaccard(a: &crate::lexical::WordSet, b: &crate::lexical::WordSet) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

/// The section as the report ends with it.
pub(super) fn section(changes: &WhatChanged) -> String {
    let since = changes
        .since
        .as_deref()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&chrono::Utc).format("%-d %B %Y, %H:%M UTC"));
    let mut out = match since {
        Some(when) => format!("## What changed since {when}\n\n"),
        None => "## What changed since the last report\n\n".to_owned(),
    };
    out.push_str(
        "Compared with the last report on this question by reading its pages again; not \
         written by the model.\n\n",
    );
    let mut items: Vec<String> = Vec::new();
    let sources = |list: &[ChangedSource]| list.iter().map(link).collect::<Vec<_>>().join("; ");
    if !changes.new_sources.is_empty() {
        items.push(format!(
            "- **New sources ({}):** {}",
            changes.new_sources.len(),
            sources(&changes.new_sources)
        ));
    }
    if !changes.dropped_sources.is_empty() {
        items.push(format!(
            "- **No longer cited ({}):** {}",
            changes.dropped_sources.len(),
            sources(&changes.dropped_sources)
        ));
    }
    if !changes.unsupported.is_empty() {
        let mut item = format!("- **No longer supported ({}):**", changes.unsupported.len());
        for u in &changes.unsupported {
            let by = sources(&u.sources);
            item.push_str(&format!(
                "\n  - “{}” ({by}, read again, no longer says so)",
                u.claim
            ));
        }
        items.push(item);
    }
    if !changes.moved.is_empty() {
        let mut item = format!("- **Figures that moved ({}):**", changes.moved.len());
        for m in &changes.moved {
            item.push_str(&format!("\n  - “{}” is now “{}”", m.before, m.after));
        }
        items.push(item);
    }
    if items.is_empty() {
        items.push(
            "- Nothing changed: the same sources are cited, and every claim of the last report \
             whose pages were read again still stands."
                .to_owned(),
        );
    }
    if changes.not_reread > 0 {
        items.push(format!(
            "- {} of the last report's cited claims cite pages this run did not read again; \
             they were not rechecked.",
            changes.not_reread
        ));
    }
    out.push_str(&items.join("\n"));
    out
}

/// A source as a Markdown link, its title's brackets made plain.
fn link(s: &ChangedSource) -> String {
    let title = if s.title.is_empty() { &s.url } else { &s.title };
    format!("[{}]({})", title.replace(['[', ']'], ""), s.url)
}

/// `section` placed before the report's Sources list (else at its end).
fn insert_before_sources(report: &mut String, section: &str) {
    match report.find("\n### Sources\n") {
        Some(at) => report.insert_str(at, &format!("\n\n{section}\n")),
        None => report.push_str(&format!("\n\n{section}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::research::state::Source;

    fn page(url: &str, title: &str, text: &str) -> Source {
        Source {
            url: url.into(),
            title: title.into(),
            text: text.into(),
            ..Source::default()
        }
    }

    const LAST: &str = "# Vacuum\n\nThe autovacuum launcher starts a worker every 60 seconds \
        by default [1]. VACUUM reclaims storage occupied by dead tuples [2].\n\n### Sources\n\n\
        [1] Autovacuum: https://docs.example/autovacuum\n[2] Routine Vacuuming: \
        https://docs.example/vacuum\n";

    #[test]
    fn new_and_dropped_sources_unsupported_claims_and_moved_figures_are_told() {
        let numbered = Sources::from_state(&[
            page(
                "https://docs.example/autovacuum",
                "Autovacuum",
                "The autovacuum launcher starts a worker every 120 seconds by default, in \
                 each database it visits.",
            ),
            page(
                "https://docs.example/full",
                "VACUUM FULL",
                "VACUUM FULL rewrites the whole table into a new disk file.",
            ),
        ]);
        let now = "# Vacuum\n\nThe autovacuum launcher starts a worker every 120 seconds by \
            default [1]. VACUUM FULL rewrites the whole table into a new disk file [2].\n\n\
            ### Sources\n\n[1] Autovacuum: https://docs.example/autovacuum\n[2] VACUUM FULL: \
            https://docs.example/full\n";
        let changes = compare(LAST, Some("2026-11-27T09:00:00Z"), now, &numbered);
        assert_eq!(changes.new_sources.len(), 1);
        assert_eq!(changes.new_sources[0].title, "VACUUM FULL");
        assert_eq!(
            changes.dropped_sources[0].url,
            "https://docs.example/vacuum"
        );
        assert_eq!(changes.moved.len(), 1, "{changes:?}");
        assert!(changes.moved[0].before.contains("60 seconds"));
        assert!(changes.moved[0].after.contains("120 seconds"));
        // The moved figure is not listed again as unsupported; the page not read again is
        // counted, not judged.
        assert!(changes.unsupported.is_empty(), "{changes:?}");
        assert_eq!(changes.not_reread, 1);
        let text = section(&changes);
        assert!(text.starts_with("## What changed since 27 November 2026, 09:00 UTC"));
        assert!(text.contains("[VACUUM FULL](https://docs.example/full)"));
        assert!(text.contains("is now “The autovacuum launcher starts a worker every 120"));
    }

    #[test]
    fn a_claim_its_page_no_longer_makes_is_unsupported() {
        let numbered = Sources::from_state(&[
            page(
                "https://docs.example/autovacuum",
                "Autovacuum",
                "The autovacuum daemon is disabled in this release; run VACUUM by hand.",
            ),
            page(
                "https://docs.example/vacuum",
                "Routine Vacuuming",
                "VACUUM reclaims storage occupied by dead tuples.",
            ),
        ]);
        let now = "# Vacuum\n\nVACUUM reclaims storage occupied by dead tuples [1].\n\n\
            ### Sources\n\n[1] Routine Vacuuming: https://docs.example/vacuum\n";
        let changes = compare(LAST, None, now, &numbered);
        assert_eq!(changes.unsupported.len(), 1, "{changes:?}");
        assert!(changes.unsupported[0].claim.contains("every 60 seconds"));
        assert_eq!(changes.unsupported[0].sources[0].title, "Autovacuum");
        assert_eq!(changes.not_reread, 0);
        assert!(changes.moved.is_empty());
        assert!(section(&changes).starts_with("## What changed since the last report"));
    }

    #[test]
    fn the_same_report_again_says_nothing_changed() {
        let numbered = Sources::from_state(&[
            page(
                "https://docs.example/autovacuum",
                "Autovacuum",
                "The autovacuum launcher starts a worker every 60 seconds by default.",
            ),
            page(
                "https://docs.example/vacuum",
                "Routine Vacuuming",
                "VACUUM reclaims storage occupied by dead tuples.",
            ),
        ]);
        let changes = compare(LAST, None, LAST, &numbered);
        assert_eq!(changes, WhatChanged::default());
        let mut report = LAST.to_owned();
        insert_before_sources(&mut report, &section(&changes));
        let at = report.find("## What changed").unwrap();
        assert!(at < report.find("### Sources").unwrap(), "{report}");
        assert!(report.contains("Nothing changed"));
    }
}
