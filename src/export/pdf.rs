//! The report as a PDF, laid out here and written with `lopdf` (already in the build for
//! reading PDFs): A4 pages, the fonts of `pdf_fonts` (DejaVu embedded as subsets when the
//! system has it, else the standard Helvetica and Courier), words wrapped by their widths,
//! headings, list markers, quotations indented, code in the monospaced face, tables as rows of
//! cells, the Sources list and the evidence appendix. Each citation `[n]` is a link to its
//! source's location, as is each link of the report a reader can follow.

use super::blocks::{Block, Link, Span};
use super::pdf_fonts::{Font, Fonts};
use super::{ExportError, Report};
use lopdf::content::{Content, Operation};
use lopdf::{Document, Object, Stream, dictionary};

const PAGE_W: f32 = 595.0;
const PAGE_H: f32 = 842.0;
const MARGIN: f32 = 56.0;
const BODY: f32 = 10.5;

impl Font {
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
}

/// A piece of a word in one font, and where it links to.
#[derive(Clone, Debug)]
struct Piece {
    font: Font,
    text: String,
    link: Option<String>,
}

/// A word as it is drawn: its pieces (a citation after a word, a word half in code).
type Word = Vec<Piece>;

/// A link's area on a page: x0, y0, x1, y1 and the location.
type LinkArea = ([f32; 4], String);

/// Pages being laid out, and where the next line goes.
struct Layout {
    pages: Vec<Vec<Operation>>,
    links: Vec<Vec<LinkArea>>,
    y: f32,
    fonts: Fonts,
    /// The locations of the report's numbered sources (`[n]` links to the n-th).
    sources: Vec<(usize, String)>,
}

impl Layout {
    fn new(fonts: Fonts, report: &Report) -> Self {
        Self {
            pages: vec![Vec::new()],
            links: vec![Vec::new()],
            y: PAGE_H - MARGIN,
            fonts,
            sources: report
                .sources
                .iter()
                .map(|s| (s.number, s.url.clone()))
                .collect(),
        }
    }

    fn space(&mut self, height: f32) {
        self.y -= height;
    }

    /// Room for a line of `height`, on a new page when this one is full.
    fn room(&mut self, height: f32) {
        if self.y - height < MARGIN {
            self.pages.push(Vec::new());
            self.links.push(Vec::new());
            self.y = PAGE_H - MARGIN;
        }
        self.y -= height;
    }

    fn width(&self, piece: &Piece, size: f32) -> f32 {
        piece
            .text
            .chars()
            .map(|c| self.fonts.width(piece.font, c))
            .sum::<f32>()
            * size
    }

