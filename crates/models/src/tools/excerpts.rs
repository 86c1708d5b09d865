//! The parts of a long page that bear on a query, shown to a researcher in place of a model's
//! summary of the page (`summarize_pages = false`).
//!
//! On a small CPU model a page summary costs 15–30 s and drops facts: in the evaluation set at
//! `068bfe7` the key facts in the pages retrieved were 54%, in what the researchers were shown
//! 41%. Excerpts cost no model call and keep the page's own words; a key fact is only lost when
//! its stretch of the page shares too few words with the query. The page's opening stays (it
//! says what the page is about), then the stretches richest in the query's words, rarer words
//! (within the page) weighing more.

use crate::lexical::{Terms, Words, bearing, sentence_spans, terms};

/// About how many words one stretch holds: a few sentences, so that the budget is spent on
/// what matches and not on the paragraph around it.
const STRETCH_WORDS: usize = 40;

/// Marks the text left out between two stretches.
const GAP: &str = "\n[…]\n";

/// At most `budget` characters of `page` for `query`: its first stretch, then the stretches
/// that share the most with the query, all in page order with left-out text marked `[…]`.
/// A page no longer than `budget` is returned whole.
pub fn excerpts(page: &str, query: &str, budget: usize) -> String {
    if page.chars().count() <= budget {
        return page.to_owned();
    }
    let stretches = stretches(page);
    if stretches.is_empty() {
        // Nothing but white space.
        return String::new();
    }
    let mut words = Words::new();
    let query = terms(&mut words, query);
    let found: Vec<Terms> = stretches
        .iter()
        .map(|&(s, e)| terms(&mut words, &page[s..e]))
        .collect();
    let scores = bearing(&query, &found);
    let mut ranked: Vec<(usize, f64)> = (1..stretches.len())
        .map(|i| (i, scores[i]))
        .filter(|(_, s)| *s > 0.0)
        .collect();
    // Best first; among equals, the earlier.
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let length = |i: usize| page[stretches[i].0..stretches[i].1].trim().chars().count();
    let mut chosen = vec![0];
    let mut used = length(0);
    for (i, _) in ranked {
        let cost = length(i) + GAP.chars().count();
        if used + cost <= budget {
            chosen.push(i);
            used += cost;
        }
    }
    if used > budget {
        // One opening sentence longer than the budget: its start is all there is room for.
        return crate::tools::engines::truncate_chars(page.trim(), budget).to_owned();
    }
    chosen.sort_unstable();
    let mut out = String::with_capacity(budget + 16);
    for (k, &i) in chosen.iter().enumerate() {
        if k > 0 {
            out.push_str(if chosen[k - 1] + 1 == i { "\n" } else { GAP });
        }
        out.push_str(page[stretches[i].0..stretches[i].1].trim());
    }
    if chosen.last().is_some_and(|&i| i + 1 < stretches.len()) {
        out.push_str(GAP.trim_end());
    }
    out
}

/// `page` in consecutive stretches of whole sentences, each about `STRETCH_WORDS` words.
fn stretches(page: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    // The stretch being filled: its start, end and words so far.
    let mut open: Option<(usize, usize, usize)> = None;
    for (s, e) in sentence_spans(page) {
        let (start, _, count) = open.unwrap_or((s, e, 0));
        let count = count + page[s..e].split_whitespace().count();
        if count >= STRETCH_WORDS {
            out.push((start, e));
            open = None;
        } else {
            open = Some((start, e, count));
        }
    }
    if let Some((start, end, _)) = open {
        out.push((start, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page of numbered filler sentences with one sentence about the query in the middle.
    fn page_with(fact: &str, filler: usize) -> String {
        let mut page = String::from("Checkpoints are points in the write-ahead log sequence.\n");
        for i in 0..filler {
            page.push_str(&format!(
                "Filler sentence number {i} talks about something else entirely here. "
            ));
        }
        page.push_str(fact);
        for i in 0..filler {
            page.push_str(&format!(
                " Another filler line {i} says little of use today."
            ));
        }
        page
    }

    #[test]
    fn the_stretch_that_answers_the_query_is_kept_with_the_opening() {
        let fact = "The default checkpoint_timeout is five minutes.";
        let page = page_with(fact, 60);
        let shown = excerpts(&page, "checkpoint_timeout default", 600);
        assert!(shown.chars().count() <= 600, "{shown}");
        assert!(shown.starts_with("Checkpoints are points"), "{shown}");
        assert!(shown.contains(fact), "{shown}");
        assert!(shown.contains("[…]"), "left-out text is marked: {shown}");
        assert!(!shown.contains("Filler sentence number 30 "), "{shown}");
    }

    #[test]
    fn a_short_page_is_shown_whole_and_a_long_first_sentence_is_cut() {
        assert_eq!(excerpts("Short page.", "anything", 100), "Short page.");
        let long = "word ".repeat(500);
        let shown = excerpts(&long, "word", 100);
        assert_eq!(shown.chars().count(), 100);
        assert!(excerpts("", "x", 0).is_empty());
        assert!(excerpts(&" \n".repeat(300), "x", 200).is_empty());
    }

    #[test]
    fn with_nothing_matching_the_page_opens_as_it_is() {
        let page = page_with("Nothing relevant.", 60);
        let shown = excerpts(&page, "zebra", 300);
        assert!(shown.starts_with("Checkpoints are points"), "{shown}");
        assert!(shown.chars().count() <= 300);
    }

    #[test]
    fn stretches_cover_the_page_in_order() {
        let page = page_with("A fact.", 20);
        let parts = stretches(&page);
        assert!(parts.len() > 3);
        assert_eq!(parts[0].0, 0);
        assert_eq!(parts.last().map(|p| p.1), Some(page.len()));
        assert!(parts.windows(2).all(|w| w[0].1 <= w[1].0));
    }
}
