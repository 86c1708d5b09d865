//! The values a section's sources give (`report_form: "by_topic"`): each setting, function or
//! term with its default, number or version, as a short list under the section's prose.
//!
//! Measured on six questions, a 1.5B model writing a section keeps a setting's name and drops
//! its default ("autovacuum_vacuum_threshold" without its 50), and quoting the source's
//! sentence instead pastes it whole. Asked for names and values as structured output beside
//! its sentences, the same model lists them well (every autovacuum setting of the page with
//! its default). A listed
//! value is kept only where its source gives it next to that name: the value must follow the
//! name within `WINDOW` bytes with no other listed name between them, so a value is never moved
//! to the setting beside it.

use super::super::by_source::Part;
use crate::llm::ResponseSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashSet;

/// The most values listed under one section.
const FACTS_MAX: usize = 6;

/// How far after a name its value may stand: a setting's paragraph in a manual (about 60 words).
const WINDOW: usize = 400;

/// The most words of a value: longer, it is a sentence pasted, not a value.
const VALUE_WORDS: usize = 8;

/// The most words of a value that holds no number: "binary file object", not a description
/// ("Specifies the number of inserted tuples", which followed its name in the manual).
const WORDY_VALUE_WORDS: usize = 3;

/// One value a source gives, as the report shows it: the name as listed, the value as the
/// source writes it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Fact {
    pub name: String,
    pub value: String,
    pub source: usize,
}

impl Fact {
    /// The fact as a list item: "- `autovacuum_naptime`: 1min [1]".
    pub fn line(&self) -> String {
        let name = if self.name.contains(char::is_whitespace) {
            format!("**{}**", self.name)
        } else {
            format!("`{}`", self.name)
        };
        format!("- {name}: {} [{}]", self.value, self.source)
    }

    /// Whether `text` already gives this fact: it holds the name and the value.
    pub fn said_in(&self, text: &str) -> bool {
        let text = text.to_ascii_lowercase();
        text.contains(&self.name.to_ascii_lowercase())
            && text.contains(&self.value.to_ascii_lowercase())
    }
}

/// A section as its call answers it: its prose and the values its sources give.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub(super) struct Drafting {
    pub sentences: Vec<String>,
    pub facts: Vec<ListedFact>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub(super) struct ListedFact {
    name: String,
    value: String,
    /// A number as the schema asks, or what a small model writes instead ("1", "[1]").
    source: Value,
}

impl ListedFact {
    fn source(&self) -> Option<usize> {
        match &self.source {
            Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
            Value::String(s) => s.trim_matches(['[', ']', ' ']).parse().ok(),
            _ => None,
        }
    }
}

/// The section call's answer: its sentences and its values in one structured call (two calls
/// from the same excerpts made the report stage twice as long on the 1.5B model, its prompt
/// read twice).
pub(super) fn schema() -> ResponseSchema {
    ResponseSchema {
        name: "ReportSection".into(),
        description:
            "The section's sentences, each citing its source, and the values its sources give."
                .into(),
        schema: json!({"type": "object", "properties": {
            "sentences": {"type": "array", "maxItems": 6, "items": {"type": "string"}},
            "facts": {"type": "array", "maxItems": FACTS_MAX, "items": {"type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 60,
                        "description": "The setting, command, function or term, as the source writes it."},
                    "value": {"type": "string", "maxLength": 40,
                        "description": "Its default, number, limit, unit or version, as the source writes it."},
                    "source": {"type": "integer", "description": "The number of the source that says so."}},
                "required": ["name", "value", "source"]}}},
            "required": ["sentences", "facts"]}),
    }
}

/// The listed facts a source of the section gives: the named source first, then the others;
/// each value as that source writes it, each name once, at most `FACTS_MAX`.
pub(super) fn checked(listed: Vec<ListedFact>, mine: &[&Part]) -> Vec<Fact> {
    let names: Vec<String> = listed.iter().map(|f| clean(&f.name)).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (fact, name) in listed.iter().zip(&names) {
        let value = clean(&fact.value);
        if !usable(name, &value) || seen.contains(&name.to_ascii_lowercase()) {
            continue;
        }
        let others: Vec<&str> = names
            .iter()
            .filter(|n| !n.eq_ignore_ascii_case(name) && !n.is_empty())
            .map(String::as_str)
            .collect();
        let named = fact.source();
        let mut order: Vec<&&Part> = mine.iter().filter(|p| Some(p.number) == named).collect();
        order.extend(mine.iter().filter(|p| Some(p.number) != named));
        let found = order.into_iter().find_map(|p| {
            value_after_name(&p.text, name, &value, &others).map(|v| Fact {
                name: name.clone(),
                value: v,
                source: p.number,
            })
        });
        if let Some(fact) = found {
            seen.insert(name.to_ascii_lowercase());
            out.push(fact);
        }
        if out.len() == FACTS_MAX {
            break;
        }
    }
    out
}

