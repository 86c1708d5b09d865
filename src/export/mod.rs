//! A thread's report as a file to keep or share (`GET /threads/{thread_id}/report`): Markdown,
//! one self-contained HTML page, DOCX or PDF, each with its citations linked to the Sources
//! list and an evidence appendix — every cited sentence beside the passage of its source that
//! the citation check matched, and what the check changed. The check computes that pairing
//! anyway; no peer hands it to the reader.
//!
//! Every format is drawn from the same blocks (`blocks`), so a heading, list, table or code
//! block reads the same in each.

pub mod blocks;
mod docx;
mod html;
mod pdf;
mod pdf_fonts;

use crate::research::state::{Source, SupportCounts};
use crate::research::support::{self, Sources};
use blocks::Block;
use serde_json::Value;

/// The formats a report is exported in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Html,
    Pdf,
    Docx,
}

impl Format {
    pub const ALL: [Format; 4] = [Format::Markdown, Format::Html, Format::Pdf, Format::Docx];

    /// The format `?format=` names: `md` (or `markdown`), `html`, `pdf`, `docx`.
    pub fn named(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "md" | "markdown" => Some(Self::Markdown),
            "html" => Some(Self::Html),
            "pdf" => Some(Self::Pdf),
            "docx" => Some(Self::Docx),
            _ => None,
        }
    }

    /// The format an `Accept` header prefers (in its order; `*/*` and `text/*` are Markdown),
    /// or None when it accepts none of them.
    pub fn accepted(accept: &str) -> Option<Self> {
        for range in accept.split(',') {
            let media = range.split(';').next().unwrap_or("").trim();
            let found = match media.to_ascii_lowercase().as_str() {
                "*/*" | "text/*" | "text/markdown" | "text/plain" => Some(Self::Markdown),
                "text/html" => Some(Self::Html),
                "application/pdf" => Some(Self::Pdf),
                m if m == Self::Docx.content_type() => Some(Self::Docx),
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Self::Markdown => "text/markdown; charset=utf-8",
            Self::Html => "text/html; charset=utf-8",
            Self::Pdf => "application/pdf",
            Self::Docx => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Self::Markdown => "md",
            Self::Html => "html",
            Self::Pdf => "pdf",
            Self::Docx => "docx",
        }
    }
}

/// One source the report cites, as its Sources list gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Cited {
    pub number: usize,
    pub title: String,
    pub url: String,
}

/// One cited sentence and the passage of its source the check matched (None: the source has
/// no text to check, or the sentence stands on the section around it).
#[derive(Clone, Debug, PartialEq)]
pub struct Evidence {
    pub sentence: String,
    pub number: usize,
    pub passage: Option<String>,
}

/// A report ready to be drawn in any format.
#[derive(Clone, Debug)]
pub struct Report {
    pub title: String,
    /// The report's own Markdown, as the thread keeps it.
    pub markdown: String,
    /// Its body (no title, no lists of sources).
    pub body: Vec<Block>,
    pub sources: Vec<Cited>,
    /// Sources read and not cited, as "title: location" lines.
    pub consulted: Vec<String>,
    pub evidence: Vec<Evidence>,
    pub counts: Option<SupportCounts>,
}

/// The most characters of a matched passage shown in the appendix.
const PASSAGE_CHARS: usize = 700;

impl Report {
    /// The report of a thread's state values (`final_report`, `sources` with their texts,
    /// `citations`), or None when no report is written yet.
    pub fn from_values(values: &Value) -> Option<Self> {
        let markdown = values["final_report"].as_str()?.trim().to_owned();
        if markdown.is_empty() {
            return None;
        }
        let entries: Vec<Source> = values["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| serde_json::from_value(s.clone()).ok())
            .collect();
        let counts = serde_json::from_value(values["citations"].clone()).ok();
        let parts = split(&markdown);
        let numbered = Sources::from_state(&entries).with_question(&asked(values));
        let body = blocks::read(parts.body);
        let evidence = evidence_of(&body, &numbered, &entries);
        Some(Self {
            title: parts.title,
            body,
            sources: parts.sources,
            consulted: parts.consulted,
            evidence,
            counts,
            markdown,
        })
    }

    /// The report drawn in `format`.
    pub fn render(&self, format: Format) -> Result<Vec<u8>, ExportError> {
        match format {
            Format::Markdown => Ok(self.markdown_with_evidence().into_bytes()),
            Format::Html => Ok(html::render(self).into_bytes()),
            Format::Docx => docx::render(self),
            Format::Pdf => pdf::render(self),
        }
    }

    /// A file name for the download: the title's words, joined by dashes.
    pub fn file_name(&self, format: Format) -> String {
        let words: Vec<String> = self
            .title
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .take(8)
            .map(str::to_ascii_lowercase)
            .collect();
        let stem = if words.is_empty() {
            "report".to_owned()
        } else {
            words.join("-")
        };
        format!("{stem}.{}", format.extension())
    }

    /// What the check did, in one sentence (None when the thread kept no counts).
    pub fn check_summary(&self) -> Option<String> {
        let c = self.counts.as_ref()?;
        Some(format!(
            "The citation check read {} citations: {} supported by the cited text, {} moved to \
             a source that supports the sentence, {} added, {} removed; {} sentences no \
             retrieved source supports were left out.",
            c.citations, c.supported, c.moved, c.attached, c.removed, c.uncited_unsupported
        ))
    }

    fn markdown_with_evidence(&self) -> String {
        let mut out = self.markdown.clone();
        out.push_str("\n\n## Evidence\n\n");
        if let Some(summary) = self.check_summary() {
            out.push_str(&format!("{summary}\n\n"));
        }
        for e in &self.evidence {
            out.push_str(&format!("- {} [{}]\n", e.sentence, e.number));
            match &e.passage {
                Some(p) => out.push_str(&format!("  > {}\n", p.replace('\n', " "))),
                None => out.push_str("  > (no passage of the source matched on its own)\n"),
            }
        }
        out
    }
}

/// What went wrong drawing a report.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("could not write the {format} file: {reason}")]
    Write {
        format: &'static str,
        reason: String,
    },
}

