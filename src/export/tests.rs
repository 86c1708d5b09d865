use super::*;
use serde_json::json;

const PAGE: &str = "shared_buffers (integer) Sets the amount of memory the database server uses \
for shared memory buffers. The default is typically 128 megabytes (128MB), but might be less if \
your kernel settings will not support it. If you have a dedicated database server with 1GB or \
more of RAM, a reasonable starting value for shared_buffers is 25% of the memory in your system.";

fn values() -> Value {
    json!({
        "messages": [{"type": "human", "content": "How large should shared_buffers be?"}],
        "final_report": "# Sizing shared_buffers\n\n\
            A reasonable starting value for shared_buffers is 25% of the memory in your system [1].\n\n\
            ## Details\n\n\
            - The default is typically 128 megabytes [1].\n\
            - Set it with `ALTER SYSTEM` <b>now</b>.\n\n\
            | setting | default |\n|---|---|\n| shared_buffers | 128MB [1] |\n\n\
            ```\nshared_buffers = 2GB\n```\n\n\
            ### Sources\n\n[1] 20.4. Resource Consumption: file:///docs/runtime-config-resource.html#MEM\n\n\
            ### Consulted, not cited\n\n- GEQO: file:///docs/geqo.html\n",
        "sources": [
            {"url": "file:///docs/runtime-config-resource.html#MEM", "title": "20.4. Resource Consumption", "text": PAGE},
            {"url": "file:///docs/geqo.html", "title": "GEQO", "text": "The genetic query optimizer."}
        ],
        "citations": {"citations": 3, "supported": 3, "removed": 1, "uncited_unsupported": 2}
    })
}

#[test]
fn a_report_is_split_into_title_body_sources_and_evidence() {
    let r = Report::from_values(&values()).unwrap();
    assert_eq!(r.title, "Sizing shared_buffers");
    assert_eq!(
        r.sources,
        [Cited {
            number: 1,
            title: "20.4. Resource Consumption".into(),
            url: "file:///docs/runtime-config-resource.html#MEM".into()
        }]
    );
    assert_eq!(r.consulted, ["GEQO: file:///docs/geqo.html"]);
    assert!(
        !r.body.iter().any(
            |b| matches!(b, Block::Heading { spans, .. } if blocks::plain(spans) == "Sources")
        )
    );
    let first = &r.evidence[0];
    assert_eq!(first.number, 1);
    assert!(
        first.sentence.starts_with("A reasonable starting value"),
        "{first:?}"
    );
    assert!(
        first
            .passage
            .as_deref()
            .is_some_and(|p| p.contains("25% of the memory")),
        "{first:?}"
    );
    assert!(
        r.evidence
            .iter()
            .any(|e| e.sentence.contains("128 megabytes"))
    );
    assert_eq!(r.file_name(Format::Pdf), "sizing-shared-buffers.pdf");
    assert!(Report::from_values(&json!({"final_report": null})).is_none());
}

#[test]
fn formats_are_named_and_negotiated() {
    assert_eq!(Format::named("PDF"), Some(Format::Pdf));
    assert_eq!(Format::named("markdown"), Some(Format::Markdown));
    assert_eq!(Format::named("odt"), None);
    assert_eq!(
        Format::accepted("application/xml, text/html;q=0.9"),
        Some(Format::Html)
    );
    assert_eq!(Format::accepted("*/*"), Some(Format::Markdown));
    assert_eq!(
        Format::accepted(Format::Docx.content_type()),
        Some(Format::Docx)
    );
    assert_eq!(Format::accepted("image/png"), None);
}

#[test]
fn the_markdown_keeps_the_report_and_adds_its_evidence() {
    let r = Report::from_values(&values()).unwrap();
    let md = String::from_utf8(r.render(Format::Markdown).unwrap()).unwrap();
    assert!(md.starts_with("# Sizing shared_buffers"));
    assert!(md.contains("## Evidence"));
    assert!(md.contains("3 citations: 3 supported"), "{md}");
    assert!(md.contains("  > shared_buffers (integer)"), "{md}");
}