/// A name or value without the quoting a model puts around it ("`shared_buffers`", "'3'").
fn clean(text: &str) -> String {
    text.trim()
        .trim_matches(['`', '"', '\'', '*', '.', ',', ';', ' '])
        .trim()
        .to_owned()
}

/// Whether a listed name and value can be a fact: both given, the value short (shorter still
/// without a number) and not the name again, nor a word for "no value".
fn usable(name: &str, value: &str) -> bool {
    let none = ["", "none", "n/a", "null", "unknown", "not specified"];
    let words = value.split_whitespace().count();
    let counted = value.chars().any(|c| c.is_ascii_digit())
        || value.split_whitespace().any(|w| forms(w).len() > 1);
    !name.is_empty()
        && !none.contains(&value.to_ascii_lowercase().as_str())
        && words <= VALUE_WORDS
        && (counted || words <= WORDY_VALUE_WORDS)
        && !value.eq_ignore_ascii_case(name)
        && !name
            .to_ascii_lowercase()
            .contains(&value.to_ascii_lowercase())
}

/// The value as `text` writes it, where it follows an occurrence of `name` within `WINDOW`
/// bytes and no name of `others` stands between them (nor, in the `WINDOW` before the value, an identifier that extends `name`: the value is
/// that identifier's, whose paragraph may name the plain term again). A number and its word ("3", "three") are
/// the same value.
fn value_after_name(text: &str, name: &str, value: &str, others: &[&str]) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    // "tomllib.load()" is written "tomllib.load(fp, /, *, parse_float=float)" in its page.
    let name = name.trim_end_matches("()").to_ascii_lowercase();
    let mine = occurrences(&lower, &name);
    if mine.is_empty() {
        return None;
    }
    let theirs: Vec<usize> = others
        .iter()
        .map(|o| o.trim_end_matches("()").to_ascii_lowercase())
        .filter(|o| !o.is_empty() && !name.contains(o.as_str()))
        .flat_map(|o| occurrences(&lower, &o))
        .collect();
    for form in forms(value) {
        for at in occurrences(&lower, &form) {
            let before = |p: &&usize| **p + name.len() <= at;
            let Some(&start) = mine.iter().filter(before).max() else {
                continue;
            };
            let between = theirs.iter().any(|&o| o > start && o < at);
            if at - start <= WINDOW && !between && !extended_in(window_before(&lower, at), &name) {
                return text.get(at..at + form.len()).map(str::to_owned);
            }
        }
    }
    None
}

/// The `WINDOW` bytes of `text` before `at` (fewer at a character's boundary).
fn window_before(text: &str, at: usize) -> &str {
    let mut from = at.saturating_sub(WINDOW);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    text.get(from..at).unwrap_or("")
}

/// Whether `text` holds an identifier that extends `name`, a plain term, by `_`-joined words.
/// A value written after it belongs to it, not to the term: "autovacuum …
/// autovacuum_max_workers … The default is three" gives the setting's default (a 1.5B model
/// listed "`autovacuum`: three").
fn extended_in(text: &str, name: &str) -> bool {
    !name.contains('_')
        && text
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word.contains('_') && word.split('_').any(|part| part == name))
}

/// The forms a value may take in a text, lower-cased: itself, and a small number's digits or
/// word.
fn forms(value: &str) -> Vec<String> {
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve",
    ];
    let value = value.to_ascii_lowercase();
    let mut out = vec![value.clone()];
    if let Ok(n) = value.parse::<usize>()
        && let Some(word) = WORDS.get(n)
    {
        out.push((*word).to_owned());
    }
    if let Some(n) = WORDS.iter().position(|w| *w == value) {
        out.push(n.to_string());
    }
    out
}

/// Where `needle` stands in `haystack` as a whole word (no letter, digit or `_` touching it).
fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    if needle.is_empty() {
        return Vec::new();
    }
    let word = |c: char| c.is_alphanumeric() || c == '_';
    haystack
        .match_indices(needle)
        .filter(|(at, _)| {
            let before = haystack[..*at].chars().next_back();
            let after = haystack[at + needle.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
        .map(|(at, _)| at)
        .collect()
}

#[cfg(test)]
mod tests;
