//! Runaway detection for streamed answers: small models sometimes fall into a loop, writing the
//! same sentence (or the same few characters) until the output cap, which on a CPU takes many
//! minutes. A stream whose tail repeats one piece of text several times is stopped, and the
//! text is cut after the piece's first copy, so what came before the loop is kept.

/// Bytes at the end of the text looked at.
const WINDOW: usize = 8 * 1024;
/// The longest repeated piece looked for.
const MAX_PERIOD: usize = 1024;
/// How many copies in a row make a loop.
const MIN_COPIES: usize = 4;
/// How long the repeated tail must be at least, so short runs (`----`, a row of spaces in a
/// table) never count.
const MIN_SPAN: usize = 400;
/// Check again after this many new bytes.
pub(super) const CHECK_EVERY: usize = 256;

/// Where to cut `text` when its tail is a loop: after the first copy of the repeated piece.
pub(super) fn cut_point(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(WINDOW);
    let window = &bytes[start..];
    let len = window.len();
    for period in 1..=(len / MIN_COPIES).min(MAX_PERIOD) {
        // How far back from the end the text repeats itself with this period.
        let mut run = 0;
        while run + period < len && window[len - 1 - run] == window[len - 1 - run - period] {
            run += 1;
        }
        let span = run + period;
        if span >= MIN_SPAN.max(period * MIN_COPIES) {
            return Some(word_end(text, start + len - span + period, period));
        }
    }
    None
}

/// `at`, moved forward (within one period) to the end of a sentence, else of a word, unless
/// it already is at one: where a repeated piece begins is only known up to a rotation.
fn word_end(text: &str, at: usize, period: usize) -> usize {
    let mut at = at;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let before = text[..at].trim_end_matches([' ', '\t']);
    if before.is_empty() || before.ends_with(['.', '!', '?', '\n']) {
        return at;
    }
    let mut limit = (at + period).min(text.len());
    while !text.is_char_boundary(limit) {
        limit -= 1;
    }
    let ahead = &text[at..limit];
    let sentence = ahead
        .find(". ")
        .map(|i| i + 2)
        .or_else(|| ahead.find('\n').map(|i| i + 1));
    let word = || {
        ahead
            .find(char::is_whitespace)
            .map(|i| i + ahead[i..].chars().next().map_or(1, char::len_utf8))
    };
    at + sentence.or_else(word).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_sentence_is_cut_after_its_first_copy() {
        let intro = "The findings are as follows. ";
        let looped = "Sodium-ion cells cost less than LFP cells. ".repeat(12);
        let text = format!("{intro}{looped}");
        let cut = cut_point(&text).expect("a loop");
        assert_eq!(
            &text[..cut],
            format!("{intro}Sodium-ion cells cost less than LFP cells. ")
        );
    }

    #[test]
    fn endless_whitespace_and_single_characters_are_loops() {
        let text = format!("Done.{}", "\n".repeat(600));
        assert_eq!(cut_point(&text), Some(6));
        assert!(cut_point(&format!("é{}", "é".repeat(500))).is_some());
    }

    #[test]
    fn ordinary_text_and_short_repeats_are_not() {
        let report = (0..200)
            .map(|i| format!("Point {i}: a different sentence about item {i}.\n"))
            .collect::<String>();
        assert_eq!(cut_point(&report), None);
        assert_eq!(
            cut_point(&format!("| a | b |\n|{}|\nend", "-".repeat(60))),
            None
        );
        assert_eq!(cut_point("short"), None);
        // Three copies of a long paragraph are not yet a loop.
        let para = "A long paragraph that a model might legitimately quote again. ".repeat(3);
        assert_eq!(cut_point(&para), None);
    }
}
