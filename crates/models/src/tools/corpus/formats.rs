//! The document formats that are not text: PDF (its text layer, a section a page, located
//! `#page=N`), Word (DOCX), OpenDocument text (ODT) and EPUB, each into the same sections as a
//! page of HTML. A file that cannot be read is an error for the caller to log and skip.
//!
//! Crates: `pdf-extract` (pure Rust, over `lopdf`) for the text of each PDF page; `zip` (already
//! in the tree) and `roxmltree` (a small read-only XML parser without dependencies) for the
//! three zipped XML formats; EPUB's chapters are XHTML, read by the HTML extractor.

use super::extract::{Anchors, Format, Raw, Section, finish, html, sections};
use std::io::Read;

/// A zip member larger than this is not read (a document, not a data dump).
const MAX_MEMBER_BYTES: u64 = 32 * 1024 * 1024;

/// The XHTML an EPUB's chapters may hold together.
const MAX_BOOK_BYTES: u64 = 128 * 1024 * 1024;

const WORD: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
const ODF_TEXT: &str = "urn:oasis:names:tc:opendocument:xmlns:text:1.0";
const DUBLIN_CORE: &str = "http://purl.org/dc/elements/1.1/";

/// Why a document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not a readable zip archive: {0}")]
    Zip(String),
    #[error("{0} is missing from the archive")]
    Missing(String),
    #[error("{member}: not well-formed XML: {message}")]
    Xml { member: String, message: String },
    #[error("the PDF could not be read: {0}")]
    Pdf(String),
    #[error("the reader failed on this file")]
    Panicked,
    #[error("elements nested {0} deep (at most {max} are read)", max = super::extract::MAX_HTML_NESTING)]
    TooDeep(usize),
}

fn shallow_enough(page: &str) -> Result<(), FormatError> {
    match super::extract::nesting_depth(page) {
        depth if depth > super::extract::MAX_HTML_NESTING => Err(FormatError::TooDeep(depth)),
        _ => Ok(()),
    }
}

/// The sections of a file's bytes; `fallback` names a document that names itself nowhere.
pub fn read(format: Format, bytes: &[u8], fallback: &str) -> Result<Vec<Section>, FormatError> {
    // A reader that panics on a malformed file (the PDF reader does) must not stop the index,
    // nor poison its writer: the file is skipped like one that cannot be read.
    std::panic::catch_unwind(|| read_unguarded(format, bytes, fallback))
        .unwrap_or(Err(FormatError::Panicked))
}

fn read_unguarded(
    format: Format,
    bytes: &[u8],
    fallback: &str,
) -> Result<Vec<Section>, FormatError> {
    match format {
        Format::Pdf => pdf(bytes, fallback),
        Format::Docx => docx(bytes, fallback),
        Format::Odt => odt(bytes, fallback),
        Format::Epub => epub(bytes, fallback),
        Format::Html => {
            let page = String::from_utf8_lossy(bytes);
            shallow_enough(&page)?;
            Ok(sections(Format::Html, &page, fallback))
        }
        text => Ok(sections(text, &String::from_utf8_lossy(bytes), fallback)),
    }
}

fn pdf(bytes: &[u8], title: &str) -> Result<Vec<Section>, FormatError> {
    let pages = pdf_extract::extract_text_from_mem_by_pages(bytes)
        .map_err(|e| FormatError::Pdf(e.to_string()))?;
    let raw = pages
        .iter()
        .enumerate()
        .map(|(i, text)| Raw {
            anchor: Some(format!("page={}", i + 1)),
            heading: String::new(),
            text: paragraphs(text),
        })
        .collect();
    Ok(finish(title, raw))
}

