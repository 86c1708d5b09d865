//! A finished report exported over real HTTP (`GET /threads/{id}/report`): Markdown, HTML, DOCX
//! and PDF read back with readers of their own (an XML parser, pdf-extract), each with the
//! evidence appendix; bad formats, an unacceptable Accept and a thread without a report refused
//! with a `{"detail"}`.

use super::research::{docs_corpus, last_values, stream, vacuum_run};
use crate::support;
use serde_json::{Value, json};
use support::fake_llm::FakeReply;
use support::new_thread;
use support::research as r;

async fn get(ra: &r::ResearchApp, path: &str, accept: Option<&str>) -> reqwest::Response {
    let mut req = deep_research::outbound::client_builder()
        .build()
        .unwrap()
        .get(ra.app.url(path));
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    req.send().await.unwrap()
}

async fn detail(resp: reqwest::Response, status: u16) -> String {
    assert_eq!(resp.status(), status);
    let body: Value = resp.json().await.unwrap();
    body["detail"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_report_downloads_in_four_formats_with_its_evidence() {
    let (_docs, _index, config) = docs_corpus();
    let ra = r::start(
        vacuum_run(
            json!(["vacuum dead tuples"]),
            |_| FakeReply::Text("VACUUM reclaims the storage of dead tuples.".into()),
            "<Report>\n# Vacuum, briefly\n\nVACUUM reclaims storage occupied by dead tuples [1]. \
             The autovacuum launcher starts a worker every 60 seconds by default [1].\n\n\
             | what | when |\n|---|---|\n| autovacuum | every 60 seconds |\n</Report>",
        ),
        &format!("[research]\nallow_clarification = false\n\n{config}"),
    )
    .await;
    let tid = new_thread(&ra.app).await;
    let frames = stream(
        &ra,
        &tid,
        "How does VACUUM work?",
        json!({"config": {"configurable": {"search_api": "local", "corpus": "manual"}}}),
    )
    .await;
    let report = last_values(&frames)["final_report"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/threads/{tid}/report");

    // Markdown by default: the report as kept, then its evidence.
    let resp = get(&ra, &path, None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "text/markdown; charset=utf-8"
    );
    assert_eq!(
        resp.headers()["content-disposition"],
        "attachment; filename=\"vacuum-briefly.md\""
    );
    let md = resp.text().await.unwrap();
    assert!(md.starts_with(report.trim()), "{md}");
    let evidence = md.split("## Evidence").nth(1).unwrap_or_default();
    assert!(
        evidence.contains("- VACUUM reclaims storage occupied by dead tuples. [1]"),
        "{md}"
    );
    assert!(
        evidence.contains("> VACUUM reclaims storage occupied by dead tuples. The autovacuum"),
        "the matched passage of the section is shown: {md}"
    );

    // HTML by Accept: one page, the citation a link to its source.
    let resp = get(&ra, &path, Some("text/html")).await;
    assert_eq!(resp.status(), 200);
    let html = resp.text().await.unwrap();
    assert!(html.contains("<h1>Vacuum, briefly</h1>"));
    assert!(html.contains("href=\"#source-1\""));
    assert!(html.contains("id=\"source-1\""));
    assert!(html.contains("<th>what</th>"));

    // DOCX: a zip whose document is well-formed XML holding the report.
    let resp = get(&ra, &format!("{path}?format=docx"), None).await;
    assert_eq!(resp.status(), 200);
    let bytes = resp.bytes().await.unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let mut xml = String::new();
    std::io::Read::read_to_string(&mut zip.by_name("word/document.xml").unwrap(), &mut xml)
        .unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let text: String = doc
        .descendants()
        .filter(|n| n.has_tag_name("t"))
        .filter_map(|n| n.text())
        .collect();
    assert!(text.contains("VACUUM reclaims storage occupied by dead tuples"));
    assert!(text.contains("Evidence"));

    // PDF: its text read back.
    let resp = get(&ra, &format!("{path}?format=pdf"), None).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/pdf");
    let bytes = resp.bytes().await.unwrap();
    let text = pdf_extract::extract_text_from_mem(&bytes).unwrap();
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("Vacuum, briefly"), "{flat}");
    assert!(flat.contains("dead tuples [1]"), "{flat}");
    assert!(flat.contains("Evidence"), "{flat}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_asked_for_wrongly_is_refused_with_a_detail() {
    let ra = r::start(r::scripted(r::Script::default()), "").await;
    let tid = new_thread(&ra.app).await;
    let path = format!("/threads/{tid}/report");
    let d = detail(get(&ra, &format!("{path}?format=odt"), None).await, 422).await;
    assert!(d.contains("md, html, pdf, docx"), "{d}");
    let d = detail(get(&ra, &format!("{path}?size=2"), None).await, 422).await;
    assert!(!d.is_empty());
    let d = detail(get(&ra, &path, Some("image/png")).await, 406).await;
    assert!(d.contains("application/pdf"), "{d}");
    let d = detail(get(&ra, &path, None).await, 404).await;
    assert!(d.contains("has no report yet"), "{d}");
    let missing = uuid::Uuid::new_v4();
    let d = detail(
        get(&ra, &format!("/threads/{missing}/report"), None).await,
        404,
    )
    .await;
    assert!(d.contains("not found"), "{d}");
    let d = detail(get(&ra, "/threads/not-a-uuid/report", None).await, 422).await;
    assert!(!d.is_empty());
}
