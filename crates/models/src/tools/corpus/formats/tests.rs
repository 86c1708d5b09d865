//! Each format read from a file made the way its writers make it.

use super::*;
use std::io::Write;

fn zipped(members: &[(&str, &str)]) -> Vec<u8> {
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    for (name, text) in members {
        out.start_file(*name, opts).unwrap();
        out.write_all(text.as_bytes()).unwrap();
    }
    out.finish().unwrap().into_inner()
}

fn long(word: &str) -> String {
    vec![word; 60].join(" ")
}

#[test]
fn word_documents_are_cut_at_their_headings() {
    let p = |style: &str, text: &str| {
        let props = if style.is_empty() {
            String::new()
        } else {
            format!("<w:pPr><w:pStyle w:val=\"{style}\"/></w:pPr>")
        };
        format!("<w:p>{props}<w:r><w:t>{text}</w:t></w:r></w:p>")
    };
    let body = format!(
        "<?xml version=\"1.0\"?><w:document xmlns:w=\"{WORD}\"><w:body>{}{}{}{}</w:body></w:document>",
        p("Heading1", "Vacuuming"),
        p("", &format!("Vacuum reclaims storage. {}", long("vacuum"))),
        p("Heading2", "Freezing"),
        p(
            "",
            &format!("Freezing prevents wraparound. {}", long("freeze"))
        ),
    );
    let core = format!(
        "<cp:coreProperties xmlns:cp=\"x\" xmlns:dc=\"{DUBLIN_CORE}\"><dc:title>Ops guide</dc:title></cp:coreProperties>"
    );
    let bytes = zipped(&[("word/document.xml", &body), ("docProps/core.xml", &core)]);
    let s = read(Format::Docx, &bytes, "guide.docx").unwrap();
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].title, "Ops guide — Vacuuming");
    assert_eq!(s[0].anchor.as_deref(), Some("vacuuming"));
    assert!(s[0].text.starts_with("Vacuum reclaims storage."));
    assert_eq!(s[1].title, "Ops guide — Freezing");
}

#[test]
fn opendocument_text_is_cut_at_its_headings() {
    let content = format!(
        "<office:document-content xmlns:office=\"o\" xmlns:text=\"{ODF_TEXT}\"><office:body><office:text>\
         <text:h text:outline-level=\"1\">Backups</text:h><text:p>Take a base backup<text:s/>daily. {}</text:p>\
         <text:h text:outline-level=\"1\">Restores</text:h><text:p>Replay the archive. {}</text:p>\
         </office:text></office:body></office:document-content>",
        long("backup"),
        long("restore")
    );
    let bytes = zipped(&[("content.xml", &content)]);
    let s = read(Format::Odt, &bytes, "ops.odt").unwrap();
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].title, "ops.odt — Backups");
    assert!(
        s[0].text.starts_with("Take a base backup daily."),
        "{}",
        s[0].text
    );
    assert_eq!(s[1].anchor.as_deref(), Some("restores"));
}

#[test]
fn an_epub_is_read_chapter_by_chapter_in_spine_order() {
    let chapter = |h: &str, word: &str| {
        format!(
            "<html xmlns=\"http://www.w3.org/1999/xhtml\"><body><h1 id=\"{word}\">{h}</h1><p>{}</p></body></html>",
            long(word)
        )
    };
    let opf = format!(
        "<package xmlns=\"http://www.idpf.org/2007/opf\"><metadata xmlns:dc=\"{DUBLIN_CORE}\"><dc:title>The Book</dc:title></metadata>\
         <manifest><item id=\"a\" href=\"a.xhtml\"/><item id=\"b\" href=\"b.xhtml\"/></manifest>\
         <spine><itemref idref=\"b\"/><itemref idref=\"a\"/></spine></package>"
    );
    let container =
        "<container><rootfiles><rootfile full-path=\"OEBPS/content.opf\"/></rootfiles></container>";
    let bytes = zipped(&[
        ("META-INF/container.xml", container),
        ("OEBPS/content.opf", &opf),
        ("OEBPS/a.xhtml", &chapter("Second", "two")),
        ("OEBPS/b.xhtml", &chapter("First", "one")),
    ]);
    let s = read(Format::Epub, &bytes, "book.epub").unwrap();
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].title, "The Book — First");
    assert_eq!(s[0].anchor.as_deref(), Some("one"));
    assert_eq!(s[1].title, "The Book — Second");
}

/// A PDF of `pages`, one line of text each, as a writer makes it.
pub(in crate::tools::corpus) fn pdf_of(pages: &[&str]) -> Vec<u8> {
    use lopdf::content::{Content, Operation};
    use lopdf::{Document, Object, Stream, dictionary};
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Courier",
    });
    let resources_id = doc.add_object(dictionary! {"Font" => dictionary! {"F1" => font_id}});
    let mut kids: Vec<Object> = Vec::new();
    for text in pages {
        let content = Content {
            operations: vec![
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 10.into()]),
                Operation::new("Td", vec![50.into(), 700.into()]),
                Operation::new("Tj", vec![Object::string_literal(*text)]),
                Operation::new("ET", vec![]),
            ],
        };
        let content_id = doc.add_object(Stream::new(dictionary! {}, content.encode().unwrap()));
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
            "MediaBox" => vec![0.into(), 0.into(), 595.into(), 842.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! {"Type" => "Catalog", "Pages" => pages_id});
    doc.trailer.set("Root", catalog_id);
    let mut bytes = Vec::new();
    doc.save_to(&mut bytes).unwrap();
    bytes
}

#[test]
fn a_pdf_is_read_a_page_at_a_time() {
    let bytes = pdf_of(&[
        "Vacuum reclaims storage held by dead rows; run it often on busy tables so they stay small.",
        "Freezing old rows protects the cluster against transaction ID wraparound, every two billion.",
    ]);
    let s = read(Format::Pdf, &bytes, "ops.pdf").unwrap();
    // Both pages are short: the first takes the second in, keeping its own location.
    assert_eq!(s.len(), 1, "{s:#?}");
    assert_eq!(s[0].anchor.as_deref(), Some("page=1"));
    assert!(
        s[0].text.contains("Vacuum reclaims storage"),
        "{}",
        s[0].text
    );
    assert!(
        s[0].text.contains("transaction ID wraparound"),
        "{}",
        s[0].text
    );
    let long = "Checkpoints write every dirty buffer to disk. ".repeat(6);
    let s = read(Format::Pdf, &pdf_of(&[&long, &long]), "two.pdf").unwrap();
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[1].anchor.as_deref(), Some("page=2"));
}

/// A damaged file is an error to skip, not a panic or an empty document.
#[test]
fn damaged_files_are_errors() {
    for format in [Format::Pdf, Format::Docx, Format::Odt, Format::Epub] {
        assert!(read(format, b"not a document", "x").is_err(), "{format:?}");
    }
    let bytes = zipped(&[("word/document.xml", "<w:document")]);
    let err = read(Format::Docx, &bytes, "x").unwrap_err();
    assert!(err.to_string().contains("word/document.xml"), "{err}");
}
