//! Local documents as a search engine (`search_api: "local"`): each corpus the operator names is
//! a directory of HTML, Markdown and text files, indexed with tantivy (BM25, English stemming,
//! phrase queries, snippets) into a directory of its own that survives restarts. A start, and
//! every `refresh_every` while searches come in, compares the files' sizes and times with the
//! index's manifest and re-indexes only what changed.
//!
//! A hit is a section of a document (see `extract.rs`), located by `file://` path or the
//! corpus's `base_url`, with `#anchor` when the section has one; it carries the section's text,
//! so it reaches researchers, summaries and the citation check like a web page.

mod dense;
pub mod embed;
pub mod extract;
mod files;
pub mod formats;
mod hits;
mod remote;

use crate::tools::engines::SearchHit;
use dense::{Vectors, fused};
pub use embed::Embedder;
use extract::{Format, Section};
use files::{list_files, percent_fragment, percent_path, read_manifest, write_manifest};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, QueryParser};
use tantivy::schema::{
    Field, INDEXED, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
    Value,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term, doc};

/// Bumped whenever the schema or the extraction changes: an index of another version is built
/// again from the files.
const INDEX_VERSION: u32 = 4;

/// Memory the index writer may buffer before it flushes a segment.
const WRITER_HEAP: usize = 50_000_000;

/// Characters of a hit's snippet: the passage of the section that matches the query best. It
/// is what a researcher sees of a long section that is not summarised, so it is a passage, not
/// a line.
const SNIPPET_CHARS: usize = 1000;

/// How much a research topic's words weigh beside the query's own in ranking what the query
/// finds (a query word counts 1).
const CONTEXT_WEIGHT: f32 = 0.5;

/// In a corpus of a handful of sections no word is common: each tells one from another.
const COMMON_MIN_SECTIONS: u64 = 3;

/// At most this many of a topic's telling words rank a query's sections.
const CONTEXT_WORDS: usize = 12;

/// A word in more than this share of a corpus's sections ("python" in a Python manual, "and")
/// tells nothing apart: the all-words ranking does not require it.
const COMMON_SHARE: f64 = 0.4;

/// Why a corpus could not be opened or searched.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("corpus '{name}': {path} is not a readable directory: {source}")]
    Root {
        name: String,
        path: String,
        source: std::io::Error,
    },
    #[error("corpus '{name}': index at {path}: {message}")]
    Index {
        name: String,
        path: String,
        message: String,
    },
    #[error("corpus '{name}': {message}")]
    Search { name: String, message: String },
    /// The name becomes a directory under the index root: no separators, no `..`.
    #[error("a corpus name is letters, digits, '-' and '_' (at most 64), got '{0}'")]
    Name(String),
    /// The blocking search task ended without an answer (a panic, or shutdown).
    #[error("the corpus search stopped: {0}")]
    Stopped(String),
}

/// Whether `name` may name a corpus: it becomes a directory under the index root, so
/// `../x` or `/abs/path` would point the index (and its deletion) elsewhere.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// How the operator describes a corpus.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusConfig {
    /// The directory of documents.
    pub path: String,
    /// Where the same documents are published (a local mirror of a public site): hits are
    /// located at `base_url/relative/path` instead of `file://`.
    #[serde(default)]
    pub base_url: String,
    /// What the corpus holds, for the researchers' tool description.
    #[serde(default)]
    pub description: String,
}

struct Fields {
    path: Field,
    /// The section's place among its file's sections: with `path`, what its vector is keyed by.
    ordinal: Field,
    anchor: Field,
    title: Field,
    body: Field,
}

/// One searchable corpus.
pub struct Corpus {
    name: String,
    root: PathBuf,
    base_url: String,
    description: String,
    index_dir: PathBuf,
    index: Index,
    reader: IndexReader,
    writer: Mutex<IndexWriter>,
    fields: Fields,
    refresh_every: Duration,
    last_scan: Mutex<Instant>,
    refreshing: AtomicBool,
    /// The model of the dense side of the search, when the operator names one.
    embedder: Option<Arc<Embedder>>,
    vectors: RwLock<Vectors>,
    /// One embedding pass at a time (the start's, a refresh's, a command waiting for them).
    embedding: Mutex<()>,
}

