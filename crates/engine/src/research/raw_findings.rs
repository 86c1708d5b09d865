//! A researcher's findings when its model's clean-up cannot be used: the search results it was
//! shown, turned into findings with citations. A small model sometimes answers the clean-up
//! request with a tool call of its own (its history is full of them) or by copying the
//! request's instructions back; the report writer, given that, writes from memory and cites
//! nothing it retrieved. The test is whether the clean-up names any source it was shown:
//! findings that cite nothing retrieved give the writer nothing to cite either.

use serde_json::Value;

/// Why the model's clean-up `text` cannot stand in for `results`, if it cannot.
pub fn unusable(text: &str, results: &[String]) -> Option<&'static str> {
    let t = text
        .trim()
        .trim_start_matches("<tool_call>")
        .trim_end_matches("</tool_call>")
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    if t.is_empty() {
        return Some("the clean-up was empty");
    }
    if serde_json::from_str::<Value>(t).is_ok_and(|v| v.is_object() || v.is_array()) {
        return Some("the clean-up was a tool call, not findings");
    }
    let shown: Vec<&str> = results
        .iter()
        .flat_map(|r| blocks(r))
        .map(|b| b.url)
        .collect();
    let named = |url: &str| named_in(t, url);
    if !shown.is_empty() && !shown.iter().any(|u| named(u)) {
        return Some("the clean-up names none of the sources it was shown");
    }
    // A source list under the instructions copied back names every source and says nothing:
    // the findings above the list must cite something.
    let body = findings_body(t);
    if !shown.is_empty()
        && !super::support::has_citation(body)
        && !shown.iter().any(|u| named_in(body, u))
    {
        return Some("the clean-up's findings cite none of the sources it was shown");
    }
    None
}

/// Whether `text` names `url` (a fragment or a trailing slash may be dropped in the copy).
fn named_in(text: &str, url: &str) -> bool {
    let bare = url.split('#').next().unwrap_or(url).trim_end_matches('/');
    text.contains(bare)
}

/// The findings without their source list: everything above the first line that heads one
/// ("### Sources", "**Sources**", "3. Sources:").
fn findings_body(text: &str) -> &str {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let head = line
            .trim()
            .trim_start_matches(|c: char| c == '#' || c == '*' || c == '.' || c.is_ascii_digit())
            .trim_start()
            .to_ascii_lowercase();
        if head.starts_with("sources") {
            return &text[..offset];
        }
        offset += line.len();
    }
    text
}

/// One `--- SOURCE n: title ---` block of a search tool's result.
struct Block<'a> {
    title: &'a str,
    url: &'a str,
    content: String,
}

/// The blocks of one search result text, in order (none for other tools' results).
fn blocks(result: &str) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    for part in result.split("\n--- SOURCE ").skip(1) {
        let Some((head, rest)) = part.split_once(" ---\n") else {
            continue;
        };
        let title = head.split_once(": ").map_or(head, |(_, t)| t).trim();
        let Some(rest) = rest.trim_start().strip_prefix("URL: ") else {
            continue;
        };
        let (url, rest) = rest.split_once('\n').unwrap_or((rest, ""));
        // The label line ("SUMMARY:" or "CONTENT:"), then the content up to the rule.
        let body = rest.trim_start();
        let body = body.split_once(":\n").map_or(body, |(_, b)| b);
        let body = body.split("\n----------").next().unwrap_or(body);
        let content = body
            .replace("<summary>", "")
            .replace("</summary>", "")
            .replace("<key_excerpts>", "")
            .replace("</key_excerpts>", "");
        let content = content
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        if !url.trim().is_empty() && !content.is_empty() {
            out.push(Block {
                title,
                url: url.trim(),
                content,
            });
        }
    }
    out
}

