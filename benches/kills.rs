//! Kill benchmark for BENCHMARKS.md: research runs on the real binary killed with SIGKILL at
//! random moments and restarted on the same store. For each kill: how long from the kill until
//! the run made progress again (a new model call), how many model calls the resumed run
//! repeated compared with an uninterrupted run, how many of those had finished before the kill
//! (repeated minus those in flight), and whether the run's usage still counts every call once.
//!
//! `cargo bench --bench kills -- --kills 10 --backend sqlite` (Postgres: `--backend postgres`
//! with TEST_DATABASE_URL naming a server).

#[path = "../tests/support/mod.rs"]
mod support;

use clap::Parser;
use std::time::{Duration, Instant};
use support::Backend;
use support::service::*;

#[derive(Parser)]
struct Args {
    /// How many runs to kill [default: 10; 1 under `cargo test`, a smoke run that keeps this
    /// benchmark working without spending CI's minutes on it]
    #[arg(long)]
    kills: Option<usize>,
    /// `sqlite` or `postgres`.
    #[arg(long, default_value = "sqlite")]
    backend: String,
    /// Seed of the kill moments.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Latency of every fake model call, in ms.
    #[arg(long, default_value_t = 60)]
    model_ms: u64,
    #[arg(long, hide = true)]
    bench: bool,
}

/// xorshift: reproducible kill moments without another dependency.
fn next(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % 10_000) as f64 / 10_000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it.
    let kills = args.kills.unwrap_or(if args.bench { 10 } else { 1 });
    let backend = match args.backend.as_str() {
        "postgres" => Backend::Postgres,
        _ => Backend::Sqlite,
    };
    let fakes = Fakes::start(Duration::from_millis(args.model_ms)).await;
    let (base_llm, base_search) = baseline(&fakes, backend).await;
    println!("baseline: {base_llm} model calls, {base_search} searches per run");
    println!(
        "kill  at-call  in-flight  resumed-after-ms  calls-redone  finished-redone  searches-redone  usage-calls"
    );
    let client = deep_research::outbound::client_builder().build().unwrap();
    let mut state = args.seed.max(1);
    let (mut waits, mut redone_all, mut finished_all) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..kills {
        let Some(db) = Db::fresh(backend, fakes.dir.path()).await else {
            eprintln!("no Postgres: set TEST_DATABASE_URL");
            return;
        };
        let mut svc = Service::start(&fakes.config, &db, FAST).await;
        let before = fakes.calls();
        let (t, r) = start_research(&client, &svc, "Batteries").await;
        let cut = 1 + (next(&mut state) * 0.9 * base_llm as f64) as usize;
        wait_until(Duration::from_secs(120), "the kill moment", || {
            fakes.llm.calls() - before.0 >= cut
        })
        .await;
        let (in_flight, started) = (fakes.llm.in_flight(), fakes.llm.calls());
        svc.kill();
        let killed = Instant::now();
        let at_kill = fakes.llm.calls();
        // Calls the server started between the count above and its death were in flight too.
        let in_flight = in_flight + (at_kill - started);
        let svc = Service::start(&fakes.config, &db, FAST).await;
        wait_until(Duration::from_secs(60), "the resumed run", || {
            fakes.llm.calls() > at_kill
        })
        .await;
        let waited = killed.elapsed();
        let values = join(&client, &svc, &t, &r).await;
        assert!(!report_of(&values).is_empty(), "no report: {values}");
        let after = fakes.calls();
        let redone = (after.0 - before.0).saturating_sub(base_llm);
        // A call in flight at the kill is made again (and counted twice at the fake); any
        // other repeat is a finished call paid for twice.
        let finished = redone.saturating_sub(in_flight);
        let searches = (after.1 - before.1).saturating_sub(base_search);
        let usage_calls = values["usage"]["calls"].as_u64().unwrap_or_default();
        println!(
            "{i:>4}  {:>7}  {in_flight:>9}  {:>16}  {redone:>12}  {finished:>15}  {searches:>15}  {usage_calls:>11}",
            at_kill - before.0,
            waited.as_millis()
        );
        waits.push(waited.as_millis());
        redone_all.push(redone);
        finished_all.push(finished);
    }
    waits.sort();
    redone_all.sort();
    let median = |v: &[u128]| v.get(v.len() / 2).copied().unwrap_or_default();
    println!(
        "resumed after: median {} ms, max {} ms; calls redone: median {}, max {}, total {}",
        median(&waits),
        waits.last().copied().unwrap_or_default(),
        redone_all
            .get(redone_all.len() / 2)
            .copied()
            .unwrap_or_default(),
        redone_all.last().copied().unwrap_or_default(),
        redone_all.iter().sum::<usize>()
    );
    println!(
        "finished calls redone: total {} over {} kills (baseline {base_llm} calls per run)",
        finished_all.iter().sum::<usize>(),
        finished_all.len()
    );
    // The reference: the Python service redoes a killed run whole.
    let kills = redone_all.len().max(1) as f64;
    let mean_redone = redone_all.iter().sum::<usize>() as f64 / kills;
    println!(
        "vs Python ODR (the issue's figure: a killed run is redone whole, {base_llm} model calls): \
         {mean_redone:.1} calls redone per kill here, {:.2}×",
        mean_redone / (base_llm.max(1) as f64)
    );
}