impl std::fmt::Debug for Corpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corpus")
            .field("name", &self.name)
            .field("root", &self.root)
            .field("index_dir", &self.index_dir)
            .finish()
    }
}

/// What one refresh did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refresh {
    pub indexed: usize,
    pub removed: usize,
    pub unchanged: usize,
    pub sections: usize,
    /// Files that could not be read (skipped until they change).
    pub unreadable: usize,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
        .set_stored();
    let fields = Fields {
        path: b.add_text_field("path", STRING | STORED),
        ordinal: b.add_u64_field("ordinal", INDEXED | STORED),
        anchor: b.add_text_field("anchor", STORED),
        title: b.add_text_field("title", text.clone()),
        body: b.add_text_field("body", text),
    };
    (b.build(), fields)
}

impl Corpus {
    /// Opens (or builds) the index of `config.path` under `index_root/name`, and brings it up to
    /// date with the files; searched by words alone.
    pub fn open(
        name: &str,
        config: &CorpusConfig,
        index_root: &Path,
        refresh_every: Duration,
    ) -> Result<Arc<Self>, CorpusError> {
        Self::open_with(name, config, index_root, refresh_every, None)
    }

    /// `open`, with the dense side of the search when `embedder` is given: the vectors kept
    /// beside the index are read, and `embed_pending` makes the missing ones.
    pub fn open_with(
        name: &str,
        config: &CorpusConfig,
        index_root: &Path,
        refresh_every: Duration,
        embedder: Option<Arc<Embedder>>,
    ) -> Result<Arc<Self>, CorpusError> {
        let root =
            std::fs::canonicalize(config.path.trim()).map_err(|source| CorpusError::Root {
                name: name.to_owned(),
                path: config.path.clone(),
                source,
            })?;
        if !root.is_dir() {
            return Err(CorpusError::Root {
                name: name.to_owned(),
                path: config.path.clone(),
                source: std::io::Error::other("not a directory"),
            });
        }
        if !valid_name(name) {
            return Err(CorpusError::Name(name.to_owned()));
        }
        let index_dir = index_root.join(name);
        let err = |message: String| CorpusError::Index {
            name: name.to_owned(),
            path: index_dir.display().to_string(),
            message,
        };
        let reusable = files::prepare_index_dir(&index_dir, &root, INDEX_VERSION).map_err(err)?;
        let (schema, fields) = schema();
        let index = if reusable {
            Index::open_in_dir(&index_dir)
        } else {
            Index::create_in_dir(&index_dir, schema)
        }
        .map_err(|e| err(e.to_string()))?;
        let writer = index
            .writer_with_num_threads(1, WRITER_HEAP)
            .map_err(|e| err(e.to_string()))?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e: tantivy::TantivyError| err(e.to_string()))?;
        let vectors = match &embedder {
            Some(e) => Vectors::load(&index_dir, e.identity()),
            None => Vectors::default(),
        };
        let corpus = Arc::new(Self {
            name: name.to_owned(),
            root,
            base_url: config.base_url.trim().trim_end_matches('/').to_owned(),
            description: config.description.trim().to_owned(),
            index_dir,
            index,
            reader,
            writer: Mutex::new(writer),
            fields,
            refresh_every,
            last_scan: Mutex::new(Instant::now()),
            refreshing: AtomicBool::new(false),
            embedder,
            vectors: RwLock::new(vectors),
            embedding: Mutex::new(()),
        });
        let started = Instant::now();
        let done = corpus.refresh()?;
        tracing::info!(
            corpus = name,
            indexed = done.indexed,
            removed = done.removed,
            unchanged = done.unchanged,
            sections = done.sections,
            secs = started.elapsed().as_secs_f64(),
            "corpus ready"
        );
        Ok(corpus)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn description(&self) -> &str {
        &self.description
    }

    pub fn index_dir(&self) -> &Path {
        &self.index_dir
    }