#[test]
fn the_html_page_stands_alone_links_citations_and_runs_nothing() {
    let r = Report::from_values(&values()).unwrap();
    let html = String::from_utf8(r.render(Format::Html).unwrap()).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<h1>Sizing shared_buffers</h1>"));
    assert!(html.contains("<a class=\"cite\" href=\"#source-1\">[1]</a>"));
    assert!(html.contains("<li id=\"source-1\" value=\"1\">"));
    assert!(html.contains("<table>") && html.contains("<th>setting</th>"));
    assert!(html.contains("<pre><code>shared_buffers = 2GB</code></pre>"));
    assert!(html.contains("<code>ALTER SYSTEM</code>"));
    assert!(html.contains("&lt;b&gt;now&lt;/b&gt;"), "raw HTML is text");
    assert!(!html.contains("<script") && !html.contains("src=\"http"));
    assert!(html.contains("id=\"evidence\""));
}

#[test]
fn a_javascript_link_in_a_report_is_not_made_live() {
    let mut v = values();
    v["final_report"] = json!("# T\n\nClick [here](javascript:alert(1)) now [1].\n");
    let html = String::from_utf8(
        Report::from_values(&v)
            .unwrap()
            .render(Format::Html)
            .unwrap(),
    )
    .unwrap();
    assert!(!html.contains("javascript:"), "{html}");
    assert!(html.contains("Click here now"));
}

#[test]
fn the_docx_is_a_word_package_with_the_report_and_its_evidence() {
    let r = Report::from_values(&values()).unwrap();
    let bytes = r.render(Format::Docx).unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    let mut names: Vec<String> = (0..zip.len())
        .map(|i| zip.by_index(i).unwrap().name().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "[Content_Types].xml",
            "_rels/.rels",
            "word/_rels/document.xml.rels",
            "word/document.xml",
            "word/styles.xml"
        ]
    );
    let mut xml = String::new();
    std::io::Read::read_to_string(&mut zip.by_name("word/document.xml").unwrap(), &mut xml)
        .unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let text: String = doc
        .descendants()
        .filter(|n| n.has_tag_name("t"))
        .filter_map(|n| n.text())
        .collect();
    assert!(text.contains("Sizing shared_buffers"));
    assert!(text.contains("25% of the memory in your system"));
    assert!(text.contains("Evidence"));
    assert!(xml.contains("w:anchor=\"source_1\"") && xml.contains("w:name=\"source_1\""));
    assert!(xml.contains("<w:pStyle w:val=\"Heading1\"/>"));
}

#[test]
fn the_pdf_reads_back_with_its_text_sources_and_evidence() {
    let mut v = values();
    // Long enough for a second page.
    let long =
        "A reasonable starting value for shared_buffers is 25% of the memory in your system [1]. "
            .repeat(80);
    v["final_report"] = json!(format!(
        "# Sizing shared_buffers — “quoted”\n\n{long}\n\n### Sources\n\n[1] 20.4. Resource Consumption: file:///docs/runtime-config-resource.html#MEM\n"
    ));
    let r = Report::from_values(&v).unwrap();
    let bytes = r.render(Format::Pdf).unwrap();
    assert!(bytes.starts_with(b"%PDF-1.5"));
    let text = pdf_extract::extract_text_from_mem(&bytes).unwrap();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("Sizing shared_buffers"), "{flat:.300}");
    assert!(
        flat.contains("25% of the memory in your system [1]"),
        "{flat:.2000}"
    );
    assert!(flat.contains("Evidence"));
    assert!(flat.contains("file:///docs/runtime-config-resource.html#MEM"));
    let pages = lopdf::Document::load_mem(&bytes).unwrap().get_pages().len();
    assert!(pages >= 2, "{pages} page(s)");
}
