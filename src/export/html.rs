//! The report as one self-contained HTML page: its own styles, no script, no request for
//! anything else; each citation a link to its entry in the Sources list, and the evidence
//! appendix at the end. Everything the report says is escaped: a model wrote it.

use super::Report;
use super::blocks::{Block, Link, Span};

const STYLE: &str = "body{font:16px/1.55 system-ui,sans-serif;max-width:46rem;margin:2rem auto;\
padding:0 1rem;color:#1b1b1b}h1{font-size:1.7rem}h2{font-size:1.3rem;margin-top:2rem}\
blockquote{border-left:3px solid #bbb;margin:1rem 0;padding:0 1rem;color:#444}\
pre{background:#f4f4f4;padding:.75rem;overflow-x:auto}code{font-family:ui-monospace,monospace}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3rem .5rem}\
a.cite{text-decoration:none}ol.sources li,.evidence li{margin:.4rem 0}\
.passage{color:#444;font-size:.92rem;border-left:3px solid #9bc;padding-left:.6rem;margin:.3rem 0}";

pub fn render(report: &Report) -> String {
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&report.title),
        escape(&report.title)
    );
    body(&mut out, &report.body);
    if !report.sources.is_empty() {
        out.push_str("<h2>Sources</h2>\n<ol class=\"sources\">\n");
        for s in &report.sources {
            out.push_str(&format!(
                "<li id=\"source-{n}\" value=\"{n}\">{} — {}</li>\n",
                escape(&s.title),
                link(&s.url, &s.url),
                n = s.number
            ));
        }
        out.push_str("</ol>\n");
    }
    if !report.consulted.is_empty() {
        out.push_str("<h3>Consulted, not cited</h3>\n<ul>\n");
        for c in &report.consulted {
            out.push_str(&format!("<li>{}</li>\n", escape(c)));
        }
        out.push_str("</ul>\n");
    }
    evidence(&mut out, report);
    out.push_str("</body>\n</html>\n");
    out
}

fn evidence(out: &mut String, report: &Report) {
    out.push_str("<h2 id=\"evidence\">Evidence</h2>\n");
    if let Some(summary) = report.check_summary() {
        out.push_str(&format!("<p>{}</p>\n", escape(&summary)));
    }
    out.push_str("<ul class=\"evidence\">\n");
    for e in &report.evidence {
        let passage = match &e.passage {
            Some(p) => escape(p),
            None => "(no passage of the source matched on its own)".to_owned(),
        };
        out.push_str(&format!(
            "<li>{} <a class=\"cite\" href=\"#source-{n}\">[{n}]</a>\
             <div class=\"passage\">{passage}</div></li>\n",
            escape(&e.sentence),
            n = e.number
        ));
    }
    out.push_str("</ul>\n");
}

fn body(out: &mut String, blocks: &[Block]) {
    // Open list elements, by depth: whether each is ordered.
    let mut lists: Vec<bool> = Vec::new();
    for block in blocks {
        let (depth, ordered) = match block {
            Block::Item { number, depth, .. } => (Some(*depth), number.is_some()),
            _ => (None, false),
        };
        let wanted = depth.map_or(0, |d| d + 1);
        while lists.len() > wanted {
            let ordered = lists.pop().unwrap_or(false);
            out.push_str(if ordered { "</ol>\n" } else { "</ul>\n" });
        }
        while lists.len() < wanted {
            lists.push(ordered);
            out.push_str(if ordered { "<ol>\n" } else { "<ul>\n" });
        }
        match block {
            Block::Heading { level, spans } => {
                // The title is the page's one h1; the report's headings sit below it.
                let level = (*level).clamp(2, 6);
                out.push_str(&format!("<h{level}>{}</h{level}>\n", inline(spans)));
            }
            Block::Paragraph(spans) => out.push_str(&format!("<p>{}</p>\n", inline(spans))),
            Block::Item { spans, .. } => out.push_str(&format!("<li>{}</li>\n", inline(spans))),
            Block::Quote(spans) => {
                out.push_str(&format!(
                    "<blockquote><p>{}</p></blockquote>\n",
                    inline(spans)
                ));
            }
            Block::Code(code) => {
                out.push_str(&format!("<pre><code>{}</code></pre>\n", escape(code)));
            }
            Block::Table(rows) => table(out, rows),
            Block::Rule => out.push_str("<hr>\n"),
        }
    }
    while let Some(ordered) = lists.pop() {
        out.push_str(if ordered { "</ol>\n" } else { "</ul>\n" });
    }
}

fn table(out: &mut String, rows: &[Vec<Vec<Span>>]) {
    out.push_str("<table>\n");
    for (i, row) in rows.iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for c in row {
            out.push_str(&format!("<{cell}>{}</{cell}>", inline(c)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn inline(spans: &[Span]) -> String {
    let mut out = String::new();
    for s in spans {
        let mut text = escape(&s.text);
        if s.code {
            text = format!("<code>{text}</code>");
        }
        if s.italic {
            text = format!("<em>{text}</em>");
        }
        if s.bold {
            text = format!("<strong>{text}</strong>");
        }
        match &s.link {
            Some(Link::Source(n)) => {
                text = format!("<a class=\"cite\" href=\"#source-{n}\">{text}</a>");
            }
            Some(Link::External(url)) => text = link(url, &s.text),
            None => {}
        }
        out.push_str(&text);
    }
    out
}

/// A link to `url` when it is one a reader can follow (http, https, file, mailto), else the
/// text alone: a `javascript:` link in a report is not made live.
fn link(url: &str, text: &str) -> String {
    let lower = url.trim().to_ascii_lowercase();
    let safe = ["http://", "https://", "file://", "mailto:", "#"]
        .iter()
        .any(|p| lower.starts_with(p));
    if safe {
        format!("<a href=\"{}\">{}</a>", escape(url.trim()), escape(text))
    } else {
        escape(text)
    }
}

pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