/// The question the report answers: the conversation's human turns.
fn asked(values: &Value) -> String {
    values["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["type"] == "human")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A report's Markdown cut into its title, body and lists of sources.
struct Parts<'a> {
    title: String,
    body: &'a str,
    sources: Vec<Cited>,
    consulted: Vec<String>,
}

fn split(markdown: &str) -> Parts<'_> {
    let (title, rest) = match markdown.split_once('\n') {
        Some((first, rest)) if first.starts_with("# ") => (first[2..].trim().to_owned(), rest),
        _ if markdown.starts_with("# ") => (markdown[2..].trim().to_owned(), ""),
        _ => ("Research report".to_owned(), markdown),
    };
    let at = |heading: &str| {
        rest.find(&format!("\n{heading}\n"))
            .or_else(|| rest.starts_with(&format!("{heading}\n")).then_some(0))
    };
    let sources_at = at("### Sources");
    let consulted_at = at("### Consulted, not cited");
    let end = [sources_at, consulted_at]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(rest.len());
    let section = |start: Option<usize>| -> &str {
        let Some(start) = start else { return "" };
        let text = &rest[start..];
        let text = text.trim_start_matches('\n');
        let text = text.split_once('\n').map_or("", |(_, t)| t);
        match text.find("\n### ") {
            Some(next) => &text[..next],
            None => text,
        }
    };
    let sources = section(sources_at).lines().filter_map(cited_line).collect();
    let consulted = section(consulted_at)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(str::to_owned)
        .collect();
    Parts {
        title,
        body: rest[..end].trim(),
        sources,
        consulted,
    }
}

/// `[3] Title: location` as the Sources list writes it.
fn cited_line(line: &str) -> Option<Cited> {
    let line = line.trim().strip_prefix('[')?;
    let (number, rest) = line.split_once(']')?;
    let number = number.trim().parse().ok()?;
    let rest = rest.trim();
    let (title, url) = match rest.rfind(": ") {
        Some(i) if rest[i + 2..].contains("://") => (&rest[..i], &rest[i + 2..]),
        _ => (rest, ""),
    };
    Some(Cited {
        number,
        title: title.trim().to_owned(),
        url: url.trim().to_owned(),
    })
}

/// Every cited sentence of the body's prose (paragraphs, list items, quotations; not headings,
/// code or tables) with the passage the check matches for each number it cites.
fn evidence_of(body: &[Block], numbered: &Sources, entries: &[Source]) -> Vec<Evidence> {
    let text_of = |n: usize| -> &str {
        let Some(source) = n.checked_sub(1).and_then(|i| numbered.list.get(i)) else {
            return "";
        };
        let key = support::source_key(&source.url);
        entries
            .iter()
            .find(|e| support::source_key(&e.url) == key)
            .map_or("", |e| e.text.as_str())
    };
    let mut out = Vec::new();
    for block in body {
        let spans = match block {
            Block::Paragraph(spans) | Block::Quote(spans) | Block::Item { spans, .. } => spans,
            _ => continue,
        };
        let prose = blocks::plain(spans);
        for sentence in support::sentences(&prose) {
            let plain = support::without_markers(sentence);
            let mut seen = Vec::new();
            for n in support::cited_numbers(sentence) {
                if seen.contains(&n) {
                    continue;
                }
                seen.push(n);
                let passage = support::matched_passage(sentence, n, numbered, text_of(n))
                    .map(|p| shortened(p, PASSAGE_CHARS));
                out.push(Evidence {
                    sentence: plain.trim_matches(['“', '”', '"']).to_owned(),
                    number: n,
                    passage,
                });
            }
        }
    }
    out
}

/// `text` cut to at most `chars` characters at a word, with `…` when cut.
fn shortened(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_owned();
    }
    let cut: String = text.chars().take(chars).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{}…", cut[..at].trim_end())
}

#[cfg(test)]
mod tests;
