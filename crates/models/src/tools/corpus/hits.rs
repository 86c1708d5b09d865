//! A search's ranked sections made into the hits a researcher reads: one per location, each
//! with its snippet for the query and its whole text.

use super::{Corpus, CorpusError, SNIPPET_CHARS};
use crate::tools::engines::SearchHit;
use std::collections::HashSet;
use tantivy::query::Query;
use tantivy::schema::{Field, Value};
use tantivy::snippet::SnippetGenerator;
use tantivy::{DocAddress, Searcher, TantivyDocument};

impl Corpus {
    /// The ranked sections as hits, one per location, each with its snippet for the query (or
    /// its opening when no word of it matches) and its whole text.
    pub(super) fn hits(
        &self,
        searcher: &Searcher,
        ranked: Vec<(f32, DocAddress)>,
        snippet_query: &dyn Query,
        max: usize,
    ) -> Result<Vec<SearchHit>, CorpusError> {
        let err = |message: String| CorpusError::Search {
            name: self.name.clone(),
            message,
        };
        let mut snippets = SnippetGenerator::create(searcher, snippet_query, self.fields.body)
            .map_err(|e| err(e.to_string()))?;
        snippets.set_max_num_chars(SNIPPET_CHARS);
        let mut seen = HashSet::new();
        let mut hits = Vec::new();
        for (score, address) in ranked {
            let doc: TantivyDocument = searcher.doc(address).map_err(|e| err(e.to_string()))?;
            let text_of = |f: Field| {
                doc.get_first(f)
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            };
            let url = self.location(&text_of(self.fields.path), &text_of(self.fields.anchor));
            if !seen.insert(url.clone()) {
                continue;
            }
            let body = text_of(self.fields.body);
            let snippet = snippets.snippet_from_doc(&doc);
            let content = if snippet.fragment().trim().is_empty() {
                crate::tools::engines::truncate_chars(&body, SNIPPET_CHARS).to_owned()
            } else {
                snippet.fragment().trim().to_owned()
            };
            hits.push(SearchHit {
                title: text_of(self.fields.title),
                url,
                content,
                raw_content: Some(body),
                score: Some(f64::from(score)),
            });
            if hits.len() == max {
                break;
            }
        }
        Ok(hits)
    }
}
