//! `deep-research eval --retrieval`: how well the corpus search finds what answers a question,
//! apart from what a researcher chooses to search or a model writes. Each question is searched
//! as it is asked, the way a researcher's tool searches it; a key fact counts as found at rank
//! k when one of the first k sections holds one of its wordings. Facts the corpus holds nowhere
//! are reported, not scored: no ranking can find them.

use super::{Question, QuestionSet, normalize_text};
use crate::tools::corpus::{Corpus, CorpusConfig, Embedder};
use crate::tools::engines::SearchHit;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The ranks recall is reported at.
pub const RANKS: [usize; 3] = [1, 5, 10];

/// Searches a question is timed over, for the latency figures.
const TIMED_REPEATS: usize = 5;

/// One question's retrieval.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct QuestionRetrieval {
    pub id: String,
    /// Key facts of the question.
    pub facts: usize,
    /// Key facts one of the corpus's sections holds (the ones scored).
    pub held: usize,
    /// For each held fact, the rank of the first section holding it (none: not in the top 10).
    pub ranks: Vec<(String, Option<usize>)>,
    /// Facts the corpus holds nowhere, in none of their wordings.
    pub not_held: Vec<String>,
    /// The rank of the first section of one of the question's pages (none: not in the top 10).
    pub page_rank: Option<usize>,
    /// The first sections found: title and location.
    pub top: Vec<(String, String)>,
}

/// One ranking's figures over the set.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct Ranking {
    /// Share of held facts in the first k sections, for each k of `RANKS`.
    pub recall_at: Vec<(usize, f64)>,
    /// Share of questions with one of their pages in the first k sections.
    pub pages_at: Vec<(usize, f64)>,
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

/// The whole set's retrieval, and what the index cost.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct RetrievalReport {
    pub set: String,
    pub corpus: String,
    /// Sections in the index.
    pub sections: u64,
    /// Building the index from nothing, seconds (words; the vectors after).
    pub index_secs: f64,
    /// Making every section's vector, seconds (0 without a model).
    pub vectors_secs: f64,
    /// The index on disk, bytes (vectors included).
    pub index_bytes: u64,
    /// Whether the search was hybrid (an embedding model was named).
    pub hybrid: bool,
    /// Key facts held by the corpus, over the set.
    pub held: usize,
    pub facts: usize,
    /// The search as researchers get it.
    #[serde(flatten)]
    pub ranking: Ranking,
    /// With a model: the same questions by words alone, to compare.
    pub words_alone: Option<Ranking>,
    pub results: Vec<QuestionRetrieval>,
}

/// Builds a fresh index of `config` under `scratch` (with vectors when `embedder` is given)
/// and measures `set` against it.
pub fn measure(
    set: &QuestionSet,
    questions: &[Question],
    config: &CorpusConfig,
    scratch: &std::path::Path,
    embedder: Option<Arc<Embedder>>,
) -> anyhow::Result<RetrievalReport> {
    let started = Instant::now();
    let hybrid = embedder.is_some();
    let corpus = fresh_index(set, config, scratch, embedder)?;
    let index_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    corpus.embed_pending()?;
    let vectors_secs = started.elapsed().as_secs_f64();
    let (ranking, results) = rank(&corpus, questions, true)?;
    let words_alone = if hybrid {
        Some(rank(&corpus, questions, false)?.0)
    } else {
        None
    };
    Ok(RetrievalReport {
        set: set.name.clone(),
        corpus: set.corpus.clone(),
        sections: corpus.sections(),
        index_secs: round(index_secs, 2),
        vectors_secs: round(vectors_secs, 2),
        index_bytes: dir_bytes(corpus.index_dir()),
        hybrid,
        held: results.iter().map(|r| r.held).sum(),
        facts: results.iter().map(|r| r.facts).sum(),
        ranking,
        words_alone,
        results,
    })
}

