//! A source's text as the citation check reads it: overlapping passages, each the numbers of
//! its words in one vocabulary of the run's sources.

use super::is_identifier;
use crate::lexical::{Term, Words};
use rustc_hash::{FxHashMap, FxHashSet};

/// Words by their number in the run's `Vocabulary`.
pub(super) type Ids = FxHashSet<u32>;

/// Every distinct word of the run's sources (stems, numbers and words as written) stored once,
/// each with a number: the passages' sets hold numbers, not copies of the words. Building
/// those sets from copied strings was most of the check's cost (14% of a run's server CPU).
#[derive(Clone, Debug, Default)]
pub(super) struct Vocabulary {
    ids: FxHashMap<String, u32>,
    words: Vec<String>,
}

impl Vocabulary {
    pub(super) fn intern(&mut self, word: &str) -> u32 {
        if let Some(&id) = self.ids.get(word) {
            return id;
        }
        let id = u32::try_from(self.words.len()).unwrap_or(u32::MAX);
        self.ids.insert(word.to_owned(), id);
        self.words.push(word.to_owned());
        id
    }

    /// The number of `word`; none when no source holds it.
    pub(super) fn id(&self, word: &str) -> Option<u32> {
        self.ids.get(word).copied()
    }

    pub(super) fn word(&self, id: u32) -> &str {
        self.words.get(id as usize).map_or("", String::as_str)
    }
}

/// The words and numbers of one passage of a source's text.
#[derive(Clone, Debug)]
pub(super) struct Passage {
    pub(super) terms: Ids,
    pub(super) numbers: Ids,
    /// Its words as written (`lexical::raw_tokens`), where a claim's names are looked for.
    pub(super) raw: Ids,
    /// Those of `raw` that are identifiers (`effective_io_concurrency`).
    pub(super) identifiers: Vec<u32>,
    /// The identifiers of the passage before it: a manual names a setting once, then says
    /// "this setting", so a passage may be about one it does not name.
    pub(super) identifiers_before: Vec<u32>,
}

impl Passage {
    /// The words of one passage, numbered in `vocabulary`.
    pub(super) fn of(words: &mut Words, vocabulary: &mut Vocabulary, text: &str) -> Self {
        let (mut terms, mut numbers) = (Ids::default(), Ids::default());
        crate::lexical::for_each_term(words, text, |term| match term {
            Term::Stem(stem) => {
                terms.insert(vocabulary.intern(stem));
            }
            Term::Number(number) => {
                numbers.insert(vocabulary.intern(number));
            }
        });
        let (mut raw, mut identifiers) = (Ids::default(), Vec::new());
        crate::lexical::for_each_raw_token(text, |word| {
            let id = vocabulary.intern(word);
            if raw.insert(id) && is_identifier(word) {
                identifiers.push(id);
            }
        });
        Self {
            terms,
            numbers,
            raw,
            identifiers,
            identifiers_before: Vec::new(),
        }
    }
}