fn docx(bytes: &[u8], fallback: &str) -> Result<Vec<Section>, FormatError> {
    let mut archive = open(bytes)?;
    let body = member(&mut archive, "word/document.xml")?;
    let title = metadata_title(&mut archive, "docProps/core.xml", fallback);
    let doc = parse("word/document.xml", &body)?;
    let mut parts = Parts::default();
    // A paragraph inside another (a text box) is read as part of the outer one.
    let paragraphs = doc.descendants().filter(|n| {
        n.has_tag_name((WORD, "p")) && !n.ancestors().skip(1).any(|a| a.has_tag_name((WORD, "p")))
    });
    for p in paragraphs {
        let text = word_text(p);
        if is_word_heading(p) {
            parts.heading(&text);
        } else {
            parts.paragraph(&text);
        }
    }
    Ok(finish(&title, parts.done()))
}

fn odt(bytes: &[u8], fallback: &str) -> Result<Vec<Section>, FormatError> {
    let mut archive = open(bytes)?;
    let content = member(&mut archive, "content.xml")?;
    let title = metadata_title(&mut archive, "meta.xml", fallback);
    let doc = parse("content.xml", &content)?;
    let mut parts = Parts::default();
    for n in doc.descendants() {
        if n.has_tag_name((ODF_TEXT, "h")) {
            parts.heading(&odf_text(n));
        } else if n.has_tag_name((ODF_TEXT, "p"))
            && !n
                .ancestors()
                .skip(1)
                .any(|a| a.has_tag_name((ODF_TEXT, "p")))
        {
            parts.paragraph(&odf_text(n));
        }
    }
    Ok(finish(&title, parts.done()))
}

fn epub(bytes: &[u8], fallback: &str) -> Result<Vec<Section>, FormatError> {
    let mut archive = open(bytes)?;
    let container = member(&mut archive, "META-INF/container.xml")?;
    let opf_path = parse("META-INF/container.xml", &container)?
        .descendants()
        .find(|n| n.tag_name().name() == "rootfile")
        .and_then(|n| n.attribute("full-path"))
        .map(str::to_owned)
        .ok_or_else(|| FormatError::Missing("the container's rootfile".into()))?;
    let opf = member(&mut archive, &opf_path)?;
    let package = parse(&opf_path, &opf)?;
    let title = dublin_core_title(&opf).unwrap_or_else(|| fallback.to_owned());
    let base = opf_path.rsplit_once('/').map_or("", |(dir, _)| dir);
    let href_of = |id: &str| {
        package
            .descendants()
            .find(|n| n.tag_name().name() == "item" && n.attribute("id") == Some(id))
            .and_then(|n| n.attribute("href"))
            .map(|href| {
                if base.is_empty() {
                    href.to_owned()
                } else {
                    format!("{base}/{href}")
                }
            })
    };
    let chapters: Vec<String> = package
        .descendants()
        .filter(|n| n.tag_name().name() == "itemref")
        .filter_map(|n| n.attribute("idref"))
        .filter_map(href_of)
        .collect();
    let mut raw = Vec::new();
    let mut read = std::collections::HashSet::new();
    let mut budget = MAX_BOOK_BYTES;
    for chapter in chapters {
        if !read.insert(chapter.clone()) {
            continue;
        }
        // A chapter the archive lacks is passed over: the rest of the book is still a book.
        let Ok(xhtml) = member(&mut archive, &chapter) else {
            continue;
        };
        // A book of more text than this is read to here: the spine may name chapters
        // without end, each within the per-member limit.
        budget = budget.saturating_sub(xhtml.len() as u64);
        if budget == 0 {
            break;
        }
        // A chapter nested too deep to parse in reasonable time is passed over like a missing one.
        if shallow_enough(&xhtml).is_ok() {
            raw.extend(html(&xhtml).1);
        }
    }
    Ok(finish(&title, raw))
}

fn open(bytes: &[u8]) -> Result<zip::ZipArchive<std::io::Cursor<&[u8]>>, FormatError> {
    zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| FormatError::Zip(e.to_string()))
}

fn member(
    archive: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    name: &str,
) -> Result<String, FormatError> {
    let file = archive
        .by_name(name)
        .map_err(|_| FormatError::Missing(name.to_owned()))?;
    let mut text = String::new();
    file.take(MAX_MEMBER_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| FormatError::Zip(format!("{name}: {e}")))?;
    Ok(text)
}

