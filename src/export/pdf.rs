//! The report as a PDF, laid out here and written with `lopdf` (already in the build for
//! reading PDFs): A4 pages, the standard Helvetica and Courier fonts (nothing embedded, so
//! text outside Windows-1252 is shown as `?`), words wrapped by their estimated widths,
//! headings, list markers, quotations indented, code in Courier, tables as rows of cells, the
//! Sources list and the evidence appendix. Citations stay `[n]` as in the text; they are not
//! links in this format.

use super::blocks::{Block, Span};
use super::{ExportError, Report};
use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, StringFormat, dictionary};

const PAGE_W: f32 = 595.0;
const PAGE_H: f32 = 842.0;
const MARGIN: f32 = 56.0;
const BODY: f32 = 10.5;

#[derive(Clone, Copy, PartialEq)]
enum Font {
    Regular,
    Bold,
    Italic,
    Mono,
}

impl Font {
    fn name(self) -> &'static str {
        match self {
            Self::Regular => "F1",
            Self::Bold => "F2",
            Self::Italic => "F3",
            Self::Mono => "F4",
        }
    }

    fn of(span: &Span) -> Self {
        if span.code {
            Self::Mono
        } else if span.bold {
            Self::Bold
        } else if span.italic {
            Self::Italic
        } else {
            Self::Regular
        }
    }

    /// A character's width in ems, near enough Helvetica's to wrap by (Courier's exactly).
    fn width(self, c: char) -> f32 {
        if self == Self::Mono {
            return 0.6;
        }
        // Rounded up from Helvetica's widths, so a wrapped line never runs past the margin.
        let w = match c {
            'i' | 'j' | 'l' | '.' | ',' | ';' | ':' | '\'' | '!' | '|' | ' ' => 0.28,
            'f' | 't' | 'r' | 'I' | '(' | ')' | '[' | ']' | '-' => 0.34,
            'm' | 'w' | 'M' | 'W' | '%' | '@' | '—' => 0.95,
            'A'..='Z' => 0.78,
            _ => 0.58,
        };
        if self == Self::Bold { w * 1.06 } else { w }
    }
}

/// A word as it is drawn: its pieces in their fonts (a citation after a word, a word half in
/// code).
type Word = Vec<(Font, String)>;

/// Pages being laid out, and where the next line goes.
struct Layout {
    pages: Vec<Vec<Operation>>,
    y: f32,
}

impl Layout {
    fn new() -> Self {
        Self {
            pages: vec![Vec::new()],
            y: PAGE_H - MARGIN,
        }
    }

    fn space(&mut self, height: f32) {
        self.y -= height;
    }

    /// Room for a line of `height`, on a new page when this one is full.
    fn room(&mut self, height: f32) {
        if self.y - height < MARGIN {
            self.pages.push(Vec::new());
            self.y = PAGE_H - MARGIN;
        }
        self.y -= height;
    }

    fn draw(&mut self, font: Font, size: f32, x: f32, text: &str) {
        let ops = self.pages.last_mut();
        let Some(ops) = ops else { return };
        ops.push(Operation::new("BT", vec![]));
        ops.push(Operation::new("Tf", vec![font.name().into(), size.into()]));
        ops.push(Operation::new("Td", vec![x.into(), self.y.into()]));
        ops.push(Operation::new(
            "Tj",
            vec![Object::String(win_ansi(text), StringFormat::Literal)],
        ));
        ops.push(Operation::new("ET", vec![]));
    }

    /// Words wrapped into lines between `indent` and the right margin.
    fn words(&mut self, words: &[Word], size: f32, indent: f32) {
        let width = |w: &Word| -> f32 {
            w.iter()
                .map(|(f, t)| t.chars().map(|c| f.width(c)).sum::<f32>() * size)
                .sum()
        };
        let space = Font::Regular.width(' ') * size;
        let available = PAGE_W - 2.0 * MARGIN - indent;
        let mut line: Vec<&Word> = Vec::new();
        let mut used = 0.0;
        for word in words {
            let w = width(word);
            if !line.is_empty() && used + space + w > available {
                self.line(&line, size, indent);
                line.clear();
                used = 0.0;
            }
            used += if line.is_empty() { w } else { space + w };
            line.push(word);
        }
        if !line.is_empty() {
            self.line(&line, size, indent);
        }
    }

    /// One line as one text object: the viewer advances each piece by the font's own widths,
    /// and the spaces are real spaces, so text copied or extracted reads as written.
    fn line(&mut self, words: &[&Word], size: f32, indent: f32) {
        self.room(size * 1.45);
        let y = self.y;
        let Some(ops) = self.pages.last_mut() else {
            return;
        };
        ops.push(Operation::new("BT", vec![]));
        ops.push(Operation::new(
            "Td",
            vec![(MARGIN + indent).into(), y.into()],
        ));
        for (i, word) in words.iter().enumerate() {
            for (j, (font, text)) in word.iter().enumerate() {
                let text = if i > 0 && j == 0 {
                    format!(" {text}")
                } else {
                    text.clone()
                };
                ops.push(Operation::new("Tf", vec![font.name().into(), size.into()]));
                ops.push(Operation::new(
                    "Tj",
                    vec![Object::String(win_ansi(&text), StringFormat::Literal)],
                ));
            }
        }
        ops.push(Operation::new("ET", vec![]));
    }

    fn paragraph(&mut self, spans: &[Span], size: f32, indent: f32, font: Option<Font>) {
        let words = words_of(spans, font);
        self.words(&words, size, indent);
        self.space(size * 0.6);
    }

    fn plain(&mut self, text: &str, size: f32, indent: f32, font: Font) {
        let span = Span {
            text: text.to_owned(),
            ..Span::default()
        };
        let words = words_of(&[span], Some(font));
        self.words(&words, size, indent);
    }
}

