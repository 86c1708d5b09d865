//! A report's Markdown read into the few blocks every export format draws: headings,
//! paragraphs, list items, quotations, code, tables and rules, each a run of styled spans.
//! Citations (`[3]`, `[1, 2]`) become spans that link to the source they number, so each
//! format can make them links of its own kind. Raw HTML in a report is kept as text: a model
//! wrote it, and no export runs it.

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// Where a span links to.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    /// A URL of the report (a Markdown link).
    External(String),
    /// The source the report numbers so (a citation).
    Source(usize),
}

/// A run of text with one style.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Span {
    pub text: String,
    pub bold: bool,
    pub italic: bool,
    pub code: bool,
    pub link: Option<Link>,
}

/// One block of the report.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Heading {
        level: u8,
        spans: Vec<Span>,
    },
    Paragraph(Vec<Span>),
    /// A list item: its number in an ordered list, how deeply it is nested (0 at the top).
    Item {
        number: Option<u64>,
        depth: usize,
        spans: Vec<Span>,
    },
    Quote(Vec<Span>),
    Code(String),
    /// Rows of cells, the header row first.
    Table(Vec<Vec<Vec<Span>>>),
    Rule,
}

/// The plain text of some spans.
pub fn plain(spans: &[Span]) -> String {
    spans.iter().map(|s| s.text.as_str()).collect()
}

/// What the reader is inside of while the events stream past.
#[derive(Default)]
struct Reader {
    blocks: Vec<Block>,
    spans: Vec<Span>,
    bold: usize,
    italic: usize,
    link: Option<String>,
    heading: Option<u8>,
    quote: usize,
    /// Each open list's next number (None: unordered).
    lists: Vec<Option<u64>>,
    in_item: bool,
    code: Option<String>,
    table: Option<Vec<Vec<Vec<Span>>>>,
}

impl Reader {
    fn text(&mut self, text: &str, code: bool) {
        if let Some(block) = self.code.as_mut() {
            block.push_str(text);
            return;
        }
        let span = Span {
            text: text.to_owned(),
            bold: self.bold > 0,
            italic: self.italic > 0,
            code,
            link: self.link.clone().map(Link::External),
        };
        match self.spans.last_mut() {
            Some(last) if same_style(last, &span) => last.text.push_str(&span.text),
            _ => self.spans.push(span),
        }
    }

    /// The spans read so far as the block the reader is in.
    fn flush(&mut self) {
        let spans = with_citations(std::mem::take(&mut self.spans));
        if plain(&spans).trim().is_empty() {
            return;
        }
        let block = if let Some(level) = self.heading {
            Block::Heading { level, spans }
        } else if self.in_item {
            let depth = self.lists.len().saturating_sub(1);
            let number = self.lists.last_mut().and_then(|n| {
                let this = *n;
                if let Some(next) = n.as_mut() {
                    *next += 1;
                }
                this
            });
            Block::Item {
                number,
                depth,
                spans,
            }
        } else if self.quote > 0 {
            Block::Quote(spans)
        } else {
            Block::Paragraph(spans)
        };
        self.blocks.push(block);
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { level, .. } => {
                self.flush();
                self.heading = Some(heading_level(level));
            }
            Tag::Paragraph => {
                // A loose list's item holds paragraphs: they stay one item.
                if !self.in_item {
                    self.flush();
                } else if !self.spans.is_empty() {
                    self.text(" ", false);
                }
            }
            Tag::BlockQuote(_) => {
                self.flush();
                self.quote += 1;
            }
            Tag::CodeBlock(_) => {
                self.flush();
                self.code = Some(String::new());
            }
            Tag::List(start) => {
                self.flush();
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush();
                self.in_item = true;
            }
            Tag::Table(_) => {
                self.flush();
                self.table = Some(Vec::new());
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(t) = self.table.as_mut() {
                    t.push(Vec::new());
                }
            }
            Tag::TableCell => self.spans.clear(),
            Tag::Emphasis => self.italic += 1,
            Tag::Strong => self.bold += 1,
            Tag::Link { dest_url, .. } => self.link = Some(dest_url.to_string()),
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) => {
                self.flush();
                self.heading = None;
            }
            TagEnd::Paragraph if !self.in_item => self.flush(),
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.quote = self.quote.saturating_sub(1);
            }
            TagEnd::CodeBlock => {
                if let Some(code) = self.code.take() {
                    self.blocks
                        .push(Block::Code(code.trim_end_matches('\n').to_owned()));
                }
            }
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
                self.in_item = !self.lists.is_empty() && self.in_item;
            }
            TagEnd::Item => {
                self.flush();
                self.in_item = false;
            }
            TagEnd::TableCell => {
                let cell = with_citations(std::mem::take(&mut self.spans));
                if let Some(row) = self.table.as_mut().and_then(|t| t.last_mut()) {
                    row.push(cell);
                }
            }
            TagEnd::Table => {
                if let Some(rows) = self.table.take() {
                    self.blocks.push(Block::Table(rows));
                }
            }
            TagEnd::Emphasis => self.italic = self.italic.saturating_sub(1),
            TagEnd::Strong => self.bold = self.bold.saturating_sub(1),
            TagEnd::Link => self.link = None,
            _ => {}
        }
    }
}