/// Every question searched as asked, `dense` or by words alone.
fn rank(
    corpus: &Corpus,
    questions: &[Question],
    dense: bool,
) -> anyhow::Result<(Ranking, Vec<QuestionRetrieval>)> {
    let mut latencies = Vec::new();
    let mut results = Vec::new();
    let depth = *RANKS.iter().max().unwrap_or(&10);
    for q in questions {
        let mut hits = Vec::new();
        for _ in 0..TIMED_REPEATS {
            let t = Instant::now();
            hits = corpus.search_ranked(&q.question, "", depth, dense)?;
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        results.push(question(corpus, q, &hits)?);
    }
    let held: usize = results.iter().map(|r| r.held).sum();
    let recall_at = RANKS
        .iter()
        .map(|&k| {
            let found: usize = results
                .iter()
                .map(|r| {
                    r.ranks
                        .iter()
                        .filter(|(_, at)| at.is_some_and(|at| at <= k))
                        .count()
                })
                .sum();
            (k, share(found, held))
        })
        .collect();
    let pages_at = RANKS
        .iter()
        .map(|&k| {
            let found = results
                .iter()
                .filter(|r| r.page_rank.is_some_and(|at| at <= k))
                .count();
            (k, share(found, results.len()))
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let ranking = Ranking {
        recall_at,
        pages_at,
        latency_p50_ms: round(percentile(&latencies, 0.50), 2),
        latency_p99_ms: round(percentile(&latencies, 0.99), 2),
    };
    Ok((ranking, results))
}

fn question(
    corpus: &Corpus,
    q: &Question,
    hits: &[SearchHit],
) -> anyhow::Result<QuestionRetrieval> {
    let texts: Vec<String> = hits.iter().map(section_text).collect();
    let mut out = QuestionRetrieval {
        id: q.id.clone(),
        facts: q.facts.len(),
        top: hits
            .iter()
            .map(|h| (h.title.clone(), h.url.clone()))
            .collect(),
        page_rank: hits
            .iter()
            .position(|h| q.pages.iter().any(|p| is_page(&h.url, p)))
            .map(|i| i + 1),
        ..QuestionRetrieval::default()
    };
    for fact in &q.facts {
        if !held_anywhere(corpus, fact)? {
            out.not_held.push(fact.fact.clone());
            continue;
        }
        out.held += 1;
        let wordings: Vec<String> = fact.any.iter().map(|w| normalize_text(w)).collect();
        let rank = texts
            .iter()
            .position(|t| wordings.iter().any(|w| t.contains(w.as_str())))
            .map(|i| i + 1);
        out.ranks.push((fact.fact.clone(), rank));
    }
    Ok(out)
}

/// What the researchers' own queries of a kept evaluation found, searched again today: for
/// each question, the key facts one of the sections the queries return holds, when the
/// queries are searched alone and when they are ranked by a topic (the question stands in for
/// the topic the supervisor wrote, which results do not keep).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct QueriesReport {
    pub questions: usize,
    pub queries: usize,
    pub held: usize,
    /// Held facts found by the queries searched alone.
    pub alone: usize,
    /// Held facts found by the queries ranked by the question.
    pub with_topic: usize,
    /// Per question: id, queries, held, found alone, found with the topic.
    pub rows: Vec<(String, usize, usize, usize, usize)>,
}

/// Searches again the queries each question's researchers sent in `kept`, `per_query`
/// sections each (a run's `search_max_results`).
pub fn measure_queries(
    set: &QuestionSet,
    kept: &super::EvalReport,
    config: &CorpusConfig,
    scratch: &std::path::Path,
    per_query: usize,
    embedder: Option<Arc<Embedder>>,
) -> anyhow::Result<QueriesReport> {
    let corpus = fresh_index(set, config, scratch, embedder)?;
    corpus.embed_pending()?;
    let mut report = QueriesReport::default();
    for result in &kept.results {
        let Some(q) = set.questions.iter().find(|q| q.id == result.id) else {
            continue;
        };
        // A small model's call may name its one query `query`.
        let queries: Vec<String> = result
            .researcher_steps
            .iter()
            .flat_map(|s| match (&s.args["queries"], &s.args["query"]) {
                (serde_json::Value::Array(list), _) => list.clone(),
                (serde_json::Value::String(one), _) | (_, serde_json::Value::String(one)) => {
                    vec![serde_json::Value::String(one.clone())]
                }
                _ => Vec::new(),
            })
            .filter_map(|q| q.as_str().map(str::to_owned))
            .collect();
        if queries.is_empty() {
            continue;
        }
        let mut held = Vec::new();
        for fact in &q.facts {
            if held_anywhere(&corpus, fact)? {
                held.push(
                    fact.any
                        .iter()
                        .map(|w| normalize_text(w))
                        .collect::<Vec<_>>(),
                );
            }
        }
        let mut found = [0usize; 2];
        for (i, topic) in ["", q.question.as_str()].iter().enumerate() {
            let mut texts = Vec::new();
            for query in &queries {
                let hits = corpus.search_blocking(query, topic, per_query)?;
                texts.extend(hits.iter().map(section_text));
            }
            found[i] = held
                .iter()
                .filter(|wordings| {
                    texts
                        .iter()
                        .any(|t| wordings.iter().any(|w| t.contains(w.as_str())))
                })
                .count();
        }
        let held = held.len();
        report.questions += 1;
        report.queries += queries.len();
        report.held += held;
        report.alone += found[0];
        report.with_topic += found[1];
        report
            .rows
            .push((q.id.clone(), queries.len(), held, found[0], found[1]));
    }
    Ok(report)
}

/// The set's corpus indexed under `scratch` (no refresh while it is measured).
fn fresh_index(
    set: &QuestionSet,
    config: &CorpusConfig,
    scratch: &std::path::Path,
    embedder: Option<Arc<Embedder>>,
) -> anyhow::Result<Arc<Corpus>> {
    let hour = Duration::from_secs(3600);
    Ok(Corpus::open_with(
        &set.corpus,
        config,
        scratch,
        hour,
        embedder,
    )?)
}

/// Whether some section of the corpus holds one of the fact's wordings.
fn held_anywhere(corpus: &Corpus, fact: &super::Fact) -> anyhow::Result<bool> {
    for wording in &fact.any {
        if corpus.holds(wording)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What of a hit a fact may be found in: its title and its whole section, normalised.
fn section_text(hit: &SearchHit) -> String {
    let body = hit.raw_content.as_deref().unwrap_or(&hit.content);
    normalize_text(&format!("{}\n{body}", hit.title))
}

/// Whether `url` locates `page` (a path relative to the corpus, with or without `#anchor`).
fn is_page(url: &str, page: &str) -> bool {
    let page = page.trim().trim_start_matches('/');
    if page.contains('#') {
        url.ends_with(&format!("/{page}"))
    } else {
        let path = url.split('#').next().unwrap_or(url);
        path.ends_with(&format!("/{page}"))
    }
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round(part as f64 / whole as f64, 3)
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// The figures as a Markdown table, and the questions whose facts were missed.
pub fn markdown(report: &RetrievalReport) -> String {
    let r = &report.ranking;
    let mode = if report.hybrid {
        format!(
            "hybrid (words and meaning; vectors made in {:.1} s)",
            report.vectors_secs
        )
    } else {
        "words alone (no embedding model)".to_owned()
    };
    let mut out = format!(
        "# Retrieval: {} on corpus '{}'\n\n{} sections, index built in {:.1} s, {:.1} MB; \
         search {mode}: p50 {:.2} ms, p99 {:.2} ms.\n\n{} of {} key facts are held by the \
         corpus.\n\n",
        report.set,
        report.corpus,
        report.sections,
        report.index_secs,
        report.index_bytes as f64 / 1e6,
        r.latency_p50_ms,
        r.latency_p99_ms,
        report.held,
        report.facts
    );
    let mut rows = vec![("as searched", r)];
    if let Some(words) = &report.words_alone {
        rows[0].0 = "hybrid";
        rows.push(("words alone", words));
        out.push_str(&format!(
            "Words alone: p50 {:.2} ms, p99 {:.2} ms.\n\n",
            words.latency_p50_ms, words.latency_p99_ms
        ));
    }
    out.push_str(
        "| search | k | facts in the first k sections | questions with an answering page in the first k |\n\
         |---|---|---|---|\n",
    );
    for (name, ranking) in rows {
        for ((k, facts), (_, pages)) in ranking.recall_at.iter().zip(&ranking.pages_at) {
            out.push_str(&format!(
                "| {name} | {k} | {:.0}% | {:.0}% |\n",
                facts * 100.0,
                pages * 100.0
            ));
        }
    }
    out.push_str("\n| question | facts in top 5 | page rank | first hit |\n|---|---|---|---|\n");
    for r in &report.results {
        let in5 = r
            .ranks
            .iter()
            .filter(|(_, at)| at.is_some_and(|at| at <= 5))
            .count();
        let first = r.top.first().map_or("—", |(title, _)| title.as_str());
        out.push_str(&format!(
            "| {} | {in5}/{} | {} | {} |\n",
            r.id,
            r.held,
            r.page_rank.map_or("—".into(), |p| p.to_string()),
            first.replace('|', "/")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_matches_with_or_without_its_anchor() {
        let url = "file:///docs/whatsnew/3.11.html#faster-cpython";
        assert!(is_page(url, "whatsnew/3.11.html"));
        assert!(is_page(url, "whatsnew/3.11.html#faster-cpython"));
        assert!(!is_page(url, "whatsnew/3.11.html#other"));
        assert!(!is_page(url, "3.11.html#other"));
        assert!(!is_page(
            "file:///docs/x/whatsnew/3.10.html",
            "whatsnew/3.11.html"
        ));
    }

    /// Recall counts a fact at the first rank holding one of its wordings, scores only what
    /// the corpus holds, and finds the question's page.
    #[test]
    fn recall_counts_held_facts_by_the_rank_that_holds_them() {
        let docs = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let filler = |w: &str| vec![w; 40].join(" ");
        let write =
            |name: &str, text: String| std::fs::write(docs.path().join(name), text).unwrap();
        write(
            "vacuum.md",
            format!(
                "# Vacuum\n\nVacuum reclaims storage of dead rows. {}",
                filler("v")
            ),
        );
        write(
            "freeze.md",
            format!(
                "# Freeze\n\nVacuum freezes rows against wraparound. {}",
                filler("f")
            ),
        );
        let set: QuestionSet = serde_json::from_value(serde_json::json!({
            "name": "t", "corpus": "docs",
            "questions": [{"id": "q1", "question": "What does vacuum reclaim?",
                "facts": [{"fact": "storage", "any": ["reclaims storage"]},
                          {"fact": "wraparound", "any": ["against wraparound"]},
                          {"fact": "invented", "any": ["returns space to the system"]}],
                "pages": ["vacuum.md"]}]
        }))
        .unwrap();
        let config = CorpusConfig {
            path: docs.path().display().to_string(),
            base_url: String::new(),
            description: String::new(),
        };
        let report = measure(&set, &set.questions, &config, scratch.path(), None).unwrap();
        let r = &report.results[0];
        assert_eq!((report.facts, report.held), (3, 2));
        assert_eq!(r.not_held, ["invented"]);
        assert_eq!(r.ranks[0], ("storage".to_owned(), Some(1)));
        assert_eq!(r.ranks[1], ("wraparound".to_owned(), Some(2)));
        assert_eq!(r.page_rank, Some(1));
        assert_eq!(
            report.ranking.recall_at,
            vec![(1, 0.5), (5, 1.0), (10, 1.0)]
        );
        assert_eq!(report.sections, 2);
        assert!(markdown(&report).contains("| q1 | 2/2 | 1 | Vacuum |"));
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert_eq!(percentile(&v, 0.99), 4.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