    /// Sections in the index.
    pub fn sections(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Compares the files with the manifest, re-indexes what changed and commits.
    pub fn refresh(&self) -> Result<Refresh, CorpusError> {
        let err = |message: String| CorpusError::Index {
            name: self.name.clone(),
            path: self.index_dir.display().to_string(),
            message,
        };
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| err("the index writer was poisoned by a panic".into()))?;
        let mut manifest = read_manifest(&self.index_dir).unwrap_or_default();
        let files = list_files(&self.root);
        let mut done = Refresh::default();
        let seen: HashSet<&String> = files.iter().map(|(rel, _, _)| rel).collect();
        let gone: Vec<String> = manifest
            .files
            .keys()
            .filter(|k| !seen.contains(k))
            .cloned()
            .collect();
        for rel in gone {
            writer.delete_term(Term::from_field_text(self.fields.path, &rel));
            manifest.files.remove(&rel);
            done.removed += 1;
        }
        for (rel, abs, stamp) in &files {
            if manifest.files.get(rel) == Some(stamp) {
                done.unchanged += 1;
                continue;
            }
            writer.delete_term(Term::from_field_text(self.fields.path, rel));
            let Some(format) = Format::of(abs) else {
                continue;
            };
            let fallback = abs
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| rel.clone());
            // A file that cannot be read is skipped with a warning, and tried again when it
            // changes; it never stops the index.
            let read = files::read_listed(abs, format)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    formats::read(format, &bytes, &fallback).map_err(|e| e.to_string())
                });
            let sections = match read {
                Ok(sections) => sections,
                Err(e) => {
                    tracing::warn!(corpus = %self.name, file = %rel, error = %e, "file not indexed");
                    // Remembered, so the next refresh does not read it again until it changes.
                    manifest.files.insert(rel.clone(), *stamp);
                    done.unreadable += 1;
                    continue;
                }
            };
            for (ordinal, section) in sections.iter().enumerate() {
                writer
                    .add_document(self.document(rel, ordinal as u64, section))
                    .map_err(|e| err(e.to_string()))?;
                done.sections += 1;
            }
            manifest.files.insert(rel.clone(), *stamp);
            done.indexed += 1;
        }
        if done.indexed > 0
            || done.removed > 0
            || done.unreadable > 0
            || manifest.version != INDEX_VERSION
        {
            writer.commit().map_err(|e| err(e.to_string()))?;
            manifest.version = INDEX_VERSION;
            manifest.root = self.root.display().to_string();
            write_manifest(&self.index_dir, &manifest).map_err(|e| err(e.to_string()))?;
            self.reader.reload().map_err(|e| err(e.to_string()))?;
        }
        if let Ok(mut last) = self.last_scan.lock() {
            *last = Instant::now();
        }
        Ok(done)
    }

    fn document(&self, rel: &str, ordinal: u64, section: &Section) -> TantivyDocument {
        doc!(
            self.fields.path => rel,
            self.fields.ordinal => ordinal,
            self.fields.anchor => section.anchor.clone().unwrap_or_default(),
            self.fields.title => section.title.as_str(),
            self.fields.body => section.text.as_str(),
        )
    }

    /// Starts a refresh in the background when the last one is older than `refresh_every`
    /// (searches go on against the index as it is).
    fn refresh_if_due(self: &Arc<Self>) {
        let due = self
            .last_scan
            .lock()
            .map(|t| t.elapsed() >= self.refresh_every)
            .unwrap_or(false);
        if !due || self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            match me.refresh() {
                Ok(_) => me.embed_pending_logged(),
                Err(e) => tracing::warn!(corpus = %me.name, error = %e, "corpus refresh failed"),
            }
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// Where a hit in `rel` is found: under `base_url` when the corpus has one, else a
    /// `file://` URL of the absolute path; with `#anchor` for a section.
    pub fn location(&self, rel: &str, anchor: &str) -> String {
        let base = if self.base_url.is_empty() {
            let abs = self.root.join(rel);
            format!("file://{}", percent_path(&abs.to_string_lossy()))
        } else {
            format!("{}/{}", self.base_url, percent_path(rel))
        };
        if anchor.is_empty() {
            base
        } else {
            format!("{base}#{}", percent_fragment(anchor))
        }
    }

    /// The `max` best sections for `query`, one per location. `context` (the research topic
    /// the query serves, or nothing) does not find sections of its own: among those the query
    /// finds, it ranks first the ones about the topic (by its telling words, a few), so a
    /// short, general query a model writes ("exception handling") reaches the sections its
    /// topic needs.
    ///
    /// With vectors, the sections nearest the query in meaning are a third ranking fused with
    /// the two by words, so a section that answers in other words than the query's is found.
    pub fn search_blocking(
        &self,
        query: &str,
        context: &str,
        max: usize,
    ) -> Result<Vec<SearchHit>, CorpusError> {
        self.search_ranked(query, context, max, true)
    }

    /// `search_blocking`, by words alone when `dense` is false (to measure one against the
    /// other).
    pub fn search_ranked(
        &self,
        query: &str,
        context: &str,
        max: usize,
        dense: bool,
    ) -> Result<Vec<SearchHit>, CorpusError> {
        let err = |message: String| CorpusError::Search {
            name: self.name.clone(),
            message,
        };
        let query_text = plain_query(query);
        if query_text.trim().is_empty() || max == 0 {
            return Ok(vec![]);
        }
        let context_text = plain_query(context).replace('"', " ");
        let parser = |all_words: bool| {
            let mut parser =
                QueryParser::for_index(&self.index, vec![self.fields.title, self.fields.body]);
            parser.set_field_boost(self.fields.title, 1.5);
            if all_words {
                parser.set_conjunction_by_default();
            }
            parser
        };
        let searcher = self.reader.searcher();
        let rare = self.rare_words(&searcher, &query_text);
        // The topic's rarest words, a few: a long topic must not outweigh the query. A query
        // with no telling word of its own ("python 3.11" in a Python manual) matches nearly
        // every section, and then the topic chooses among them; measured, that is what such
        // a query needed (BENCHMARKS, "What the search finds").
        let topic = self.topic_words(&searcher, &context_text);
        let about: Option<Box<dyn Query>> = (!topic.is_empty()).then(|| {
            let (parsed, _ignored) = parser(false).parse_query_lenient(&topic.join(" "));
            Box::new(BoostQuery::new(parsed, CONTEXT_WEIGHT)) as Box<dyn Query>
        });
        let mut snippet_query: Option<Box<dyn tantivy::query::Query>> = None;
        // Two rankings fused: sections with every telling word of the query, and sections with
        // any of its words. A plain OR ranks a page that repeats two common words of a long
        // query ("server", "value") above the one page that has its rare ones; requiring
        // every word alone ranks a long reference page that happens to hold "differences
        // between 3.11 and 3.10" above the section on what changed.
        let mut lists = Vec::new();
        for all_words in [true, false] {
            let text = if all_words { &rare } else { &query_text };
            if text.trim().is_empty() {
                continue;
            }
            // Lenient: a model's query with stray operators still searches its words.
            let (parsed, _ignored) = parser(all_words).parse_query_lenient(text);
            let ranking: Box<dyn Query> = match &about {
                Some(about) => Box::new(BooleanQuery::new(vec![
                    (Occur::Must, parsed.box_clone()),
                    (Occur::Should, about.box_clone()),
                ])),
                None => parsed.box_clone(),
            };
            let top = searcher
                .search(&*ranking, &TopDocs::with_limit(max * 3).order_by_score())
                .map_err(|e| err(e.to_string()))?;
            lists.push(top);
            if !all_words {
                snippet_query = Some(parsed);
            }
        }
        if dense {
            // The query as written, not its telling words: the model reads a sentence.
            if let Some(nearest) = self.nearest(&searcher, query, max * 3)? {
                lists.push(nearest);
            }
        }
        let ranked = fused(lists);
        let Some(snippet_query) = snippet_query else {
            return Ok(vec![]);
        };
        self.hits(&searcher, ranked, &*snippet_query, max)
    }

    /// The words of `query` that tell sections apart: those some section holds, in at most
    /// `COMMON_SHARE` of the sections (a word nearly every section holds adds nothing to a
    /// requirement but misses). A quoted phrase is kept whole.
    fn rare_words(&self, searcher: &tantivy::Searcher, query: &str) -> String {
        self.telling(searcher, query)
            .into_iter()
            .map(|(word, _)| word)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The telling words of `query` in order, each with the most sections one of its terms
    /// is in (a quoted phrase kept whole, counted 0).
    fn telling<'q>(&self, searcher: &tantivy::Searcher, query: &'q str) -> Vec<(&'q str, u64)> {
        let sections = searcher.num_docs().max(1) as f64;
        let Some(mut analyzer) = self.index.tokenizers().get("en_stem") else {
            return query.split_whitespace().map(|w| (w, 0)).collect();
        };
        let mut kept = Vec::new();
        let mut in_phrase = false;
        for word in query.split_whitespace() {
            let quotes = word.matches('"').count();
            if in_phrase || quotes > 0 {
                kept.push((word, 0));
                in_phrase ^= quotes % 2 == 1;
                continue;
            }
            let mut stream = analyzer.token_stream(word);
            let (mut most, mut fewest) = (0, u64::MAX);
            while let Some(token) = stream.next() {
                let term = Term::from_field_text(self.fields.body, &token.text);
                let holding = searcher.doc_freq(&term).unwrap_or(0);
                most = most.max(holding);
                fewest = fewest.min(holding);
            }
            let common = most > COMMON_MIN_SECTIONS && most as f64 / sections > COMMON_SHARE;
            // A word no section holds finds nothing and requires nothing.
            if fewest != u64::MAX && fewest > 0 && !common {
                kept.push((word, most));
            }
        }
        kept
    }

    /// The `CONTEXT_WORDS` rarest words of a topic that some section holds (its specifics,
    /// not its lead-in; a word is as rare as its rarest term: "3.11" by its "11").
    fn topic_words(&self, searcher: &tantivy::Searcher, topic: &str) -> Vec<String> {
        let Some(mut analyzer) = self.index.tokenizers().get("en_stem") else {
            return Vec::new();
        };
        let mut words: Vec<(u64, &str)> = Vec::new();
        for word in topic.split_whitespace() {
            let mut stream = analyzer.token_stream(word);
            let mut fewest = u64::MAX;
            while let Some(token) = stream.next() {
                let term = Term::from_field_text(self.fields.body, &token.text);
                fewest = fewest.min(searcher.doc_freq(&term).unwrap_or(0));
            }
            if fewest != u64::MAX && fewest > 0 && !words.iter().any(|(_, w)| *w == word) {
                words.push((fewest, word));
            }
        }
        words.sort_by_key(|(holding, _)| *holding);
        words
            .into_iter()
            .take(CONTEXT_WORDS)
            .map(|(_, w)| w.to_owned())
            .collect()
    }

    /// Whether some section holds `wording` (case and spacing aside) in its title or text:
    /// a phrase search, then the candidates read.
    pub fn holds(&self, wording: &str) -> Result<bool, CorpusError> {
        let err = |message: String| CorpusError::Search {
            name: self.name.clone(),
            message,
        };
        let words = plain_query(wording).replace('"', " ");
        let wanted = normalized(wording);
        if words.trim().is_empty() || wanted.is_empty() {
            return Ok(false);
        }
        let searcher = self.reader.searcher();
        let parser = QueryParser::for_index(&self.index, vec![self.fields.title, self.fields.body]);
        let (parsed, _ignored) = parser.parse_query_lenient(&format!("\"{words}\""));
        let top = searcher
            .search(&parsed, &TopDocs::with_limit(200).order_by_score())
            .map_err(|e| err(e.to_string()))?;
        for (_, address) in top {
            let doc: TantivyDocument = searcher.doc(address).map_err(|e| err(e.to_string()))?;
            let text: String = [self.fields.title, self.fields.body]
                .iter()
                .filter_map(|f| doc.get_first(*f).and_then(|v| v.as_str()))
                .collect::<Vec<_>>()
                .join("\n");
            if normalized(&text).contains(&wanted) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `search_blocking` off the async threads, with a refresh started when one is due.
    pub async fn search(
        self: &Arc<Self>,
        query: &str,
        context: &str,
        max: usize,
    ) -> Result<Vec<SearchHit>, CorpusError> {
        self.refresh_if_due();
        let me = self.clone();
        let query = query.to_owned();
        let context = context.to_owned();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || me.search_blocking(&query, &context, max))
            .await
            .map_err(|e| CorpusError::Stopped(e.to_string()))
            .and_then(|found| found);
        let outcome = if result.is_ok() {
            "ok"
        } else {
            "invalid_response"
        };
        crate::telemetry::metrics::search_call("local", outcome, started.elapsed());
        result
    }
}

/// The named corpora of a server.
#[derive(Clone, Debug, Default)]
pub struct Corpora {
    by_name: BTreeMap<String, Arc<Corpus>>,
}

impl Corpora {
    pub fn new(corpora: impl IntoIterator<Item = Arc<Corpus>>) -> Self {
        Self {
            by_name: corpora
                .into_iter()
                .map(|c| (c.name().to_owned(), c))
                .collect(),
        }
    }

    /// Opens every configured corpus. With `embedder`, each corpus's missing vectors are made
    /// in the background: searches start at once, by words, and gain the dense side as the
    /// vectors are made (`Corpus::embed_pending` waits for them).
    pub fn open(
        configs: &BTreeMap<String, CorpusConfig>,
        index_root: &Path,
        refresh_every: Duration,
        embedder: Option<Arc<Embedder>>,
    ) -> Result<Self, CorpusError> {
        let opened = configs
            .iter()
            .map(|(name, cfg)| {
                Corpus::open_with(name, cfg, index_root, refresh_every, embedder.clone())
            })
            .collect::<Result<Vec<_>, _>>()?;
        for corpus in opened.iter().filter(|c| c.is_hybrid()) {
            let corpus = corpus.clone();
            std::thread::Builder::new()
                .name(format!("embed-{}", corpus.name))
                .spawn(move || corpus.embed_pending_logged())
                .map_err(|e| CorpusError::Stopped(e.to_string()))?;
        }
        Ok(Self::new(opened))
    }

    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The corpus a run names, or the only one when it names none; the error says the choices.
    pub fn pick(&self, name: &str) -> Result<&Arc<Corpus>, String> {
        let name = name.trim();
        if self.by_name.is_empty() {
            return Err(
                "config.configurable.search_api: 'local' needs a corpus, and this server has \
                 none (serve --corpus NAME=DIR, or [corpora.NAME] path = \"DIR\")"
                    .into(),
            );
        }
        if name.is_empty() {
            return match self.by_name.values().next() {
                Some(only) if self.by_name.len() == 1 => Ok(only),
                _ => Err(format!(
                    "config.configurable.corpus: this server has several corpora; name one of {}",
                    self.names().join(", ")
                )),
            };
        }
        self.by_name.get(name).ok_or_else(|| {
            format!(
                "config.configurable.corpus: no corpus named '{name}'; this server has {}",
                self.names().join(", ")
            )
        })
    }
}

/// A query the parser reads as words and phrases: field prefixes, boosts, ranges and stray
/// quotes a model may write are taken as plain text.
fn plain_query(query: &str) -> String {
    let balanced = query.matches('"').count().is_multiple_of(2);
    query
        .chars()
        .map(|c| match c {
            '"' if balanced => '"',
            ':' | '^' | '~' | '(' | ')' | '[' | ']' | '{' | '}' | '!' | '\\' | '*' | '"' | '\''
            | '`' | '+' | '<' | '>' | '=' => ' ',
            c => c,
        })
        .collect::<String>()
        .split_whitespace()
        // A leading '-' would exclude the word; an 'AND'/'OR'/'NOT' is an operator.
        .map(|w| w.trim_start_matches('-'))
        .filter(|w| !w.is_empty() && !matches!(*w, "AND" | "OR" | "NOT"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Lower case, one space between words.
fn normalized(text: &str) -> String {
    text.to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests;