fn heading_level(level: HeadingLevel) -> u8 {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

fn same_style(a: &Span, b: &Span) -> bool {
    a.bold == b.bold && a.italic == b.italic && a.code == b.code && a.link == b.link
}

/// Reads Markdown into blocks.
pub fn read(markdown: &str) -> Vec<Block> {
    let mut reader = Reader::default();
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => reader.start(tag),
            Event::End(tag) => reader.end(tag),
            Event::Text(t) => reader.text(&t, false),
            Event::Code(t) => reader.text(&t, true),
            // Raw HTML is shown as the text it is.
            Event::Html(t) | Event::InlineHtml(t) => reader.text(&t, false),
            Event::SoftBreak => reader.text(" ", false),
            Event::HardBreak => reader.text("\n", false),
            Event::Rule => {
                reader.flush();
                reader.blocks.push(Block::Rule);
            }
            _ => {}
        }
    }
    reader.flush();
    reader.blocks
}

/// Plain spans split at their citations: `[2]` and `[1, 3]` become one linked span per number,
/// each written `[n]`.
fn with_citations(spans: Vec<Span>) -> Vec<Span> {
    let mut out = Vec::with_capacity(spans.len());
    for span in spans {
        if span.code || span.link.is_some() {
            out.push(span);
            continue;
        }
        let mut rest = span.text.as_str();
        while let Some((start, end, numbers)) = next_citation(rest) {
            if start > 0 {
                out.push(Span {
                    text: rest[..start].to_owned(),
                    ..span.clone()
                });
            }
            for n in numbers {
                out.push(Span {
                    text: format!("[{n}]"),
                    link: Some(Link::Source(n)),
                    ..span.clone()
                });
            }
            rest = &rest[end..];
        }
        if !rest.is_empty() {
            out.push(Span {
                text: rest.to_owned(),
                ..span
            });
        }
    }
    out
}

/// The first citation in `text`: where it starts and ends, and the numbers it cites.
fn next_citation(text: &str) -> Option<(usize, usize, Vec<usize>)> {
    let mut from = 0;
    while let Some(open) = text[from..].find('[').map(|i| i + from) {
        let close = text[open..].find(']').map(|i| i + open)?;
        let inner = &text[open + 1..close];
        let numbers: Option<Vec<usize>> = inner
            .split(',')
            .map(|n| n.trim().parse::<usize>().ok().filter(|&n| n > 0))
            .collect();
        match numbers {
            Some(numbers) if !inner.trim().is_empty() => {
                return Some((open, close + 1, numbers));
            }
            _ => from = open + 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_keep_headings_lists_tables_code_and_citations() {
        let md = "## Thresholds\n\nA table is vacuumed past **50** rows [1, 2].\n\n\
                  - first [3]\n- second\n  1. nested\n\n> a quotation [2]\n\n\
                  ```sql\nVACUUM FULL t;\n```\n\n| a | b |\n|---|---|\n| x [1] | y |\n\n\
                  <script>alert(1)</script>\n";
        let blocks = read(md);
        assert!(
            matches!(&blocks[0], Block::Heading { level: 2, spans } if plain(spans) == "Thresholds")
        );
        let Block::Paragraph(p) = &blocks[1] else {
            panic!("{blocks:?}")
        };
        assert!(p.iter().any(|s| s.bold && s.text == "50"));
        let cited: Vec<&Link> = p.iter().filter_map(|s| s.link.as_ref()).collect();
        assert_eq!(cited, [&Link::Source(1), &Link::Source(2)]);
        assert!(
            matches!(&blocks[2], Block::Item { number: None, depth: 0, spans } if plain(spans) == "first [3]")
        );
        assert!(blocks.iter().any(|b| matches!(
            b,
            Block::Item {
                number: Some(1),
                depth: 1,
                ..
            }
        )));
        assert!(blocks.iter().any(|b| matches!(b, Block::Quote(_))));
        assert!(blocks.contains(&Block::Code("VACUUM FULL t;".into())));
        let table = blocks.iter().find_map(|b| match b {
            Block::Table(rows) => Some(rows),
            _ => None,
        });
        assert_eq!(table.map(|t| t.len()), Some(2));
        // Raw HTML is text, not markup.
        assert!(blocks.iter().any(|b| match b {
            Block::Paragraph(s) => plain(s).contains("<script>"),
            _ => false,
        }));
    }

    #[test]
    fn a_bracket_that_numbers_nothing_is_text() {
        let spans = with_citations(vec![Span {
            text: "arrays [a] and [0] and [ 4 ] [x".into(),
            ..Span::default()
        }]);
        let linked: Vec<&Link> = spans.iter().filter_map(|s| s.link.as_ref()).collect();
        assert_eq!(linked, [&Link::Source(4)]);
        assert_eq!(plain(&spans), "arrays [a] and [0] and [4] [x");
    }
}
