//! The report as a Word document (Office Open XML, zipped): the parts Word, LibreOffice and
//! Google Docs need and no more — content types, the package and document relationships,
//! heading and quotation styles (so the navigation pane lists the sections), and the document.
//! Citations are links to bookmarks on the Sources list; the report's own links are external
//! hyperlinks.

use super::blocks::{Block, Link, Span};
use super::{ExportError, Report};
use std::io::Write;

const W: &str = "http://schemas.openxmlformats.org/wordprocessingml/2006/main";
const R: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";

const CONTENT_TYPES: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/><Override PartName="/word/styles.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.styles+xml"/></Types>"#;

const PACKAGE_RELS: &str = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#;

/// Title, three heading levels, a quotation and code: each a paragraph style.
fn styles() -> String {
    let heading = |id: &str, name: &str, size: u32, level: u32| {
        format!(
            r#"<w:style w:type="paragraph" w:styleId="{id}"><w:name w:val="{name}"/><w:basedOn w:val="Normal"/><w:next w:val="Normal"/><w:pPr><w:keepNext/><w:spacing w:before="240" w:after="80"/><w:outlineLvl w:val="{level}"/></w:pPr><w:rPr><w:b/><w:sz w:val="{size}"/></w:rPr></w:style>"#
        )
    };
    format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:styles xmlns:w="{W}"><w:style w:type="paragraph" w:default="1" w:styleId="Normal"><w:name w:val="Normal"/><w:pPr><w:spacing w:after="120"/></w:pPr><w:rPr><w:sz w:val="22"/></w:rPr></w:style>{}{}{}{}<w:style w:type="paragraph" w:styleId="Quote"><w:name w:val="Quote"/><w:basedOn w:val="Normal"/><w:pPr><w:ind w:left="567"/></w:pPr><w:rPr><w:i/><w:color w:val="444444"/></w:rPr></w:style><w:style w:type="paragraph" w:styleId="Code"><w:name w:val="Code"/><w:basedOn w:val="Normal"/><w:pPr><w:spacing w:after="0"/></w:pPr><w:rPr><w:rFonts w:ascii="Courier New" w:hAnsi="Courier New"/><w:sz w:val="18"/></w:rPr></w:style></w:styles>"#,
        heading("Title", "Title", 36, 0),
        heading("Heading1", "heading 1", 30, 0),
        heading("Heading2", "heading 2", 26, 1),
        heading("Heading3", "heading 3", 24, 2),
    )
}

/// The document being written and the external links it needs relationships for.
#[derive(Default)]
struct Doc {
    xml: String,
    links: Vec<String>,
}

impl Doc {
    fn paragraph(&mut self, style: Option<&str>, indent: Option<u32>, runs: &str) {
        self.xml.push_str("<w:p>");
        if style.is_some() || indent.is_some() {
            self.xml.push_str("<w:pPr>");
            if let Some(s) = style {
                self.xml.push_str(&format!("<w:pStyle w:val=\"{s}\"/>"));
            }
            if let Some(i) = indent {
                self.xml
                    .push_str(&format!("<w:ind w:left=\"{i}\" w:hanging=\"283\"/>"));
            }
            self.xml.push_str("</w:pPr>");
        }
        self.xml.push_str(runs);
        self.xml.push_str("</w:p>");
    }

    fn runs(&mut self, spans: &[Span]) -> String {
        let mut out = String::new();
        for s in spans {
            let run = run(s);
            match &s.link {
                Some(Link::Source(n)) => out.push_str(&format!(
                    "<w:hyperlink w:anchor=\"source_{n}\">{run}</w:hyperlink>"
                )),
                Some(Link::External(url)) if is_followable(url) => {
                    self.links.push(url.clone());
                    let id = self.links.len() + 1;
                    out.push_str(&format!(
                        "<w:hyperlink r:id=\"rId{id}\">{run}</w:hyperlink>"
                    ));
                }
                _ => out.push_str(&run),
            }
        }
        out
    }

    fn table(&mut self, rows: &[Vec<Vec<Span>>]) {
        self.xml.push_str(
            "<w:tbl><w:tblPr><w:tblBorders><w:top w:val=\"single\" w:sz=\"4\"/><w:left w:val=\"single\" w:sz=\"4\"/>\
             <w:bottom w:val=\"single\" w:sz=\"4\"/><w:right w:val=\"single\" w:sz=\"4\"/>\
             <w:insideH w:val=\"single\" w:sz=\"4\"/><w:insideV w:val=\"single\" w:sz=\"4\"/></w:tblBorders></w:tblPr>",
        );
        for (i, row) in rows.iter().enumerate() {
            self.xml.push_str("<w:tr>");
            for cell in row {
                let spans: Vec<Span> = cell
                    .iter()
                    .map(|s| Span {
                        bold: s.bold || i == 0,
                        ..s.clone()
                    })
                    .collect();
                let runs = self.runs(&spans);
                self.xml
                    .push_str(&format!("<w:tc><w:p>{runs}</w:p></w:tc>"));
            }
            self.xml.push_str("</w:tr>");
        }
        self.xml.push_str("</w:tbl><w:p/>");
    }
}

fn run(span: &Span) -> String {
    let mut props = String::new();
    if span.bold {
        props.push_str("<w:b/>");
    }
    if span.italic {
        props.push_str("<w:i/>");
    }
    if span.code {
        props.push_str("<w:rFonts w:ascii=\"Courier New\" w:hAnsi=\"Courier New\"/>");
    }
    if span.link.is_some() {
        props.push_str("<w:color w:val=\"1F5FA8\"/>");
    }
    let props = if props.is_empty() {
        String::new()
    } else {
        format!("<w:rPr>{props}</w:rPr>")
    };
    format!(
        "<w:r>{props}<w:t xml:space=\"preserve\">{}</w:t></w:r>",
        xml_text(&span.text)
    )
}

