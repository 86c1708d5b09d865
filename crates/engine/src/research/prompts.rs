//! Prompt templates: built into the binary from `prompts/*.txt`, each replaceable by a file of
//! the same name in the directory the operator configures. `{name}` placeholders are filled in.

use std::collections::BTreeMap;
use std::path::Path;

/// Built-in templates by name.
const BUILT_IN: [(&str, &str); 19] = [
    (
        "clarify_with_user",
        include_str!("../../../../prompts/clarify_with_user.txt"),
    ),
    (
        "research_brief",
        include_str!("../../../../prompts/research_brief.txt"),
    ),
    (
        "supervisor_system",
        include_str!("../../../../prompts/supervisor_system.txt"),
    ),
    (
        "researcher_system",
        include_str!("../../../../prompts/researcher_system.txt"),
    ),
    (
        "compress_system",
        include_str!("../../../../prompts/compress_system.txt"),
    ),
    (
        "compress_request",
        include_str!("../../../../prompts/compress_request.txt"),
    ),
    (
        "final_report",
        include_str!("../../../../prompts/final_report.txt"),
    ),
    (
        "restate_source",
        include_str!("../../../../prompts/restate_source.txt"),
    ),
    (
        "overview_from_sources",
        include_str!("../../../../prompts/overview_from_sources.txt"),
    ),
    (
        "outline_report",
        include_str!("../../../../prompts/outline_report.txt"),
    ),
    (
        "write_section",
        include_str!("../../../../prompts/write_section.txt"),
    ),
    (
        "answer_from_sections",
        include_str!("../../../../prompts/answer_from_sections.txt"),
    ),
    (
        "answer_follow_up",
        include_str!("../../../../prompts/answer_follow_up.txt"),
    ),
    (
        "report_again",
        include_str!("../../../../prompts/report_again.txt"),
    ),
    (
        "summarize_webpage",
        include_str!("../../../../prompts/summarize_webpage.txt"),
    ),
    (
        "corrective_turn",
        include_str!("../../../../prompts/corrective_turn.txt"),
    ),
    (
        "plan_research",
        include_str!("../../../../prompts/plan_research.txt"),
    ),
    (
        "plan_approved",
        include_str!("../../../../prompts/plan_approved.txt"),
    ),
    (
        "plan_topic",
        include_str!("../../../../prompts/plan_topic.txt"),
    ),
];

/// The loaded templates.
#[derive(Clone, Debug)]
pub struct Prompts {
    templates: BTreeMap<String, String>,
}

impl Prompts {
    /// The built-in templates.
    pub fn built_in() -> Self {
        let templates = BUILT_IN
            .iter()
            .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
            .collect();
        Self { templates }
    }

    /// Built-ins, with `<dir>/<name>.txt` replacing each template that has such a file.
    pub fn load(dir: Option<&Path>) -> std::io::Result<Self> {
        let mut prompts = Self::built_in();
        let Some(dir) = dir else {
            return Ok(prompts);
        };
        for (name, text) in prompts.templates.iter_mut() {
            let path = dir.join(format!("{name}.txt"));
            if path.exists() {
                *text = std::fs::read_to_string(&path)?;
            }
        }
        Ok(prompts)
    }

    /// Fills `{key}` placeholders of template `name` (an unknown name renders empty).
    /// Placeholders are found in the template only, so a value (a web page, a user's message)
    /// that contains `{date}` stays as written. The text is allocated once at its exact size:
    /// thousands of rendered page-summary prompts can be in flight at once.
    pub fn render(&self, name: &str, vars: &[(&str, &str)]) -> String {
        let template = self.templates.get(name).map_or("", String::as_str);
        let pieces = fill(template, vars);
        let mut text = String::with_capacity(pieces.iter().map(|p| p.len()).sum());
        pieces.iter().for_each(|p| text.push_str(p));
        text
    }
}

/// `template` cut at its placeholders, each known `{key}` replaced by its value; other braces
/// are kept as they are.
fn fill<'a>(template: &'a str, vars: &[(&str, &'a str)]) -> Vec<&'a str> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let known = after.find('}').and_then(|close| {
            let key = &after[..close];
            vars.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, value)| (close, *value))
        });
        match known {
            Some((close, value)) => {
                pieces.push(&rest[..open]);
                pieces.push(value);
                rest = &after[close + 1..];
            }
            None => {
                pieces.push(&rest[..=open]);
                rest = after;
            }
        }
    }
    pieces.push(rest);
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_come_from_the_template_only() {
        let mut p = Prompts::built_in();
        p.templates.insert(
            "t".into(),
            "{a} and {b}; {unknown} {\"json\": 1} {a}{".into(),
        );
        let out = p.render("t", &[("a", "page about {b}"), ("b", "B")]);
        assert_eq!(
            out,
            "page about {b} and B; {unknown} {\"json\": 1} page about {b}{"
        );
        assert_eq!(out.capacity(), out.len());
        assert_eq!(p.render("missing", &[("a", "x")]), "");
    }

    #[test]
    fn every_template_renders_its_variables() {
        let p = Prompts::built_in();
        let out = p.render(
            "final_report",
            &[
                ("research_brief", "B"),
                ("messages", "M"),
                ("findings", "F"),
                ("date", "D"),
            ],
        );
        for needle in ["B", "M", "F", "Today is D"] {
            assert!(out.contains(needle), "{needle}");
        }
        for (name, _) in BUILT_IN {
            assert!(!p.render(name, &[]).is_empty(), "{name}");
        }
    }

    #[test]
    fn a_directory_overrides_built_ins() {
        let dir = std::env::temp_dir().join(format!("dr-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("research_brief.txt"), "custom {date}").unwrap();
        let p = Prompts::load(Some(&dir)).unwrap();
        assert_eq!(
            p.render("research_brief", &[("date", "today")]),
            "custom today"
        );
        assert!(p.render("final_report", &[]).contains("<Findings>"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
