//! Local document search benchmark for BENCHMARKS.md: index whole documentation sets (Debian's
//! packaged manuals) from scratch, open them again unchanged, and time searches.
//!
//! `cargo bench --bench corpus -- NAME=DIR [NAME=DIR …] [--queries FILE] [--rounds N]`
//!
//! Queries: one per line of `--queries` (default: the questions of eval/postgresql-15.json and
//! a fixed list of short keyword queries), each run `--rounds` times; p50 and p99 over all.

use clap::Parser;
use deep_research::tools::corpus::{Corpus, CorpusConfig};
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// Corpora to index, as NAME=DIR.
    corpora: Vec<String>,
    /// A file of queries, one a line.
    #[arg(long)]
    queries: Option<std::path::PathBuf>,
    /// Times each query is run.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Results per query.
    #[arg(long, default_value_t = 5)]
    results: usize,
    /// `cargo bench` passes this to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

const KEYWORD_QUERIES: [&str; 12] = [
    "vacuum dead tuples",
    "write-ahead log checkpoint",
    "\"transaction isolation\" serializable",
    "shared_buffers default",
    "GIN index jsonb",
    "logical replication publication",
    "row level security policy",
    "window function partition by",
    "pg_hba.conf authentication method",
    "list comprehension",
    "asyncio event loop",
    "unicode string encoding",
];

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut queries: Vec<String> = match &args.queries {
        Some(path) => std::fs::read_to_string(path)?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect(),
        None => KEYWORD_QUERIES.iter().map(|q| q.to_string()).collect(),
    };
    if args.queries.is_none()
        && let Ok(set) =
            deep_research::eval::QuestionSet::load(std::path::Path::new("eval/postgresql-15.json"))
    {
        queries.extend(set.questions.into_iter().map(|q| q.question));
    }
    println!(
        "| corpus | files | sections | first index | reopen (no change) | index size | search p50 | search p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for spec in &args.corpora {
        let (name, dir) = spec
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("corpora are NAME=DIR, got {spec}"))?;
        let index = tempfile::tempdir()?;
        let config = CorpusConfig {
            path: dir.to_owned(),
            base_url: String::new(),
            description: String::new(),
        };
        let hour = Duration::from_secs(3600);
        let started = Instant::now();
        let corpus = Corpus::open(name, &config, index.path(), hour)?;
        let first = started.elapsed();
        let sections = corpus.sections();
        drop(corpus);
        let started = Instant::now();
        let corpus = Corpus::open(name, &config, index.path(), hour)?;
        let reopen = started.elapsed();
        let size = dir_size(corpus.index_dir());
        let files = count_files(std::path::Path::new(dir));
        let mut times = Vec::new();
        for _ in 0..args.rounds {
            for q in &queries {
                let t = Instant::now();
                let hits = corpus.search_blocking(q, "", args.results)?;
                times.push(t.elapsed());
                std::hint::black_box(hits);
            }
        }
        times.sort();
        let pct = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
        println!(
            "| {name} | {files} | {sections} | {:.1} s | {:.2} s | {:.1} MB | {:.2} ms | {:.2} ms |",
            first.as_secs_f64(),
            reopen.as_secs_f64(),
            size as f64 / 1e6,
            pct(0.5).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
        );
    }
    println!(
        "\n{} queries × {} rounds per corpus, {} results each",
        queries.len(),
        args.rounds,
        args.results
    );
    Ok(())
}

fn dir_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn count_files(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => count_files(&e.path()),
            Ok(_) => 1,
            Err(_) => 0,
        })
        .sum()
}
