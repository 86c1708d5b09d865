//! A finished report read back: its Sources list and its cited sentences, by location rather
//! than by number (a later run numbers its sources otherwise), and whether a source as read now
//! still supports a sentence. What changed between two reports of one question is told from
//! these (`report/what_changed.rs`).

use super::{BlockKind, Claim, Sources, blocks, body_lines, find_markers, is_sources_heading};
use super::{strip_markers, tidy_spaces};
use crate::lexical::Words;

/// A source on a report's Sources list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub number: usize,
    pub title: String,
    pub url: String,
}

/// A sentence of a report's body that cites, and the locations it cites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CitedSentence {
    /// Without its citation markers.
    pub text: String,
    pub urls: Vec<String>,
}

/// The entries of a report's Sources list (`[3] Title: location`), in order.
pub fn listed_sources(report: &str) -> Vec<Listed> {
    let mut out = Vec::new();
    let mut in_list = false;
    for line in report.lines() {
        if let Some(level) = is_sources_heading(line) {
            // "Consulted, not cited" lists what was read, not what is cited.
            in_list = !line.to_ascii_lowercase().contains("consulted") && level > 0;
            continue;
        }
        if line.trim_start().starts_with('#') {
            in_list = false;
        }
        if in_list && let Some(entry) = listed(line) {
            out.push(entry);
        }
    }
    out
}

fn listed(line: &str) -> Option<Listed> {
    let rest = line
        .trim()
        .trim_start_matches(['-', '*', ' '])
        .strip_prefix('[')?;
    let (number, rest) = rest.split_once(']')?;
    let number = number.trim().parse().ok()?;
    let rest = rest.trim();
    let (title, url) = match rest.rfind(": ") {
        Some(i) if rest[i + 2..].contains("://") => (&rest[..i], &rest[i + 2..]),
        _ if rest.contains("://") => ("", rest),
        _ => return None,
    };
    Some(Listed {
        number,
        title: title.trim().to_owned(),
        url: url.trim().to_owned(),
    })
}

/// Every sentence of the body's prose (not headings, code or tables) that cites a source of
/// the report's Sources list, with the locations of those it cites.
pub fn cited_sentences(report: &str) -> Vec<CitedSentence> {
    let listed = listed_sources(report);
    let url_of = |n: usize| listed.iter().find(|l| l.number == n).map(|l| l.url.clone());
    let mut out = Vec::new();
    for block in blocks(&body_lines(report)) {
        if block.kind == BlockKind::Verbatim {
            continue;
        }
        for sentence in super::sentences(&block.text) {
            let mut urls: Vec<String> = Vec::new();
            for n in find_markers(sentence).into_iter().flat_map(|m| m.numbers) {
                if let Some(url) = url_of(n).filter(|u| !urls.contains(u)) {
                    urls.push(url);
                }
            }
            if !urls.is_empty() {
                let text = tidy_spaces(&strip_markers(sentence)).trim().to_owned();
                out.push(CitedSentence { text, urls });
            }
        }
    }
    out
}

/// Whether the source at `url`, as `sources` hold it, supports `sentence` at the check's bar:
/// `None` when `sources` have no text of it (not read in this run, or nothing to check).
pub fn supports(sentence: &str, url: &str, sources: &Sources) -> Option<bool> {
    let number = sources.number_of(url)?;
    let source = sources.list.get(number - 1).filter(|s| s.has_text)?;
    let claim = Claim::of(&mut Words::new(), sentence);
    Some(!claim.is_claim() || claim.supported_by(source, sources))
}
