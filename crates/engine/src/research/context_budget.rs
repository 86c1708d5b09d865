//! A researcher's prompt kept under a budget (`researcher_context_chars`).
//!
//! Each search a researcher makes returns its sources' excerpts (up to `verbatim_page_chars`
//! each), and every later turn sends them all again: at two researchers, three rounds and four
//! searches each, a researcher's prompt passed 10,000 tokens, which a 1.5B model on two cores
//! reads at about 30 tokens a second, so a question did not finish in fifteen minutes. The
//! model needs the newest results whole; of older ones, which sources it saw and their
//! openings are enough to decide what to search next. The report does not read the prompt:
//! the findings are the results as the state keeps them, whole.

use super::messages::{Kind, Message};

/// What an older search result keeps of each of its sources: its header (title, location)
/// and the opening of what was shown.
const OLDER_SOURCE_CHARS: usize = 400;

/// How a source's part of a search result begins (`tools::web_search`).
const SOURCE_MARK: &str = "\n--- SOURCE ";

/// Shortens the tool results before the model's last turn, oldest first, until the prompt's
/// text fits `budget` characters (0: no budget) or none is left to shorten. Returns how many
/// were shortened.
pub fn bound(messages: &mut [Message], budget: usize) -> usize {
    if budget == 0 {
        return 0;
    }
    let total: usize = messages.iter().map(|m| m.text().len()).sum();
    let Some(mut excess) = total.checked_sub(budget).filter(|e| *e > 0) else {
        return 0;
    };
    let newest = messages
        .iter()
        .rposition(|m| m.kind() == Kind::Ai)
        .unwrap_or(0);
    let mut shortened = 0;
    for m in messages[..newest]
        .iter_mut()
        .filter(|m| m.kind() == Kind::Tool)
    {
        if excess == 0 {
            break;
        }
        let text = m.text();
        let short = shorten(&text);
        if short.len() < text.len() {
            excess = excess.saturating_sub(text.len() - short.len());
            m.set_text(&short);
            shortened += 1;
        }
    }
    shortened
}

/// A search result with each source cut to its first `OLDER_SOURCE_CHARS` characters (other
/// tool results: the whole text cut so), said to be shortened.
fn shorten(text: &str) -> String {
    let mut starts: Vec<usize> = text.match_indices(SOURCE_MARK).map(|(i, _)| i).collect();
    starts.insert(0, 0);
    starts.dedup();
    starts.push(text.len());
    let pieces: Vec<&str> = starts.windows(2).map(|w| &text[w[0]..w[1]]).collect();
    let mut out = String::new();
    let mut cut = false;
    for piece in pieces {
        let kept = crate::tools::engines::truncate_chars(piece, OLDER_SOURCE_CHARS);
        cut |= kept.len() < piece.len();
        out.push_str(kept.trim_end());
        out.push('\n');
    }
    if cut {
        out.push_str(
            "\n[Shortened: this result was shown in full earlier; its sources are kept for the \
             report.]\n",
        );
        out
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(n: usize) -> String {
        (1..=3)
            .map(|i| {
                format!(
                    "\n\n--- SOURCE {i}: Page {n}.{i} ---\nURL: file:///d/{n}-{i}.html\n\nCONTENT:\n{}",
                    "words of the page ".repeat(100)
                )
            })
            .collect()
    }

    #[test]
    fn older_results_are_shortened_until_the_prompt_fits_and_the_newest_stays_whole() {
        let mut messages = vec![Message::system("You research."), Message::human("A topic")];
        for n in 1..=3 {
            messages.push(Message::ai_text(format!("searching {n}")));
            messages.push(Message::tool_result(
                result(n),
                "document_search",
                &format!("c{n}"),
            ));
        }
        let before: usize = messages.iter().map(|m| m.text().len()).sum();
        assert_eq!(bound(&mut messages, 0), 0, "no budget, nothing changes");
        assert_eq!(bound(&mut messages, before), 0);
        let shortened = bound(&mut messages, 8_000);
        assert_eq!(shortened, 2, "both older results");
        let newest = messages.last().unwrap().text();
        assert_eq!(newest, result(3), "the newest result is whole");
        let oldest = messages[3].text();
        assert!(oldest.contains("--- SOURCE 3: Page 1.3 ---"), "{oldest}");
        assert!(oldest.contains("URL: file:///d/1-2.html"), "{oldest}");
        assert!(oldest.contains("[Shortened:"), "{oldest}");
        assert!(oldest.len() < 2_000, "{}", oldest.len());
        let after: usize = messages.iter().map(|m| m.text().len()).sum();
        assert!(after < before / 2, "{after} of {before}");
    }
}