fn parse<'a>(member: &str, xml: &'a str) -> Result<roxmltree::Document<'a>, FormatError> {
    roxmltree::Document::parse(xml).map_err(|e| FormatError::Xml {
        member: member.to_owned(),
        message: e.to_string(),
    })
}

/// The title a zipped document's metadata member gives, or `fallback`.
fn metadata_title(
    archive: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    name: &str,
    fallback: &str,
) -> String {
    member(archive, name)
        .ok()
        .and_then(|meta| dublin_core_title(&meta))
        .unwrap_or_else(|| fallback.to_owned())
}

/// `dc:title` of a metadata document (DOCX core properties, ODT meta, an EPUB package).
fn dublin_core_title(xml: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let title = doc
        .descendants()
        .find(|n| n.has_tag_name((DUBLIN_CORE, "title")))?
        .text()?
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    (!title.is_empty()).then_some(title)
}

/// A Word paragraph's text: its runs' text, tabs as spaces, breaks as line ends.
fn word_text(p: roxmltree::Node<'_, '_>) -> String {
    let mut out = String::new();
    for n in p.descendants() {
        if n.has_tag_name((WORD, "t")) {
            out.push_str(n.text().unwrap_or_default());
        } else if n.has_tag_name((WORD, "tab")) {
            out.push(' ');
        } else if n.has_tag_name((WORD, "br")) {
            out.push('\n');
        }
    }
    out
}

/// A heading by its style ("Heading1", "Title") or by an outline level in its properties,
/// which localized styles keep (level 9 is body text). Only the paragraph's own properties.
fn is_word_heading(p: roxmltree::Node<'_, '_>) -> bool {
    let Some(props) = p.children().find(|n| n.has_tag_name((WORD, "pPr"))) else {
        return false;
    };
    props.children().any(|n| {
        (n.has_tag_name((WORD, "pStyle"))
            && n.attribute((WORD, "val")).is_some_and(|style| {
                let style = style.to_ascii_lowercase();
                style.starts_with("heading") || style == "title"
            }))
            || (n.has_tag_name((WORD, "outlineLvl")) && n.attribute((WORD, "val")) != Some("9"))
    })
}

/// An OpenDocument paragraph's text, `text:s` and `text:tab` as spaces.
fn odf_text(node: roxmltree::Node<'_, '_>) -> String {
    let mut out = String::new();
    for n in node.descendants() {
        if n.is_text() {
            out.push_str(n.text().unwrap_or_default());
        } else if n.has_tag_name((ODF_TEXT, "s")) || n.has_tag_name((ODF_TEXT, "tab")) {
            out.push(' ');
        } else if n.has_tag_name((ODF_TEXT, "line-break")) {
            out.push('\n');
        }
    }
    out
}

/// A PDF page's text with its lines joined into paragraphs (a blank line ends one).
fn paragraphs(page: &str) -> String {
    page.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Sections as a document's headings and paragraphs come.
#[derive(Default)]
struct Parts {
    done: Vec<Raw>,
    current: Option<Raw>,
    anchors: Anchors,
}

impl Parts {
    fn heading(&mut self, text: &str) {
        let heading = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if heading.is_empty() {
            return;
        }
        self.done.extend(self.current.take());
        self.current = Some(Raw {
            anchor: Some(self.anchors.of(&heading)),
            heading,
            text: String::new(),
        });
    }

    fn paragraph(&mut self, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let current = self.current.get_or_insert_with(|| Raw {
            anchor: None,
            heading: String::new(),
            text: String::new(),
        });
        if !current.text.is_empty() {
            current.text.push_str("\n\n");
        }
        current.text.push_str(text);
    }

    fn done(mut self) -> Vec<Raw> {
        self.done.extend(self.current.take());
        self.done
    }
}

#[cfg(test)]
pub(super) mod tests;
