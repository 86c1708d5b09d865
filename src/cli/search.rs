//! `deep-research search --corpus NAME=DIR "query"`: the ranked sections a researcher's search
//! would get for the query, from the same index and ranking, to see what a corpus finds.

use crate::tools::engines::{SearchHit, truncate_chars};
use std::io::Write;

/// Characters of each passage printed in the plain listing.
const PASSAGE_CHARS: usize = 400;

/// The hits as a numbered listing (title, location, score, passage), or as one JSON array.
pub fn print(hits: &[SearchHit], json: bool, out: &mut impl Write) -> std::io::Result<()> {
    if json {
        let rows: Vec<serde_json::Value> = hits
            .iter()
            .enumerate()
            .map(|(i, h)| {
                serde_json::json!({"rank": i + 1, "title": h.title, "url": h.url,
                                   "score": h.score, "passage": h.content})
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(rows))?;
        return Ok(());
    }
    if hits.is_empty() {
        writeln!(out, "no section matches")?;
    }
    for (i, h) in hits.iter().enumerate() {
        let passage = h.content.split_whitespace().collect::<Vec<_>>().join(" ");
        let short = truncate_chars(&passage, PASSAGE_CHARS);
        let more = if short.len() < passage.len() {
            " …"
        } else {
            ""
        };
        writeln!(
            out,
            "{}. {}  (score {:.4})\n   {}\n   {short}{more}\n",
            i + 1,
            h.title,
            h.score.unwrap_or_default(),
            h.url
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(title: &str) -> SearchHit {
        SearchHit {
            title: title.into(),
            url: format!("file:///d/{title}.html"),
            content: "a passage\nover two lines".into(),
            raw_content: Some("the whole section".into()),
            score: Some(3.25),
        }
    }

    #[test]
    fn the_listing_numbers_hits_and_the_json_keeps_their_fields() {
        let mut out = Vec::new();
        print(&[hit("a"), hit("b")], false, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with(
                "1. a  (score 3.2500)\n   file:///d/a.html\n   a passage over two lines"
            )
        );
        assert!(text.contains("2. b"));
        let mut out = Vec::new();
        print(&[hit("a")], true, &mut out).unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(rows[0]["rank"], 1);
        assert_eq!(rows[0]["url"], "file:///d/a.html");
        assert_eq!(rows[0]["passage"], "a passage\nover two lines");
    }
}