    /// Words wrapped into lines between `indent` and the right margin.
    fn words(&mut self, words: &[Word], size: f32, indent: f32) {
        let space = self.fonts.width(Font::Regular, ' ') * size;
        let available = PAGE_W - 2.0 * MARGIN - indent;
        let mut line: Vec<&Word> = Vec::new();
        let mut used = 0.0;
        for word in words {
            let w: f32 = word.iter().map(|p| self.width(p, size)).sum();
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
    /// and the spaces are real spaces, so text copied or extracted reads as written. A piece
    /// that links gets a link area where it is drawn.
    fn line(&mut self, words: &[&Word], size: f32, indent: f32) {
        self.room(size * 1.45);
        let y = self.y;
        let mut x = MARGIN + indent;
        let mut ops = vec![
            Operation::new("BT", vec![]),
            Operation::new("Td", vec![x.into(), y.into()]),
        ];
        let mut areas: Vec<LinkArea> = Vec::new();
        for (i, word) in words.iter().enumerate() {
            for (j, piece) in word.iter().enumerate() {
                if i > 0 && j == 0 {
                    // The space goes in the piece's own font, as it is measured.
                    x += self.fonts.width(piece.font, ' ') * size;
                }
                let text = if i > 0 && j == 0 {
                    format!(" {}", piece.text)
                } else {
                    piece.text.clone()
                };
                let w = self.width(piece, size);
                if let Some(url) = &piece.link {
                    areas.push(([x, y - size * 0.25, x + w, y + size * 0.85], url.clone()));
                }
                x += w;
                let operand = self.fonts.encode(piece.font, &text);
                ops.push(Operation::new(
                    "Tf",
                    vec![piece.font.name().into(), size.into()],
                ));
                ops.push(Operation::new("Tj", vec![operand]));
            }
        }
        ops.push(Operation::new("ET", vec![]));
        if let Some(page) = self.pages.last_mut() {
            page.extend(ops);
        }
        if let Some(page) = self.links.last_mut() {
            page.extend(areas);
        }
    }

    fn paragraph(&mut self, spans: &[Span], size: f32, indent: f32, font: Option<Font>) {
        let words = self.words_of(spans, font);
        self.words(&words, size, indent);
        self.space(size * 0.6);
    }

    fn plain(&mut self, text: &str, size: f32, indent: f32, font: Font) {
        let span = Span {
            text: text.to_owned(),
            ..Span::default()
        };
        let words = self.words_of(&[span], Some(font));
        self.words(&words, size, indent);
    }

    /// Where a span links to, when a reader can follow it there.
    fn target(&self, link: Option<&Link>) -> Option<String> {
        let url = match link? {
            Link::Source(n) => self.sources.iter().find(|(m, _)| m == n)?.1.clone(),
            Link::External(url) => url.trim().to_owned(),
        };
        let lower = url.to_ascii_lowercase();
        ["http://", "https://", "file://", "mailto:"]
            .iter()
            .any(|p| lower.starts_with(p))
            .then_some(url)
    }

    /// Spans cut into words at their whitespace; pieces of one word keep their own fonts and
    /// links.
    fn words_of(&self, spans: &[Span], font: Option<Font>) -> Vec<Word> {
        let mut words: Vec<Word> = Vec::new();
        let mut current: Word = Vec::new();
        for span in spans {
            let f = font.unwrap_or_else(|| Font::of(span));
            let link = self.target(span.link.as_ref());
            let piece = |text: String| Piece {
                font: f,
                text,
                link: link.clone(),
            };
            let mut text = String::new();
            for c in span.text.chars() {
                if c.is_whitespace() {
                    if !text.is_empty() {
                        current.push(piece(std::mem::take(&mut text)));
                    }
                    if !current.is_empty() {
                        words.push(std::mem::take(&mut current));
                    }
                } else {
                    text.push(c);
                }
            }
            if !text.is_empty() {
                current.push(piece(text));
            }
        }
        if !current.is_empty() {
            words.push(current);
        }
        words
    }

    /// A line of code at `x`, as it is.
    fn code_line(&mut self, size: f32, x: f32, text: &str) {
        let operand = self.fonts.encode(Font::Mono, text);
        let y = self.y;
        let Some(ops) = self.pages.last_mut() else {
            return;
        };
        ops.push(Operation::new("BT", vec![]));
        ops.push(Operation::new(
            "Tf",
            vec![Font::Mono.name().into(), size.into()],
        ));
        ops.push(Operation::new("Td", vec![x.into(), y.into()]));
        ops.push(Operation::new("Tj", vec![operand]));
        ops.push(Operation::new("ET", vec![]));
    }
}

pub fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    render_with(report, Fonts::load())
}

fn render_with(report: &Report, fonts: Fonts) -> Result<Vec<u8>, ExportError> {
    let mut page = Layout::new(fonts, report);
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
    write(page).map_err(|reason| ExportError::Write {
        format: "PDF",
        reason,
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
                    page.code_line(9.0, MARGIN + 12.0, &text);
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

fn write(layout: Layout) -> Result<Vec<u8>, String> {
    let Layout {
        pages,
        links,
        fonts,
        ..
    } = layout;
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let fonts = fonts.write(&mut doc)?;
    let resources_id = doc.add_object(dictionary! {"Font" => fonts});
    let mut kids: Vec<Object> = Vec::new();
    for (operations, areas) in pages.into_iter().zip(links) {
        let content = Content { operations }.encode().map_err(|e| e.to_string())?;
        let content_id = doc.add_object(Stream::new(dictionary! {}, content));
        let annots: Vec<Object> = areas
            .into_iter()
            .map(|(rect, url)| {
                doc.add_object(dictionary! {
                    "Type" => "Annot", "Subtype" => "Link",
                    "Rect" => rect.iter().map(|v| Object::Real(*v)).collect::<Vec<_>>(),
                    "Border" => vec![0.into(), 0.into(), 0.into()],
                    "A" => dictionary! {"S" => "URI", "URI" => Object::string_literal(url)},
                })
                .into()
            })
            .collect();
        let mut page = dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
        };
        if !annots.is_empty() {
            page.set("Annots", annots);
        }
        kids.push(doc.add_object(page).into());
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
    doc.save_to(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const URL: &str = "https://docs.example/autovacuum";

    fn report(body: &str) -> Report {
        let values = json!({
            "messages": [{"type": "human", "content": "How does autovacuum work?"}],
            "final_report": format!("# Autovacuum\n\n{body}\n\n### Sources\n\n[1] Autovacuum: {URL}\n"),
            "sources": [{"url": URL, "title": "Autovacuum",
                         "text": "The launcher starts a worker every 60 seconds."}],
        });
        Report::from_values(&values).unwrap()
    }

    /// The URIs of every link annotation, page by page.
    fn link_targets(bytes: &[u8]) -> Vec<String> {
        let doc = Document::load_mem(bytes).unwrap();
        let mut out = Vec::new();
        for (_, page) in doc.get_pages() {
            let page = doc.get_dictionary(page).unwrap();
            let Ok(annots) = page.get(b"Annots").and_then(Object::as_array) else {
                continue;
            };
            for a in annots {
                let annot = doc.get_dictionary(a.as_reference().unwrap()).unwrap();
                let action = annot.get(b"A").and_then(Object::as_dict).unwrap();
                let uri = action.get(b"URI").and_then(Object::as_str).unwrap();
                out.push(String::from_utf8_lossy(uri).into_owned());
            }
        }
        out
    }

    fn text_of(bytes: &[u8]) -> String {
        let text = pdf_extract::extract_text_from_mem(bytes).unwrap();
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn text_beyond_windows_1252_is_drawn_and_reads_back() {
        let fonts = Fonts::load();
        assert!(
            fonts.embeds(),
            "DejaVu fonts missing under /usr/share/fonts/truetype/dejavu: scripts/test.sh \
             installs fonts-dejavu-core"
        );
        let body = "Throughput rose by Δ ≈ 12% → about 1.25× on average; Ящик and λ stay [1].";
        let bytes = render_with(&report(body), fonts).unwrap();
        let text = text_of(&bytes);
        assert!(text.contains("Δ ≈ 12% → about 1.25×"), "{text:.400}");
        assert!(text.contains("Ящик and λ stay [1]"), "{text:.400}");
        // Subsets: the four faces of a short report are tens of kilobytes, not megabytes.
        assert!(bytes.len() < 150_000, "{} bytes", bytes.len());
    }

    #[test]
    fn each_citation_links_to_its_source() {
        let body = "The launcher starts a worker every 60 seconds [1].\n\n- Workers vacuum \
                    tables in turn [1].\n\nSee [the manual](https://docs.example/manual) and \
                    [this](javascript:alert(1)).";
        for fonts in [Fonts::load(), Fonts::standard()] {
            let bytes = render_with(&report(body), fonts).unwrap();
            let targets = link_targets(&bytes);
            let cited = targets.iter().filter(|t| *t == URL).count();
            assert_eq!(cited, 2, "{targets:?}");
            assert!(targets.iter().any(|t| t == "https://docs.example/manual"));
            assert!(
                !targets.iter().any(|t| t.starts_with("javascript")),
                "a javascript: link is not made live"
            );
        }
    }

    #[test]
    fn without_the_fonts_the_standard_ones_still_read_back() {
        let bytes = render_with(&report("Plain text, “quoted” [1]."), Fonts::standard()).unwrap();
        assert!(text_of(&bytes).contains("Plain text, “quoted” [1]."));
    }
}
