//! Tests of the text extraction: HTML, Markdown, reStructuredText and plain text.

use super::*;

fn long(word: &str) -> String {
    vec![word; 60].join(" ")
}

#[test]
fn html_sections_follow_headings_and_skip_navigation() {
    let page = format!(
        r#"<html><head><title>25.1. Routine Vacuuming</title><script>var x;</script></head>
        <body><div class="navheader"><a href="a.html">Prev</a> Up Home</div>
        <div class="sect1" id="ROUTINE-VACUUMING"><div class="titlepage"><h2>25.1. Routine Vacuuming</h2></div>
        <div class="toc"><dl><dt>25.1.1. Basics</dt></dl></div>
        <p>Intro {intro} with <code>VACUUM</code> command.</p>
        <div class="sect2" id="VACUUM-BASICS"><h3>25.1.1. Vacuuming Basics</h3>
        <p>{basics}</p><pre>VACUUM
  FULL;</pre></div></div>
        <div class="navfooter">Next</div></body></html>"#,
        intro = long("intro"),
        basics = long("basics"),
    );
    let s = sections(Format::Html, &page, "x.html");
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].anchor.as_deref(), Some("ROUTINE-VACUUMING"));
    assert_eq!(s[0].title, "25.1. Routine Vacuuming");
    assert!(s[0].text.contains("with VACUUM command."), "{}", s[0].text);
    assert!(!s[0].text.contains("Prev") && !s[0].text.contains("Basics"));
    assert_eq!(s[1].anchor.as_deref(), Some("VACUUM-BASICS"));
    assert_eq!(
        s[1].title,
        "25.1. Routine Vacuuming — 25.1.1. Vacuuming Basics"
    );
    assert!(s[1].text.contains("VACUUM\n  FULL;") || s[1].text.contains("VACUUM\nFULL;"));
    assert!(!s[1].text.contains("Next"));
}

/// What every page shares (the site's name in its title, the permalink sign after each
/// heading, a table of contents) is not part of a section's title or text.
#[test]
fn site_names_permalinks_and_link_lists_are_left_out() {
    let page = format!(
        r##"<html><head><title>What’s New In Python 3.11 — Python 3.11.2 documentation</title></head>
        <body><h1>What’s New In Python 3.11<a class="headerlink" href="#top">¶</a></h1>
        <div class="toctree-wrapper"><ul><li><a href="a.html">Summary</a></li>
        <li><a href="b.html">New Features</a></li><li><a href="c.html">Other Language Changes</a></li>
        <li><a href="d.html">Optimizations</a></li></ul></div><p>{intro}</p>
        <section id="faster-cpython"><h2>Faster CPython<a class="headerlink" href="#faster-cpython">¶</a></h2>
        <p>{text}</p><ul><li>See <a href="e.html">the tutorial</a> for more on what each of these changes means for code you run today.</li></ul></section>
        </body></html>"##,
        text = long("fast"),
        intro = long("intro"),
    );
    let s = sections(Format::Html, &page, "x.html");
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].title, "What’s New In Python 3.11");
    assert!(!s[0].text.contains("Optimizations"), "{}", s[0].text);
    assert_eq!(s[1].title, "What’s New In Python 3.11 — Faster CPython");
    assert!(
        s[1].text.contains("for code you run today"),
        "prose with a link stays"
    );
    assert_eq!(
        page_title("Vacuuming | Acme Docs", "Vacuuming"),
        "Vacuuming"
    );
    assert_eq!(
        page_title("Acme Docs | Vacuuming", "Vacuuming"),
        "Vacuuming"
    );
    assert_eq!(
        page_title("Vacuuming Basics", "Vacuuming"),
        "Vacuuming Basics",
        "a heading that is only the title's start is not a site's name"
    );
    assert_eq!(
        page_title("25.1. Routine Vacuuming", ""),
        "25.1. Routine Vacuuming"
    );
}

#[test]
fn short_sections_merge_into_the_next_and_keep_the_first_anchor() {
    let page = format!(
        "<html><body><h1 id=\"top\">Guide</h1><p>short</p><h2 id=\"deep\">Deep</h2><p>{}</p></body></html>",
        long("deep")
    );
    let s = sections(Format::Html, &page, "guide.html");
    assert_eq!(s.len(), 1, "{s:#?}");
    assert_eq!(s[0].anchor.as_deref(), Some("top"));
    assert_eq!(s[0].title, "Guide");
    assert!(
        s[0].text.starts_with("Guide\nshort\nDeep\ndeep deep"),
        "{}",
        s[0].text
    );
}

#[test]
fn markdown_headings_become_slugged_anchors() {
    let md = format!(
        "# Wiki\n\n{}\n\n## Deploy Steps\n\n{}\n\n```\n# not a heading\n```\n",
        long("intro"),
        long("deploy")
    );
    let s = sections(Format::Markdown, &md, "wiki.md");
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].anchor.as_deref(), Some("wiki"));
    assert_eq!(s[1].anchor.as_deref(), Some("deploy-steps"));
    assert_eq!(s[1].title, "Wiki — Deploy Steps");
    assert!(s[1].text.contains("# not a heading"));
}

#[test]
fn restructured_text_is_cut_at_its_underlined_headings() {
    let doc = format!(
        "=======\nasyncio\n=======\n\n{}\n\nTask groups\n-----------\n\n{}\n\n\
         Tables are rows::\n\n  ===  ===\n  a    b\n  ===  ===\n",
        long("intro"),
        long("groups")
    );
    let s = sections(Format::Rst, &doc, "x.rst");
    assert_eq!(s.len(), 2, "{s:#?}");
    assert_eq!(s[0].title, "asyncio");
    assert_eq!(s[0].anchor.as_deref(), Some("asyncio"));
    assert!(!s[0].text.contains("======="), "{}", s[0].text);
    assert_eq!(s[1].title, "asyncio — Task groups");
    assert_eq!(s[1].anchor.as_deref(), Some("task-groups"));
    assert!(s[1].text.contains("===  ==="), "a table's rules are text");
    assert_eq!(
        Format::of(std::path::Path::new("a/b.RST")),
        Some(Format::Rst)
    );
}

#[test]
fn plain_text_is_cut_on_paragraphs() {
    let para = long("word");
    let doc = vec![para.as_str(); 30].join("\n\n");
    let s = sections(Format::Text, &doc, "notes.txt");
    assert!(s.len() > 1);
    assert!(
        s.iter()
            .all(|x| x.title == "notes.txt" && x.anchor.is_none())
    );
    assert!(
        s.iter()
            .all(|x| x.text.chars().count() <= TEXT_SECTION_CHARS + 400)
    );
}

#[test]
fn nesting_is_counted_on_elements_that_must_be_closed() {
    assert_eq!(nesting_depth("<div><div><span>x</span></div></div>"), 3);
    // Paragraphs and items left open, void and self-closed elements nest nothing.
    let loose = "<ul>".to_owned() + &"<li><p>item<br><img src=x><x-y/>".repeat(500) + "</ul>";
    assert_eq!(nesting_depth(&loose), 1);
    // Tags inside comments and scripts are not elements.
    let hidden = "<!-- <div><div> --><script>let s = '<div><div><div>';</script><b>x</b>";
    assert_eq!(nesting_depth(hidden), 1);
    assert_eq!(nesting_depth(&"<div>".repeat(5000)), 5000);
    assert_eq!(nesting_depth("<"), 0);
    assert_eq!(nesting_depth("a < b and c <"), 0);
}