/// The tool results `results` as findings: each source's content followed by its citation,
/// then the `### Sources` list the report step renumbers from. Results without source blocks
/// (other tools) are kept as they are.
pub fn from_results(results: &[String]) -> String {
    let mut body: Vec<String> = Vec::new();
    let mut list: Vec<(String, String)> = Vec::new();
    for result in results {
        let found = blocks(result);
        if found.is_empty() {
            if !result.trim().is_empty() {
                body.push(result.trim().to_owned());
            }
            continue;
        }
        for b in found {
            let n = match list.iter().position(|(_, url)| url == b.url) {
                Some(i) => i + 1,
                None => {
                    list.push((b.title.to_owned(), b.url.to_owned()));
                    list.len()
                }
            };
            body.push(format!("{} [{n}]", b.content));
        }
    }
    if list.is_empty() {
        return body.join("\n\n");
    }
    let sources: Vec<String> = list
        .iter()
        .enumerate()
        .map(|(i, (title, url))| format!("[{}] {title}: {url}", i + 1))
        .collect();
    format!(
        "{}\n\n### Sources\n{}",
        body.join("\n\n"),
        sources.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(sources: &[(&str, &str, &str, &str)]) -> String {
        let mut text = String::from("Search results: \n\n");
        for (i, (title, url, label, content)) in sources.iter().enumerate() {
            text.push_str(&format!(
                "\n\n--- SOURCE {}: {title} ---\nURL: {url}\n\n{label}:\n{content}\n\n\n\n{}\n",
                i + 1,
                "-".repeat(80)
            ));
        }
        text
    }

    #[test]
    fn a_clean_up_that_names_no_source_it_was_shown_is_unusable() {
        let shown = [result(&[(
            "Standby Servers",
            "file:///doc/warm-standby.html#STANDBY-SERVER-SETUP",
            "SUMMARY",
            "Set primary_conninfo.",
        )])];
        let call = r#"{"name": "document_search", "arguments": {"queries": ["standby"]}}"#;
        assert!(unusable(call, &[]).is_some(), "a tool call");
        assert!(unusable(&format!("<tool_call>\n{call}\n</tool_call>"), &[]).is_some());
        assert!(unusable(&format!("```json\n{call}\n```"), &[]).is_some());
        assert!(unusable("  \n", &[]).is_some(), "nothing");
        let echo = "1. **Searches made**: the queries, briefly.\n2. **Findings**: with [n].\n\
                    3. **Sources**: \"[n] Title: URL\"";
        assert!(
            unusable(echo, &shown).is_some(),
            "the instructions copied back"
        );
        // pg-01 of the eval set: the instructions copied back, then a list of every source.
        let listed = format!(
            "{echo}\n### Sources\n1. [1] Standby Servers — URL: \
             file:///doc/warm-standby.html#STANDBY-SERVER-SETUP"
        );
        assert_eq!(
            unusable(&listed, &shown),
            Some("the clean-up's findings cite none of the sources it was shown")
        );
        let by_url = "Set primary_conninfo (file:///doc/warm-standby.html).";
        assert_eq!(unusable(by_url, &shown), None, "cited by its location");
        let cited = "Set primary_conninfo [1].\n\n### Sources\n\
                     [1] Standby Servers: file:///doc/warm-standby.html";
        assert_eq!(unusable(cited, &shown), None, "named without its fragment");
        assert_eq!(
            unusable("No relevant information was found.", &[]),
            None,
            "nothing was shown, so nothing had to be named"
        );
    }

    #[test]
    fn search_results_become_cited_findings_with_their_sources() {
        let first = result(&[
            (
                "26.2. Log-Shipping Standby Servers",
                "file:///doc/warm-standby.html#STANDBY-SERVER-SETUP",
                "SUMMARY",
                "<summary>\nSet primary_conninfo.\n</summary>\n\n<key_excerpts>\nmax_wal_senders must be high enough.\n</key_excerpts>",
            ),
            (
                "hot_standby",
                "file:///doc/hot-standby.html",
                "CONTENT",
                "Queries on a standby can be cancelled.",
            ),
        ]);
        let again = result(&[(
            "26.2. Log-Shipping Standby Servers",
            "file:///doc/warm-standby.html#STANDBY-SERVER-SETUP",
            "SUMMARY",
            "Replication slots keep WAL.",
        )]);
        let findings = from_results(&[first, "Reflection recorded.".into(), again]);
        assert_eq!(
            findings,
            "Set primary_conninfo.\nmax_wal_senders must be high enough. [1]\n\n\
             Queries on a standby can be cancelled. [2]\n\n\
             Reflection recorded.\n\n\
             Replication slots keep WAL. [1]\n\n\
             ### Sources\n\
             [1] 26.2. Log-Shipping Standby Servers: file:///doc/warm-standby.html#STANDBY-SERVER-SETUP\n\
             [2] hot_standby: file:///doc/hot-standby.html"
        );
    }
}
