//! The shape of a report as the check reads it: the writer's own reference list and stray tags
//! left out, a closing paragraph about the report itself, headings left over sections the
//! check emptied, and the blocks (prose to check; headings, code, tables kept as they are).

/// Headings under which a writer lists its references; that section is rewritten.
const SOURCE_HEADINGS: [&str; 8] = [
    "consulted, not cited",
    "sources",
    "references",
    "bibliography",
    "works cited",
    "citations",
    "sources cited",
    "reference list",
];

/// A heading that opens a list of references, and its level.
pub(super) fn is_sources_heading(line: &str) -> Option<usize> {
    let t = line.trim();
    let level = t.chars().take_while(|c| *c == '#').count();
    let name = t[level..]
        .trim()
        .trim_matches(|c: char| c == '*' || c == ':' || c == '_')
        .trim()
        .to_ascii_lowercase();
    let bold = level == 0 && t.starts_with("**");
    let plain = level == 0 && t.ends_with(':') && !t.contains(' ');
    if (level > 0 || bold || plain) && SOURCE_HEADINGS.contains(&name.as_str()) {
        Some(if level == 0 { 7 } else { level })
    } else {
        None
    }
}

/// Wrapper tags a small model copies from the prompt (`<Report>`) on lines of their own.
pub(super) fn is_stray_tag(line: &str) -> bool {
    let t = line.trim();
    t.len() > 2
        && t.starts_with('<')
        && t.ends_with('>')
        && t[1..t.len() - 1]
            .trim_start_matches('/')
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ')
}

/// A closing paragraph about the report itself ("This report provides…").
pub(super) fn is_about_itself(paragraph: &str) -> bool {
    let p = paragraph.trim().to_ascii_lowercase();
    let head: String = p.chars().take(80).collect();
    [
        "this report",
        "in this report",
        "the report above",
        "this document",
        "i hope",
    ]
    .iter()
    .any(|s| head.starts_with(s) || head.contains(&format!(" {s} ")))
}

/// The report's lines without stray tags and without the writer's own list of references.
pub(super) fn body_lines(report: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut skipping: Option<usize> = None;
    for line in report.lines() {
        if is_stray_tag(line) {
            continue;
        }
        if let Some(level) = is_sources_heading(line) {
            skipping = Some(level);
            continue;
        }
        if let Some(level) = skipping {
            let t = line.trim();
            let heading = t.chars().take_while(|c| *c == '#').count();
            if heading > 0 && heading <= level {
                skipping = None;
            } else {
                continue;
            }
        }
        out.push(line);
    }
    out
}

/// `body` without the headings whose section the check left empty: a heading followed, past
/// blank lines, by a heading of its level or above, or by the end. Read from the end, so a
/// section whose subsections all went goes too (its next line is then the next kept one).
pub(super) fn without_empty_sections(body: &str) -> String {
    let level = |line: &str| {
        let t = line.trim_start();
        let n = t.chars().take_while(|c| *c == '#').count();
        (n > 0 && t[n..].starts_with(' ')).then_some(n)
    };
    let lines: Vec<&str> = body.lines().collect();
    // Which lines are inside a code fence (a `#` there is not a heading).
    let mut fenced = false;
    let in_code: Vec<bool> = lines
        .iter()
        .map(|line| {
            let fence = line.trim_start().starts_with("```");
            let inside = fenced || fence;
            if fence {
                fenced = !fenced;
            }
            inside
        })
        .collect();
    let mut kept: Vec<&str> = Vec::with_capacity(lines.len());
    // The level of the next kept non-blank line: None at the end, Some(None) for text.
    let mut next: Option<Option<usize>> = None;
    for (i, line) in lines.iter().enumerate().rev() {
        let heading = level(line).filter(|_| !in_code[i] && i > 0);
        if let Some(mine) = heading {
            let empty = next.is_none_or(|n| n.is_some_and(|theirs| theirs <= mine));
            if empty {
                continue;
            }
        }
        if !line.trim().is_empty() {
            next = Some(heading);
        }
        kept.push(line);
    }
    kept.reverse();
    kept.join("\n")
}

#[cfg(test)]
mod tests {
    use super::without_empty_sections;

    #[test]
    fn a_section_whose_subsections_all_went_goes_too() {
        let body = "# Title\n\n## Causes\n\n### Heat\n\n### Light\n\n## Action\n\nReefs are protected [1].\n\n## Outlook\n\n";
        assert_eq!(
            without_empty_sections(body),
            "# Title\n\n\n\n\n## Action\n\nReefs are protected [1].\n\n"
        );
    }

    #[test]
    fn sections_with_text_and_code_stay() {
        let body = "# T\n\n## A\n\n```\n# not a heading\n```\n\n## B\n\n### B1\n\ntext\n";
        assert_eq!(without_empty_sections(body), body.trim_end());
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BlockKind {
    /// Paragraphs and list items: claims to check.
    Prose,
    /// Headings, blank lines, code and tables: left as they are.
    Verbatim,
}

pub(super) struct Block {
    pub(super) kind: BlockKind,
    pub(super) text: String,
}

/// Lines grouped into paragraphs (a list item or table row is one of its own), headings, code
/// and blank lines kept as they are.
pub(super) fn blocks(lines: &[&str]) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut fenced = false;
    for line in lines {
        let t = line.trim();
        if t.starts_with("```") {
            fenced = !fenced;
        }
        // Tables keep their shape: a marker added after a row's last cell would break it.
        let verbatim = fenced
            || t.starts_with("```")
            || t.is_empty()
            || t.starts_with('#')
            || t.starts_with('|')
            || t.starts_with("> Note:");
        let starts_item = t.starts_with(['-', '*', '+', '>'])
            || t.split_once(['.', ')'])
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if verbatim {
            out.push(Block {
                kind: BlockKind::Verbatim,
                text: (*line).to_owned(),
            });
            continue;
        }
        match out.last_mut() {
            Some(prev) if prev.kind == BlockKind::Prose && !starts_item => {
                prev.text.push('\n');
                prev.text.push_str(line);
            }
            _ => out.push(Block {
                kind: BlockKind::Prose,
                text: (*line).to_owned(),
            }),
        }
    }
    out
}
