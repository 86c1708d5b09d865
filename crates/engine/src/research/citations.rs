//! Checks a written report against the sources this run's searches returned: every cited URL
//! must be one of them. Links that are not are removed and the report says so (ODR trusted the
//! model, and measured reports cited URLs no search had returned).

use std::collections::HashSet;

/// The outcome of a check.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    pub report: String,
    /// Distinct URLs cited that a search returned.
    pub verified: usize,
    /// Distinct URLs cited that no search returned (removed from the report).
    pub removed: Vec<String>,
}

const REMOVED: &str = "(link removed: not among this run's search results)";

impl Checked {
    /// The line that tells the reader links were removed, to end the report with.
    pub fn note(&self) -> Option<String> {
        (!self.removed.is_empty()).then(|| {
            format!(
                "\n\n> Note: {} cited link(s) did not come from this run's searches and were removed.\n",
                self.removed.len()
            )
        })
    }
}

/// A URL in a comparable form: no fragment, no trailing slash, lower-case scheme and host.
pub fn normalize(url: &str) -> String {
    super::support::source_key(url.split('#').next().unwrap_or(url))
}

/// Every http(s) URL in `text`, in order, with trailing punctuation trimmed.
pub fn find_urls(text: &str) -> Vec<String> {
    let mut urls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest
        .find("http://")
        .into_iter()
        .chain(rest.find("https://"))
        .min()
    {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| {
                c.is_whitespace() || matches!(c, ')' | ']' | '>' | '<' | '"' | '\'' | '`')
            })
            .unwrap_or(tail.len());
        let url = tail[..end].trim_end_matches(['.', ',', ';', ':', '!', '?']);
        if url.len() > "https://".len() {
            urls.push(url.to_owned());
        }
        rest = &tail[end.max(1)..];
    }
    urls
}

/// Removes every cited URL that is not in `retrieved` (normalised URLs) and notes it.
pub fn check(report: &str, retrieved: &HashSet<String>) -> Checked {
    let mut verified = HashSet::new();
    let mut removed: Vec<String> = Vec::new();
    for url in find_urls(report) {
        if retrieved.contains(&normalize(&url)) {
            verified.insert(url);
        } else if !removed.contains(&url) {
            removed.push(url);
        }
    }
    // Longest first, so a URL that is a prefix of another does not break the longer one.
    let mut by_length = removed.clone();
    by_length.sort_by_key(|u| std::cmp::Reverse(u.len()));
    let mut text = report.to_owned();
    for url in &by_length {
        text = text.replace(&format!("]({url})"), "]");
        text = text.replace(url.as_str(), REMOVED);
    }
    Checked {
        report: text,
        verified: verified.len(),
        removed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_urls_in_markdown_and_source_lists() {
        let text = "See [A](https://a.com/x). Also https://b.org/p?q=1, and (http://c.net/).\n[1] T: https://d.io/z";
        assert_eq!(
            find_urls(text),
            [
                "https://a.com/x",
                "https://b.org/p?q=1",
                "http://c.net/",
                "https://d.io/z"
            ]
        );
    }

    #[test]
    fn keeps_retrieved_links_and_removes_invented_ones() {
        let retrieved: HashSet<String> = ["https://Example.com/real/"]
            .iter()
            .map(|u| normalize(u))
            .collect();
        let report = "Fact [1]. Claim [2]. See [Real](https://example.com/real).\n### Sources\n[1] Real: https://example.com/real\n[2] Fake: https://invented.example/made-up";
        let c = check(report, &retrieved);
        assert_eq!(c.verified, 1);
        assert_eq!(c.removed, ["https://invented.example/made-up"]);
        assert!(c.report.contains("https://example.com/real"));
        assert!(!c.report.contains("invented.example"));
        assert!(c.report.contains("[2] Fake: (link removed"));
        assert!(c.note().is_some_and(|n| n.contains("1 cited link(s)")));
    }

    #[test]
    fn markdown_links_to_unretrieved_urls_keep_their_text() {
        let c = check("Read [the paper](https://nowhere.test/p).", &HashSet::new());
        assert_eq!(c.report.lines().next(), Some("Read [the paper]."));
    }
}