fn text_run(text: &str) -> String {
    run(&Span {
        text: text.to_owned(),
        ..Span::default()
    })
}

fn is_followable(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["http://", "https://", "file://", "mailto:"]
        .iter()
        .any(|p| lower.starts_with(p))
}

pub fn render(report: &Report) -> Result<Vec<u8>, ExportError> {
    let mut doc = Doc::default();
    doc.paragraph(Some("Title"), None, &text_run(&report.title));
    for block in &report.body {
        match block {
            Block::Heading { level, spans } => {
                let style = format!("Heading{}", (*level).clamp(2, 4) - 1);
                let runs = doc.runs(spans);
                doc.paragraph(Some(&style), None, &runs);
            }
            Block::Paragraph(spans) => {
                let runs = doc.runs(spans);
                doc.paragraph(None, None, &runs);
            }
            Block::Item {
                number,
                depth,
                spans,
            } => {
                let marker = number.map_or("•\t".to_owned(), |n| format!("{n}.\t"));
                let runs = format!("{}{}", text_run(&marker), doc.runs(spans));
                let indent = 567 * (*depth as u32 + 1);
                doc.paragraph(None, Some(indent), &runs);
            }
            Block::Quote(spans) => {
                let runs = doc.runs(spans);
                doc.paragraph(Some("Quote"), None, &runs);
            }
            Block::Code(code) => {
                for line in code.lines() {
                    doc.paragraph(Some("Code"), None, &text_run(line));
                }
            }
            Block::Table(rows) => doc.table(rows),
            Block::Rule => doc.paragraph(None, None, ""),
        }
    }
    sources(&mut doc, report);
    evidence(&mut doc, report);
    package(&doc)
}

fn sources(doc: &mut Doc, report: &Report) {
    if report.sources.is_empty() {
        return;
    }
    doc.paragraph(Some("Heading1"), None, &text_run("Sources"));
    for s in &report.sources {
        let mut runs = format!(
            "<w:bookmarkStart w:id=\"{n}\" w:name=\"source_{n}\"/><w:bookmarkEnd w:id=\"{n}\"/>",
            n = s.number
        );
        runs.push_str(&text_run(&format!("[{}] {} — ", s.number, s.title)));
        runs.push_str(&doc.runs(&[Span {
            text: s.url.clone(),
            link: Some(Link::External(s.url.clone())),
            ..Span::default()
        }]));
        doc.paragraph(None, None, &runs);
    }
    if !report.consulted.is_empty() {
        doc.paragraph(Some("Heading2"), None, &text_run("Consulted, not cited"));
        for c in &report.consulted {
            doc.paragraph(None, Some(567), &text_run(&format!("•\t{c}")));
        }
    }
}

fn evidence(doc: &mut Doc, report: &Report) {
    doc.paragraph(Some("Heading1"), None, &text_run("Evidence"));
    if let Some(summary) = report.check_summary() {
        doc.paragraph(None, None, &text_run(&summary));
    }
    for e in &report.evidence {
        let cite = doc.runs(&[Span {
            text: format!("[{}]", e.number),
            link: Some(Link::Source(e.number)),
            ..Span::default()
        }]);
        doc.paragraph(
            None,
            None,
            &format!("{}{cite}", text_run(&format!("{} ", e.sentence))),
        );
        let passage = e
            .passage
            .as_deref()
            .unwrap_or("(no passage of the source matched on its own)");
        doc.paragraph(Some("Quote"), None, &text_run(passage));
    }
}

fn package(doc: &Doc) -> Result<Vec<u8>, ExportError> {
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n\
         <w:document xmlns:w=\"{W}\" xmlns:r=\"{R}\"><w:body>{}<w:sectPr><w:pgSz w:w=\"11906\" w:h=\"16838\"/>\
         <w:pgMar w:top=\"1134\" w:right=\"1134\" w:bottom=\"1134\" w:left=\"1134\" w:header=\"0\" w:footer=\"0\" w:gutter=\"0\"/></w:sectPr></w:body></w:document>",
        doc.xml
    );
    let mut rels = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n\
         <Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\">\
         <Relationship Id=\"rId1\" Type=\"{R}/styles\" Target=\"styles.xml\"/>"
    );
    for (i, url) in doc.links.iter().enumerate() {
        rels.push_str(&format!(
            "<Relationship Id=\"rId{}\" Type=\"{R}/hyperlink\" Target=\"{}\" TargetMode=\"External\"/>",
            i + 2,
            xml_text(url)
        ));
    }
    rels.push_str("</Relationships>");
    let parts: [(&str, String); 5] = [
        ("[Content_Types].xml", CONTENT_TYPES.to_owned()),
        ("_rels/.rels", PACKAGE_RELS.to_owned()),
        ("word/_rels/document.xml.rels", rels),
        ("word/styles.xml", styles()),
        ("word/document.xml", document),
    ];
    zipped(&parts).map_err(|e| ExportError::Write {
        format: "DOCX",
        reason: e.to_string(),
    })
}

fn zipped(parts: &[(&str, String)]) -> zip::result::ZipResult<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, text) in parts {
        zip.start_file(*name, options)?;
        zip.write_all(text.as_bytes())?;
    }
    Ok(zip.finish()?.into_inner())
}

/// Text as XML character data: escaped, and without the control characters XML 1.0 forbids.
fn xml_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}