/// Spans cut into words at their whitespace; pieces of one word keep their own fonts.
fn words_of(spans: &[Span], font: Option<Font>) -> Vec<Word> {
    let mut words: Vec<Word> = Vec::new();
    let mut current: Word = Vec::new();
    for span in spans {
        let f = font.unwrap_or_else(|| Font::of(span));
        let mut piece = String::new();
        for c in span.text.chars() {
            if c.is_whitespace() {
                if !piece.is_empty() {
                    current.push((f, std::mem::take(&mut piece)));
                }
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
            } else {
                piece.push(c);
            }
        }
        if !piece.is_empty() {
            current.push((f, piece));
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

pub fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let mut page = Layout::new();
    page.plain(&report.title, 18.0, 0.0, Font::Bold);
    page.space(10.0);
    for block in &report.body {
        draw_block(&mut page, block);
    }
    if !report.sources.is_empty() {
        page.space(8.0);
        page.plain("Sources", 14.0, 0.0, Font::Bold);
        page.space(4.0);
        for s in &report.sources {
            let line = format!("[{}] {} — {}", s.number, s.title, s.url);
            page.plain(&line, 9.5, 0.0, Font::Regular);
            page.space(3.0);
        }
    }
    page.space(8.0);
    page.plain("Evidence", 14.0, 0.0, Font::Bold);
    page.space(4.0);
    if let Some(summary) = report.check_summary() {
        page.plain(&summary, 9.5, 0.0, Font::Italic);
        page.space(5.0);
    }
    for e in &report.evidence {
        page.plain(
            &format!("{} [{}]", e.sentence, e.number),
            9.5,
            0.0,
            Font::Regular,
        );
        let passage = e
            .passage
            .as_deref()
            .unwrap_or("(no passage of the source matched on its own)");
        page.plain(passage, 8.5, 18.0, Font::Italic);
        page.space(5.0);
    }
    write(page.pages).map_err(|e| ExportError::Write {
        format: "PDF",
        reason: e.to_string(),
    })
}

fn draw_block(page: &mut Layout, block: &Block) {
    match block {
        Block::Heading { level, spans } => {
            let size = match level {
                1 | 2 => 14.0,
                3 => 12.0,
                _ => 11.0,
            };
            page.space(6.0);
            page.paragraph(spans, size, 0.0, Some(Font::Bold));
        }
        Block::Paragraph(spans) => page.paragraph(spans, BODY, 0.0, None),
        Block::Item {
            number,
            depth,
            spans,
        } => {
            let indent = 16.0 * (*depth as f32 + 1.0);
            let marker = number.map_or("•".to_owned(), |n| format!("{n}."));
            let mut all = vec![Span {
                text: format!("{marker} "),
                ..Span::default()
            }];
            all.extend(spans.iter().cloned());
            page.paragraph(&all, BODY, indent, None);
        }
        Block::Quote(spans) => page.paragraph(spans, BODY, 20.0, Some(Font::Italic)),
        Block::Code(code) => {
            for line in code.lines() {
                // Code keeps its lines; one too long for the page is cut into pieces.
                let chars: Vec<char> = line.chars().collect();
                let per_line = ((PAGE_W - 2.0 * MARGIN - 12.0) / (0.6 * 9.0)) as usize;
                for piece in chars.chunks(per_line.max(1)) {
                    page.room(9.0 * 1.35);
                    let text: String = piece.iter().collect();
                    page.draw(Font::Mono, 9.0, MARGIN + 12.0, &text);
                }
                if chars.is_empty() {
                    page.room(9.0 * 1.35);
                }
            }
            page.space(6.0);
        }
        Block::Table(rows) => {
            for row in rows {
                let cells: Vec<String> = row.iter().map(|c| super::blocks::plain(c)).collect();
                page.plain(&cells.join("  |  "), 9.5, 8.0, Font::Regular);
            }
            page.space(6.0);
        }
        Block::Rule => page.space(10.0),
    }
}

fn write(pages: Vec<Vec<Operation>>) -> Result<Vec<u8>, lopdf::Error> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font = |doc: &mut Document, base: &str| {
        doc.add_object(dictionary! {
            "Type" => "Font", "Subtype" => "Type1", "BaseFont" => base.to_owned(),
            "Encoding" => "WinAnsiEncoding",
        })
    };
    let fonts = dictionary! {
        "F1" => font(&mut doc, "Helvetica"),
        "F2" => font(&mut doc, "Helvetica-Bold"),
        "F3" => font(&mut doc, "Helvetica-Oblique"),
        "F4" => font(&mut doc, "Courier"),
    };
    let resources_id = doc.add_object(dictionary! {"Font" => fonts});
    let mut kids: Vec<Object> = Vec::new();
    for operations in pages {
        let content = Content { operations }.encode()?;
        let content_id = doc.add_object(Stream::new(dictionary! {}, content));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
        });
        kids.push(page_id.into());
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), PAGE_W.into(), PAGE_H.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages_id});
    doc.trailer.set("Root", catalog_id);
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes)?;
    Ok(bytes)
}

/// Text in the standard fonts' encoding (Windows-1252); what it cannot hold is `?`.
fn win_ansi(text: &str) -> Vec<u8> {
    text.chars()
        .map(|c| match c {
            ' '..='~' => c as u8,
            '\u{a0}'..='\u{ff}' => c as u32 as u8,
            '€' => 0x80,
            '‚' => 0x82,
            '„' => 0x84,
            '…' => 0x85,
            '‘' => 0x91,
            '’' => 0x92,
            '“' => 0x93,
            '”' => 0x94,
            '•' => 0x95,
            '–' => 0x96,
            '—' => 0x97,
            '™' => 0x99,
            _ => b'?',
        })
        .collect()
}
