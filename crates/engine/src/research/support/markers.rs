//! Citation markers: finding them (`[1]`, `[2, 3]`, `[4][5]`, `[6-8]`), removing and writing
//! them, renumbering a researcher's findings into the run's numbering, and numbering a
//! report's citations by first use.

use super::Sources;
use super::layout::is_sources_heading;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A run of citation markers (`[1]`, `[2, 3]`, `[4][5]`, `[6-8]`) at `start..end`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Markers {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) numbers: Vec<usize>,
}

/// The numbers in one bracket's inside, or `None` when it is not a citation.
fn bracket_numbers(inside: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in inside.split([',', ';']) {
        let part = part.trim();
        if part.is_empty() {
            return None;
        }
        if let Some((a, b)) = part.split_once(['-', '–']) {
            let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            if a > b || b - a > 20 {
                return None;
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().ok()?);
        }
    }
    Some(out)
}

/// Every marker run in `text`; markdown links (`[1](url)`) are not citations.
pub(super) fn find_markers(text: &str) -> Vec<Markers> {
    let bytes = text.as_bytes();
    let mut found: Vec<Markers> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'[' {
            i += 1;
            continue;
        }
        let Some(close) = text[i + 1..].find(']').map(|c| i + 1 + c) else {
            break;
        };
        let inside = &text[i + 1..close];
        let is_link = bytes.get(close + 1) == Some(&b'(');
        match bracket_numbers(inside).filter(|_| !is_link && inside.len() <= 40) {
            Some(numbers) => {
                match found.last_mut() {
                    // `[1][2]` or `[1] [2]`: one run.
                    Some(prev) if text[prev.end..i].trim().is_empty() => {
                        prev.end = close + 1;
                        prev.numbers.extend(numbers);
                    }
                    _ => found.push(Markers {
                        start: i,
                        end: close + 1,
                        numbers,
                    }),
                }
                i = close + 1;
            }
            None => i += 1,
        }
    }
    found
}

pub(super) fn strip_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for m in find_markers(text) {
        out.push_str(&text[last..m.start]);
        last = m.end;
    }
    out.push_str(&text[last..]);
    out
}

// ---------------------------------------------------------------------------------------------
// Findings

/// A researcher's findings with their citations in the run's numbering: each note's own
/// `[n] Title: URL` list maps its numbers to sources; numbers it does not map are dropped (the
/// writer must not copy them), and the note's list goes (the writer is shown the run's list).
pub fn renumber_findings(note: &str, sources: &Sources) -> String {
    let mut local: HashMap<usize, usize> = HashMap::new();
    let mut body_lines = Vec::new();
    let mut in_list = false;
    for line in note.lines() {
        if is_sources_heading(line).is_some() {
            in_list = true;
            continue;
        }
        if let Some((n, url)) = list_entry(line)
            && (in_list || line.trim_start().starts_with('['))
        {
            if let Some(global) = sources.number_of(&url) {
                local.insert(n, global);
            }
            continue;
        }
        if in_list && line.trim_start().starts_with('#') {
            in_list = false;
        }
        if !in_list || !line.trim().is_empty() {
            body_lines.push(line);
        }
    }
    let body = body_lines.join("\n");
    let mut out = String::with_capacity(body.len());
    let mut last = 0;
    for m in find_markers(&body) {
        out.push_str(&body[last..m.start]);
        let mapped: Vec<usize> = dedup(m.numbers.iter().filter_map(|n| local.get(n).copied()));
        out.push_str(&render_markers(&mapped));
        last = m.end;
    }
    out.push_str(&body[last..]);
    out.trim().to_owned()
}

/// `[n] Title: URL` (or `n. Title - URL`, `- [n] URL`): the number and the URL.
pub(super) fn list_entry(line: &str) -> Option<(usize, String)> {
    let line = line.trim().trim_start_matches(['-', '*', ' ']);
    let (n, rest) = if let Some(rest) = line.strip_prefix('[') {
        let (n, rest) = rest.split_once(']')?;
        (n.trim().parse().ok()?, rest)
    } else {
        let digits = line.find(|c: char| !c.is_ascii_digit())?;
        let rest = line[digits..].strip_prefix(['.', ')'])?;
        (line[..digits].parse().ok()?, rest)
    };
    let url = rest
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, '<' | '>' | '(' | ')' | ',' | '.')))
        .find(|w| w.contains("://"))?;
    Some((n, url.to_owned()))
}

pub(super) fn dedup(numbers: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut seen = HashSet::new();
    numbers.filter(|n| seen.insert(*n)).collect()
}

pub(super) fn render_markers(numbers: &[usize]) -> String {
    numbers.iter().map(|n| format!("[{n}]")).collect()
}

/// A sentence with its markers before its final punctuation ("… fact [1].").
pub(super) fn with_markers(sentence: &str, numbers: &[usize]) -> String {
    // `strip_markers` leaves the space that stood before a marker: drop it.
    let lead_len = sentence.len() - sentence.trim_start().len();
    let (lead, core) = sentence.split_at(lead_len);
    let core = tidy_spaces(core.trim_end());
    let trail = &sentence[sentence.trim_end().len()..];
    if numbers.is_empty() {
        return format!("{lead}{core}{trail}");
    }
    let markers = render_markers(numbers);
    let (head, stop) = match core.char_indices().last() {
        Some((i, '.' | '!' | '?' | ':' | ';')) => core.split_at(i),
        _ => (core.as_str(), ""),
    };
    format!("{lead}{} {markers}{stop}{trail}", head.trim_end())
}

/// Doubled spaces and a space before punctuation, which removing markers leaves.
pub(super) fn tidy_spaces(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == ' ' && out.ends_with(' ') {
            continue;
        }
        if matches!(c, '.' | ',' | ';' | ':' | '!' | '?') && out.ends_with(' ') {
            out.pop();
        }
        out.push(c);
    }
    out
}

/// The body with its citation numbers renumbered 1, 2, 3… in order of first use; the list of
/// original numbers in that order.
pub(super) fn number_by_first_use(body: &str) -> (String, Vec<usize>) {
    let mut order: Vec<usize> = Vec::new();
    let mut new_number: BTreeMap<usize, usize> = BTreeMap::new();
    let mut out = String::with_capacity(body.len());
    let mut last = 0;
    for m in find_markers(body) {
        out.push_str(&body[last..m.start]);
        let renumbered: Vec<usize> = m
            .numbers
            .iter()
            .map(|n| {
                *new_number.entry(*n).or_insert_with(|| {
                    order.push(*n);
                    order.len()
                })
            })
            .collect();
        out.push_str(&render_markers(&dedup(renumbered.into_iter())));
        last = m.end;
    }
    out.push_str(&body[last..]);
    (out, order)
}
