//! Contract tests for `Store`, written once and run against SQLite (a temp file) and Postgres
//! (a fresh database per test under `TEST_DATABASE_URL`).

use crate::support::pg;

use deep_research::ids::{AssistantId, CheckpointId, RunId, ThreadId};
use deep_research::store::{
    Assistant, AssistantPatch, AssistantQuery, AssistantSort, CancelAction, Checkpoint,
    CheckpointQuery, Comparison, Cron, CronQuery, CronTick, EventId, FieldMatch, IfExists,
    ItemQuery, JsonMap, LeaseState, MultitaskStrategy, Namespace, NamespaceQuery, Owner, Run,
    RunEnd, RunFailure, RunInsert, RunStatus, SortOrder, SqlStore, Store, StoreError, StoredChunks,
    StoredEvent, TaskCall, Thread, ThreadQuery, ThreadSort, ThreadStatus, ThreadSummary,
};
use deep_research::time::Timestamp;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

// ---- harness ------------------------------------------------------------------------------

async fn run_sqlite<F, Fut>(body: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::TempDir::new().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let store = SqlStore::connect(&url, 8).await.expect("open sqlite store");
    assert_eq!(store.backend(), "sqlite");
    body(Arc::new(store)).await;
}

async fn run_postgres<F, Fut>(body: F)
where
    F: FnOnce(Arc<dyn Store>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(admin) = pg::admin_url() else {
        return;
    };
    let (name, url) = pg::create_database(&admin, "dr_test").await;
    // Run connect + body as a task so the database is dropped even when either panics.
    let result = tokio::spawn(async move {
        let store = SqlStore::connect(&url, 8)
            .await
            .expect("open postgres store");
        assert_eq!(store.backend(), "postgres");
        body(Arc::new(store.clone())).await;
        store.close().await;
    })
    .await;
    pg::drop_database(&admin, &name).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

macro_rules! contract_tests {
    ($($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::store_contract::run_sqlite(crate::store_contract::contract::$name).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    crate::store_contract::run_postgres(crate::store_contract::contract::$name).await;
                }
            )+
        }
    };
}

contract_tests!(
    owners_are_kept_apart,
    assistants_crud,
    assistants_search,
    assistant_versions,
    store_items,
    store_item_filters_and_namespaces,
    crons_crud_and_search,
    a_cron_tick_starts_one_run,
    threads_crud,
    threads_search,
    metadata_containment,
    insert_run_missing_thread,
    insert_run_reject,
    insert_run_interrupt,
    insert_run_rollback,
    insert_run_enqueue,
    runs_listing_and_delete,
    run_statuses_in_one_call,
    claim_order_and_one_running_per_thread,
    claim_skips_future_runs,
    renew_lease_ownership,
    finish_run_thread_status,
    finish_run_rollback_deletes_writes,
    lapsed_leases_are_taken_over_then_given_up,
    cancel_runs,
    retention,
    checkpoints,
    task_calls_are_kept_until_forgotten,
    large_strings_are_stored_once,
    chunks_a_run_stored_are_not_sent_again,
    events,
    copy_thread,
    delete_thread_cascades,
    concurrent_claims,
);

// ---- fixtures -----------------------------------------------------------------------------

fn map(v: Value) -> JsonMap {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// `secs` seconds from now (negative: in the past).
fn at(secs: f64) -> Timestamp {
    Timestamp::now().plus_secs(secs)
}

fn assistant(graph: &str, name: &str, metadata: Value, created: Timestamp) -> Assistant {
    Assistant {
        owner: Some(Owner::local()),
        assistant_id: Uuid::new_v4().into(),
        graph_id: graph.into(),
        config: json!({"configurable": {"model": "m"}}),
        context: json!({}),
        metadata: map(metadata),
        name: name.into(),
        description: Some(format!("{name} description")),
        version: 1,
        created_at: created,
        updated_at: created,
    }
}

fn thread(metadata: Value, values: Option<Value>, status: ThreadStatus, at: Timestamp) -> Thread {
    Thread {
        owner: Owner::local(),
        thread_id: Uuid::new_v4().into(),
        created_at: at,
        updated_at: at,
        state_updated_at: at,
        metadata: map(metadata),
        status,
        config: json!({}),
        values,
        error: None,
        interrupts: json!({}),
        ttl_minutes: None,
    }
}

async fn new_thread(s: &Arc<dyn Store>) -> ThreadId {
    let t = thread(json!({}), None, ThreadStatus::Idle, at(0.0));
    s.create_thread(&t, IfExists::Raise).await.unwrap();
    t.thread_id
}

fn run(thread_id: ThreadId, created: Timestamp, strategy: MultitaskStrategy) -> Run {
    Run {
        run_id: Uuid::new_v4().into(),
        thread_id,
        assistant_id: Uuid::new_v4().into(),
        created_at: created,
        updated_at: created,
        status: RunStatus::Pending,
        metadata: map(json!({"origin": "test"})),
        multitask_strategy: strategy,
        kwargs: json!({"input": {"messages": []}, "stream_mode": ["values"]}),
    }
}

fn insert(r: &Run, thread_metadata: Value) -> RunInsert {
    RunInsert {
        owner: Owner::local(),
        run: r.clone(),
        thread_metadata: map(thread_metadata),
        create_thread: false,
        idempotency_key: None,
        cron_tick: None,
    }
}

/// Inserts an `enqueue` run created `secs` from now.
async fn add_run(s: &Arc<dyn Store>, thread_id: ThreadId, secs: f64) -> Run {
    let r = run(thread_id, at(secs), MultitaskStrategy::Enqueue);
    s.insert_run(&insert(&r, json!({}))).await.unwrap();
    r
}

const LEASE: Duration = Duration::from_secs(30);

async fn claim(s: &Arc<dyn Store>, worker: &str) -> Run {
    s.claim_run(worker, LEASE, 3)
        .await
        .unwrap()
        .expect("a claimable run")
        .run
}

fn summary(status: ThreadStatus, values: Value) -> ThreadSummary {
    ThreadSummary {
        status,
        values: Some(values),
        error: None,
        interrupts: json!({}),
    }
}

/// Checkpoint ids that sort in creation order, like UUIDv7.
fn cp_id(n: u128) -> CheckpointId {
    Uuid::from_u128(0x0190_0000_0000_7000_8000_0000_0000_0000 + n).into()
}

fn checkpoint(
    thread_id: ThreadId,
    ns: &str,
    n: u128,
    parent: Option<u128>,
    run: Option<RunId>,
) -> Checkpoint {
    Checkpoint {
        thread_id,
        checkpoint_ns: ns.into(),
        checkpoint_id: cp_id(n),
        parent_checkpoint_id: parent.map(cp_id),
        run_id: run,
        step: n as i64,
        source: "loop".into(),
        metadata: map(json!({"source": "loop", "step": n})),
        // A long string (stored as shared chunks) and one that looks like a chunk reference.
        writes: json!([
            ["messages", [{"role": "ai", "content": format!("step {n}")}]],
            ["notes", [long_text(n), "\u{0}@not a reference"]],
        ]),
        next: vec!["researcher".into()],
        tasks: json!([{"id": "t", "name": "researcher"}]),
        created_at: at(0.0),
    }
}

/// Several KB of text that shares most of its bytes with the texts of other checkpoints.
fn long_text(n: u128) -> String {
    let common: String = (0..400)
        .map(|i| format!("line {i} of the findings; "))
        .collect();
    format!("checkpoint {n}: {common}")
}

fn event(run: &Run, ms: i64, seq: i64) -> StoredEvent {
    StoredEvent {
        run_id: run.run_id,
        thread_id: run.thread_id,
        id: EventId { ms, seq },
        event: "values".into(),
        data: format!("{{\"ms\":{ms},\"seq\":{seq}}}").into(),
    }
}

fn ids<T, I>(items: &[T], id: impl Fn(&T) -> I) -> Vec<I> {
    items.iter().map(id).collect()
}

fn sorted<I: Ord>(mut v: Vec<I>) -> Vec<I> {
    v.sort();
    v
}

// ---- contract -----------------------------------------------------------------------------

mod contract {
    use super::*;

    pub async fn assistants_crud(s: Arc<dyn Store>) {
        let a = assistant("g1", "Alpha", json!({"team": "red"}), at(-100.0));
        assert_eq!(s.create_assistant(&a, IfExists::Raise).await.unwrap(), a);
        assert_eq!(
            s.get_assistant(a.assistant_id).await.unwrap(),
            Some(a.clone())
        );

        let err = s.create_assistant(&a, IfExists::Raise).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict("assistant")), "{err}");
        let mut other = a.clone();
        other.name = "changed".into();
        let kept = s
            .create_assistant(&other, IfExists::DoNothing)
            .await
            .unwrap();
        assert_eq!(kept, a, "do_nothing returns the existing row unchanged");

        let now = at(0.0);
        let patch = AssistantPatch {
            name: Some("Beta".into()),
            metadata: Some(map(json!({"tier": 2}))),
            ..AssistantPatch::default()
        };
        let updated = s
            .update_assistant(a.assistant_id, &patch, now)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(updated.name, "Beta");
        assert_eq!(updated.graph_id, "g1");
        assert_eq!(updated.version, 2);
        assert_eq!(updated.updated_at, now);
        assert_eq!(updated.created_at, a.created_at);
        assert_eq!(updated.metadata, map(json!({"team": "red", "tier": 2})));
        assert_eq!(
            s.get_assistant(a.assistant_id).await.unwrap(),
            Some(updated)
        );
        let missing = s
            .update_assistant(Uuid::new_v4().into(), &patch, now)
            .await
            .unwrap();
        assert!(missing.is_none());

        assert!(s.delete_assistant(a.assistant_id).await.unwrap());
        assert!(!s.delete_assistant(a.assistant_id).await.unwrap());
        assert!(s.get_assistant(a.assistant_id).await.unwrap().is_none());
    }

    pub async fn assistant_versions(s: Arc<dyn Store>) {
        let a = assistant("g1", "one", json!({"stage": "draft"}), at(-100.0));
        s.create_assistant(&a, IfExists::Raise).await.unwrap();
        let id = a.assistant_id;
        let rename = |name: &str| AssistantPatch {
            name: Some(name.into()),
            ..AssistantPatch::default()
        };
        s.update_assistant(id, &rename("two"), at(-90.0))
            .await
            .unwrap();
        let versions = s
            .assistant_versions(id, &JsonMap::new(), 10, 0)
            .await
            .unwrap()
            .expect("exists");
        let numbers: Vec<i64> = versions.iter().map(|v| v.version).collect();
        assert_eq!(numbers, [2, 1], "newest first");
        assert_eq!(versions[1].name, "one");
        assert_eq!(versions[1].created_at, a.created_at);

        // Back to 1: the assistant reads as version 1 again; the next patch is 3, not 2.
        let back = s.set_latest_assistant(id, 1, at(-80.0)).await.unwrap();
        assert_eq!((back.version, back.name.as_str()), (1, "one"));
        assert_eq!(s.get_assistant(id).await.unwrap(), Some(back));
        let next = s
            .update_assistant(id, &rename("three"), at(-70.0))
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(next.version, 3);

        let drafts = s
            .assistant_versions(id, &map(json!({"stage": "draft"})), 10, 0)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(drafts.len(), 3, "every version kept the metadata");
        let paged = s
            .assistant_versions(id, &JsonMap::new(), 1, 1)
            .await
            .unwrap();
        assert_eq!(paged.expect("exists")[0].version, 2);

        let missing = s.set_latest_assistant(id, 9, at(0.0)).await.unwrap_err();
        assert!(matches!(missing, StoreError::NotFound("assistant version")));
        let gone = AssistantId::new();
        assert!(
            s.assistant_versions(gone, &JsonMap::new(), 10, 0)
                .await
                .unwrap()
                .is_none()
        );
        let err = s.set_latest_assistant(gone, 1, at(0.0)).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound("assistant")));

        // Deleting the assistant takes its versions; the id can be used afresh.
        assert!(s.delete_assistant(id).await.unwrap());
        s.create_assistant(&a, IfExists::Raise).await.unwrap();
        let fresh = s
            .assistant_versions(id, &JsonMap::new(), 10, 0)
            .await
            .unwrap();
        assert_eq!(fresh.expect("exists").len(), 1);
    }

    fn ns(labels: &[&str]) -> Namespace {
        Namespace::new(labels.iter().map(|l| l.to_string()).collect()).unwrap()
    }

    fn search(prefix: &[&str], filter: Vec<(&str, FieldMatch)>) -> ItemQuery {
        ItemQuery {
            owner: Owner::local(),
            prefix: Namespace::prefix(prefix.iter().map(|l| l.to_string()).collect()).unwrap(),
            filter: filter
                .into_iter()
                .map(|(k, m)| (k.to_string(), m))
                .collect(),
            limit: 100,
            offset: 0,
            refresh_ttl: false,
        }
    }

    fn keys(items: &[deep_research::store::Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| format!("{}/{}", i.namespace.dotted(), i.key))
            .collect()
    }

    pub async fn store_items(s: Arc<dyn Store>) {
        let prefs = ns(&["users", "u1"]);
        let t0 = at(-100.0);
        s.put_item(
            &Owner::local(),
            &prefs,
            "style",
            &map(json!({"tone": "dry"})),
            None,
            t0,
        )
        .await
        .unwrap();
        let got = s
            .get_item(&Owner::local(), &prefs, "style", true, at(-99.0))
            .await
            .unwrap();
        let got = got.expect("stored");
        assert_eq!(got.value, map(json!({"tone": "dry"})));
        assert_eq!((got.created_at, got.updated_at), (t0, t0));
        assert_eq!(got.namespace, prefs);

        // Replacing keeps created_at and moves updated_at.
        let t1 = at(-90.0);
        s.put_item(
            &Owner::local(),
            &prefs,
            "style",
            &map(json!({"tone": "warm"})),
            None,
            t1,
        )
        .await
        .unwrap();
        let got = s
            .get_item(&Owner::local(), &prefs, "style", true, t1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((got.created_at, got.updated_at), (t0, t1));
        assert_eq!(got.value["tone"], "warm");
        assert!(
            s.get_item(&Owner::local(), &ns(&["users"]), "style", true, t1)
                .await
                .unwrap()
                .is_none()
        );

        // A ttl: live before it runs out, gone after; a refreshing read restarts it.
        s.put_item(
            &Owner::local(),
            &prefs,
            "brief",
            &map(json!({"n": 1})),
            Some(1.0),
            at(-50.0),
        )
        .await
        .unwrap();
        assert!(
            s.get_item(&Owner::local(), &prefs, "brief", false, at(-20.0))
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            s.get_item(&Owner::local(), &prefs, "brief", false, at(20.0))
                .await
                .unwrap()
                .is_none()
        );
        // Read at -20 s with refresh: expires at +40 s instead of +10 s.
        assert!(
            s.get_item(&Owner::local(), &prefs, "brief", true, at(-20.0))
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            s.get_item(&Owner::local(), &prefs, "brief", false, at(30.0))
                .await
                .unwrap()
                .is_some()
        );
        assert_eq!(s.delete_expired_items(at(30.0)).await.unwrap(), 0);
        assert_eq!(s.delete_expired_items(at(50.0)).await.unwrap(), 1);
        assert!(
            s.get_item(&Owner::local(), &prefs, "brief", false, at(0.0))
                .await
                .unwrap()
                .is_none()
        );

        assert!(
            s.delete_item(&Owner::local(), &prefs, "style")
                .await
                .unwrap()
        );
        assert!(
            !s.delete_item(&Owner::local(), &prefs, "style")
                .await
                .unwrap()
        );
        assert!(
            s.get_item(&Owner::local(), &prefs, "style", true, at(0.0))
                .await
                .unwrap()
                .is_none()
        );
    }

    pub async fn store_item_filters_and_namespaces(s: Arc<dyn Store>) {
        let now = at(0.0);
        let docs = [
            (
                &["users", "u1", "facts"][..],
                "a",
                json!({"score": 3, "kind": "x", "tags": ["p", "q"]}),
            ),
            (
                &["users", "u1", "facts"][..],
                "b",
                json!({"score": 10, "kind": "y"}),
            ),
            (&["users", "u10"][..], "c", json!({"score": 7, "kind": "x"})),
            (
                &["users", "u1_0"][..],
                "d",
                json!({"score": 1, "kind": "x"}),
            ),
            (&["teams", "t%"][..], "e", json!({"score": 5, "kind": "z"})),
        ];
        for (labels, key, value) in &docs {
            s.put_item(
                &Owner::local(),
                &ns(labels),
                key,
                &map(value.clone()),
                None,
                now,
            )
            .await
            .unwrap();
        }
        let found = |q| {
            let s = s.clone();
            async move { keys(&s.search_items(&q, now).await.unwrap()) }
        };
        // The prefix matches whole labels: u1 is not u10 nor u1_0.
        assert_eq!(
            found(search(&["users", "u1"], vec![])).await,
            ["users.u1.facts/a", "users.u1.facts/b"]
        );
        assert_eq!(found(search(&[], vec![])).await.len(), 5);
        assert_eq!(
            found(search(&["teams", "t%"], vec![])).await,
            ["teams.t%/e"]
        );

        let x = FieldMatch::Contains(json!("x"));
        assert_eq!(
            found(search(&["users"], vec![("kind", x.clone())])).await,
            ["users.u1.facts/a", "users.u10/c", "users.u1_0/d"]
        );
        let ne = FieldMatch::NotContains(json!("x"));
        assert_eq!(
            found(search(&[], vec![("kind", ne)])).await,
            ["teams.t%/e", "users.u1.facts/b"]
        );
        let gte5 = FieldMatch::Compare(Comparison::Gte, json!(5));
        let lt10 = FieldMatch::Compare(Comparison::Lt, json!(10));
        assert_eq!(
            found(search(&[], vec![("score", gte5), ("score", lt10)])).await,
            ["teams.t%/e", "users.u10/c"]
        );
        let after_x = FieldMatch::Compare(Comparison::Gt, json!("x"));
        assert_eq!(
            found(search(&[], vec![("kind", after_x)])).await,
            ["teams.t%/e", "users.u1.facts/b"]
        );
        let tag = FieldMatch::Contains(json!(["q"]));
        assert_eq!(
            found(search(&[], vec![("tags", tag)])).await,
            ["users.u1.facts/a"]
        );
        let mut paged = search(&[], vec![]);
        (paged.limit, paged.offset) = (2, 1);
        assert_eq!(found(paged).await, ["users.u1.facts/a", "users.u1.facts/b"]);

        let listing = |prefix: &[&str], suffix: &[&str], max_depth| NamespaceQuery {
            owner: Owner::local(),
            prefix: Namespace::prefix(prefix.iter().map(|l| l.to_string()).collect()).unwrap(),
            suffix: suffix.iter().map(|l| l.to_string()).collect(),
            max_depth,
            limit: 100,
            offset: 0,
        };
        let names = |q| {
            let s = s.clone();
            async move {
                s.list_namespaces(&q, now)
                    .await
                    .unwrap()
                    .iter()
                    .map(Namespace::dotted)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            names(listing(&[], &[], None)).await,
            ["teams.t%", "users.u1.facts", "users.u10", "users.u1_0"]
        );
        assert_eq!(
            names(listing(&["users"], &[], Some(2))).await,
            ["users.u1", "users.u10", "users.u1_0"]
        );
        assert_eq!(
            names(listing(&[], &["facts"], None)).await,
            ["users.u1.facts"]
        );
        assert_eq!(names(listing(&[], &[], Some(1))).await, ["teams", "users"]);
    }

    fn cron(thread_id: Option<ThreadId>, assistant_id: AssistantId, next: Timestamp) -> Cron {
        Cron {
            owner: Owner::local(),
            cron_id: Uuid::new_v4().into(),
            assistant_id,
            thread_id,
            user_id: None,
            schedule: "* * * * *".into(),
            timezone: Some("Europe/Paris".into()),
            payload: map(json!({"assistant_id": assistant_id, "input": {"q": 1}})),
            metadata: map(json!({"team": "red"})),
            on_run_completed: None,
            enabled: true,
            end_time: None,
            next_run_date: Some(next),
            created_at: at(-10.0),
            updated_at: at(-10.0),
        }
    }

    pub async fn crons_crud_and_search(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let (a1, a2) = (AssistantId::new(), AssistantId::new());
        let on_thread = cron(Some(tid), a1, at(30.0));
        let mut stateless = cron(None, a2, at(-1.0));
        stateless.created_at = at(-5.0);
        stateless.end_time = Some(at(3600.0));
        s.create_cron(&on_thread).await.unwrap();
        s.create_cron(&stateless).await.unwrap();
        assert_eq!(
            s.get_cron(on_thread.cron_id).await.unwrap(),
            Some(on_thread.clone())
        );

        let q = |f: fn(&mut CronQuery)| {
            let mut q = CronQuery {
                limit: 10,
                ..CronQuery::default()
            };
            f(&mut q);
            q
        };
        let all = s.search_crons(&q(|_| {})).await.unwrap();
        assert_eq!(all.total, 2);
        assert_eq!(all.items[0].cron_id, stateless.cron_id, "newest first");
        let mine = s
            .search_crons(&q(|q| q.thread_id = Some(Uuid::nil().into())))
            .await
            .unwrap();
        assert_eq!(mine.total, 0);
        let red = s
            .search_crons(&CronQuery {
                assistant_id: Some(a1),
                metadata: map(json!({"team": "red"})),
                limit: 10,
                ..CronQuery::default()
            })
            .await
            .unwrap();
        assert_eq!(ids(&red.items, |c| c.cron_id), [on_thread.cron_id]);

        // Only the enabled one whose tick is due.
        let due = s.due_crons(at(0.0), 10).await.unwrap();
        assert_eq!(ids(&due, |c| c.cron_id), [stateless.cron_id]);
        let mut off = stateless.clone();
        off.enabled = false;
        assert!(s.update_cron(&off).await.unwrap());
        assert!(s.due_crons(at(0.0), 10).await.unwrap().is_empty());
        let disabled = s
            .search_crons(&q(|q| q.enabled = Some(false)))
            .await
            .unwrap();
        assert_eq!(ids(&disabled.items, |c| c.cron_id), [stateless.cron_id]);
        // Past its end time it is never due.
        let mut ended = stateless.clone();
        ended.end_time = Some(at(-2.0));
        s.update_cron(&ended).await.unwrap();
        assert!(s.due_crons(at(0.0), 10).await.unwrap().is_empty());

        assert!(s.delete_cron(stateless.cron_id).await.unwrap());
        assert!(!s.delete_cron(stateless.cron_id).await.unwrap());
        assert!(!s.update_cron(&stateless).await.unwrap());
        // A thread's crons go with it.
        assert!(s.delete_thread(tid).await.unwrap());
        assert!(s.get_cron(on_thread.cron_id).await.unwrap().is_none());
    }

    pub async fn a_cron_tick_starts_one_run(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let due = at(-1.0);
        let c = cron(Some(tid), Uuid::new_v4().into(), due);
        s.create_cron(&c).await.unwrap();
        let tick = CronTick {
            cron_id: c.cron_id,
            due,
            next: Some(at(59.0)),
        };
        // Replicas race for the tick: exactly one inserts its run.
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (s, tick) = (s.clone(), tick.clone());
            tasks.push(tokio::spawn(async move {
                let r = run(tid, at(0.0), MultitaskStrategy::Enqueue);
                let ins = RunInsert {
                    cron_tick: Some(tick),
                    ..insert(&r, json!({}))
                };
                s.insert_run(&ins).await.map(|_| r.run_id)
            }));
        }
        let mut started = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(id) => started.push(id),
                Err(StoreError::Conflict("cron tick")) => {}
                Err(other) => panic!("unexpected: {other}"),
            }
        }
        assert_eq!(started.len(), 1, "one run per tick");
        let runs = s.list_runs(tid, None, 10, 0).await.unwrap();
        assert_eq!(ids(&runs, |r| r.run_id), started);
        let moved = s.get_cron(c.cron_id).await.unwrap().unwrap();
        assert_eq!(moved.next_run_date, tick.next);
        assert!(s.due_crons(at(0.0), 10).await.unwrap().is_empty());

        // A tick whose run could not start is skipped once, by whoever gets there first.
        let next = CronTick {
            cron_id: c.cron_id,
            due: moved.next_run_date.expect("a next tick"),
            next: Some(at(119.0)),
        };
        assert!(s.skip_cron_tick(&next).await.unwrap());
        assert!(!s.skip_cron_tick(&next).await.unwrap());
        assert_eq!(s.list_runs(tid, None, 10, 0).await.unwrap().len(), 1);
    }

    pub async fn assistants_search(s: Arc<dyn Store>) {
        let a1 = assistant(
            "g1",
            "Alpha Research",
            json!({"team": "red", "level": 1}),
            at(-50.0),
        );
        let a2 = assistant("g1", "beta", json!({"team": "blue"}), at(-40.0));
        let a3 = assistant(
            "g2",
            "ALPHA two",
            json!({"team": "red", "tags": ["x", "y"]}),
            at(-30.0),
        );
        let a4 = assistant("g2", "100% sure_thing", json!({"team": null}), at(-20.0));
        let a5 = assistant(
            "g3",
            "gamma",
            json!({"nested": {"a": 1, "b": 2}}),
            at(-10.0),
        );
        for a in [&a1, &a2, &a3, &a4, &a5] {
            s.create_assistant(a, IfExists::Raise).await.unwrap();
        }
        let search = |q: AssistantQuery| {
            let s = s.clone();
            async move {
                let page = s.search_assistants(&q).await.unwrap();
                (ids(&page.items, |a| a.assistant_id), page.total)
            }
        };
        let q = |f: fn(&mut AssistantQuery)| {
            let mut q = AssistantQuery {
                limit: 10,
                ..AssistantQuery::default()
            };
            f(&mut q);
            q
        };
        let all = vec![
            a5.assistant_id,
            a4.assistant_id,
            a3.assistant_id,
            a2.assistant_id,
            a1.assistant_id,
        ];
        assert_eq!(
            search(q(|_| {})).await,
            (all.clone(), 5),
            "default: created_at desc"
        );

        let r = search(q(|q| q.graph_id = Some("g1".into()))).await;
        assert_eq!(r, (vec![a2.assistant_id, a1.assistant_id], 2));
        let r = search(q(|q| q.name = Some("alpha".into()))).await;
        assert_eq!(
            r,
            (vec![a3.assistant_id, a1.assistant_id], 2),
            "case-insensitive substring"
        );
        let r = search(q(|q| q.name = Some("100%".into()))).await;
        assert_eq!(r, (vec![a4.assistant_id], 1));
        let r = search(q(|q| q.name = Some("a_t".into()))).await;
        assert_eq!(r, (vec![], 0), "`_` is literal, not a wildcard");

        let r = search(q(|q| q.metadata = map(json!({"team": "red"})))).await;
        assert_eq!(r, (vec![a3.assistant_id, a1.assistant_id], 2));
        let r = search(q(|q| q.metadata = map(json!({"team": null})))).await;
        assert_eq!(r, (vec![a4.assistant_id], 1), "null matches JSON null only");
        let r = search(q(|q| q.metadata = map(json!({"tags": ["y"]})))).await;
        assert_eq!(r, (vec![a3.assistant_id], 1));
        let r = search(q(|q| q.metadata = map(json!({"nested": {"a": 1}})))).await;
        assert_eq!(r, (vec![a5.assistant_id], 1));
        let r = search(q(|q| q.metadata = map(json!({"level": 1.0})))).await;
        assert_eq!(r, (vec![a1.assistant_id], 1), "numbers compare numerically");
        let r = search(q(|q| q.metadata = map(json!({"level": "1"})))).await;
        assert_eq!(r, (vec![], 0), "a string is not a number");
        let r = search(q(|q| {
            q.graph_id = Some("g2".into());
            q.metadata = map(json!({"team": "red"}));
        }))
        .await;
        assert_eq!(r, (vec![a3.assistant_id], 1), "filters combine with AND");

        let r = search(q(|q| {
            q.sort_by = Some(AssistantSort::CreatedAt);
            q.sort_order = Some(SortOrder::Asc);
        }))
        .await;
        assert_eq!(r.0, all.iter().rev().copied().collect::<Vec<_>>());
        let page = s
            .search_assistants(&q(|q| {
                q.sort_by = Some(AssistantSort::GraphId);
                q.sort_order = Some(SortOrder::Asc);
            }))
            .await
            .unwrap();
        let graphs: Vec<_> = page.items.iter().map(|a| a.graph_id.as_str()).collect();
        assert_eq!(graphs, ["g1", "g1", "g2", "g2", "g3"]);
        let page = s
            .search_assistants(&q(|q| {
                q.sort_by = Some(AssistantSort::Name);
                q.sort_order = Some(SortOrder::Asc);
            }))
            .await
            .unwrap();
        let names: Vec<_> = page.items.iter().map(|a| a.name.as_str()).collect();
        let bytewise = [
            "100% sure_thing",
            "ALPHA two",
            "Alpha Research",
            "beta",
            "gamma",
        ];
        assert_eq!(names, bytewise, "names sort bytewise on both backends");
        // A sort is one of `AssistantSort`'s columns: nothing else reaches the store (the
        // API refuses other words: `bad_input.rs`).

        let r = search(q(|q| {
            q.limit = 2;
            q.offset = 1;
        }))
        .await;
        assert_eq!(r, (all[1..3].to_vec(), 5), "total ignores limit/offset");
        let r = search(q(|q| q.limit = 0)).await;
        assert_eq!(r, (vec![], 5));
        let r = search(q(|q| q.offset = 10)).await;
        assert_eq!(r, (vec![], 5));
    }

    pub async fn threads_crud(s: Arc<dyn Store>) {
        let t = thread(json!({"user": "u1"}), None, ThreadStatus::Idle, at(-10.0));
        assert_eq!(s.create_thread(&t, IfExists::Raise).await.unwrap(), t);
        assert_eq!(s.get_thread(t.thread_id).await.unwrap(), Some(t.clone()));
        let err = s.create_thread(&t, IfExists::Raise).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict("thread")), "{err}");
        let mut other = t.clone();
        other.metadata = map(json!({"user": "someone else"}));
        assert_eq!(
            s.create_thread(&other, IfExists::DoNothing).await.unwrap(),
            t
        );

        let now = at(0.0);
        let patched = s
            .patch_thread(t.thread_id, &map(json!({"title": "hi"})), None, now)
            .await
            .unwrap()
            .expect("exists");
        assert_eq!(patched.metadata, map(json!({"user": "u1", "title": "hi"})));
        assert_eq!(patched.updated_at, now);
        assert_eq!(patched.state_updated_at, t.state_updated_at);
        let missing = s
            .patch_thread(Uuid::new_v4().into(), &JsonMap::new(), None, now)
            .await
            .unwrap();
        assert!(missing.is_none());

        let later = at(1.0);
        let sum = ThreadSummary {
            status: ThreadStatus::Interrupted,
            values: Some(json!({"messages": ["hello"]})),
            error: Some(RunFailure {
                error: "E".into(),
                message: "m".into(),
            }),
            interrupts: json!({"task": [{"value": "ask"}]}),
        };
        s.set_thread_summary(t.thread_id, &sum, later)
            .await
            .unwrap();
        let got = s.get_thread(t.thread_id).await.unwrap().expect("exists");
        assert_eq!(got.status, ThreadStatus::Interrupted);
        assert_eq!(got.values, sum.values);
        assert_eq!(got.error, sum.error);
        assert_eq!(got.interrupts, sum.interrupts);
        assert_eq!((got.updated_at, got.state_updated_at), (later, later));
        let err = s
            .set_thread_summary(Uuid::new_v4().into(), &sum, later)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound("thread")), "{err}");

        assert!(s.delete_thread(t.thread_id).await.unwrap());
        assert!(!s.delete_thread(t.thread_id).await.unwrap());
        assert!(s.get_thread(t.thread_id).await.unwrap().is_none());
    }

    pub async fn threads_search(s: Arc<dyn Store>) {
        let values1 = json!({"messages": [{"role": "user", "content": "hi"}], "done": false});
        let t1 = thread(
            json!({"user": "u1", "graph_id": "g"}),
            Some(values1),
            ThreadStatus::Idle,
            at(-50.0),
        );
        let t2 = thread(json!({"user": "u2"}), None, ThreadStatus::Busy, at(-40.0));
        let t3 = thread(
            json!({"user": "u1"}),
            Some(json!({"done": true})),
            ThreadStatus::Error,
            at(-30.0),
        );
        for t in [&t1, &t2, &t3] {
            s.create_thread(t, IfExists::Raise).await.unwrap();
        }
        let (i1, i2, i3) = (t1.thread_id, t2.thread_id, t3.thread_id);
        let search = |f: fn(&mut ThreadQuery)| {
            let s = s.clone();
            async move {
                let mut q = ThreadQuery {
                    limit: 10,
                    ..ThreadQuery::default()
                };
                f(&mut q);
                let page = s.search_threads(&q).await.unwrap();
                (ids(&page.items, |t| t.thread_id), page.total)
            }
        };
        assert_eq!(
            search(|_| {}).await,
            (vec![i3, i2, i1], 3),
            "default: updated_at desc"
        );
        let r = search(|q| q.metadata = map(json!({"user": "u1"}))).await;
        assert_eq!(r, (vec![i3, i1], 2));
        let r = search(|q| q.values = map(json!({"done": true}))).await;
        assert_eq!(r, (vec![i3], 1));
        let r = search(|q| q.values = map(json!({"done": false}))).await;
        assert_eq!(r, (vec![i1], 1), "false is not null and not missing");
        let r = search(|q| q.values = map(json!({"messages": [{"role": "user"}]}))).await;
        assert_eq!(r, (vec![i1], 1), "array elements match by containment");
        let r = search(|q| q.status = Some(ThreadStatus::Busy)).await;
        assert_eq!(r, (vec![i2], 1));
        let mut q = ThreadQuery {
            limit: 10,
            ids: vec![i1, i2],
            ..ThreadQuery::default()
        };
        let page = s.search_threads(&q).await.unwrap();
        assert_eq!(
            (ids(&page.items, |t| t.thread_id), page.total),
            (vec![i2, i1], 2)
        );
        q.metadata = map(json!({"user": "u1"}));
        assert_eq!(s.search_threads(&q).await.unwrap().total, 1);

        let r = search(|q| {
            q.sort_by = Some(ThreadSort::CreatedAt);
            q.sort_order = Some(SortOrder::Asc);
        })
        .await;
        assert_eq!(r.0, vec![i1, i2, i3]);
        let r = search(|q| {
            q.sort_by = Some(ThreadSort::Status);
            q.sort_order = Some(SortOrder::Asc);
        })
        .await;
        assert_eq!(r.0, vec![i2, i3, i1], "busy < error < idle");
        let r = search(|q| q.sort_by = None).await;
        assert_eq!(r.0, vec![i3, i2, i1], "newest update first");
        let r = search(|q| {
            q.limit = 1;
            q.offset = 1;
        })
        .await;
        assert_eq!(r, (vec![i2], 3));
    }

    pub async fn metadata_containment(s: Arc<dyn Store>) {
        let docs = [
            json!({"a\"b": 1, "x.y": "z", "ünï": true}),
            json!({"flag": true}),
            json!({"flag": 1}),
            json!({"flag": "1"}),
            json!({"cfg": {"a": 1, "b": {"c": 2}}, "tags": ["a", "b"]}),
            json!({"gone": null}),
            json!({"list": [[1, 2], {"k": "v", "w": 0}]}),
        ];
        let mut tids = Vec::new();
        for (i, d) in docs.iter().enumerate() {
            let t = thread(d.clone(), None, ThreadStatus::Idle, at(i as f64 - 100.0));
            s.create_thread(&t, IfExists::Raise).await.unwrap();
            tids.push(t.thread_id);
        }
        let cases: Vec<(Value, Vec<usize>)> = vec![
            (json!({}), (0..docs.len()).collect()),
            (json!({"a\"b": 1}), vec![0]),
            (json!({"x.y": "z", "ünï": true}), vec![0]),
            (json!({"x": {"y": "z"}}), vec![]),
            (json!({"flag": true}), vec![1]),
            (json!({"flag": 1}), vec![2]),
            (json!({"flag": "1"}), vec![3]),
            (json!({"cfg": {"b": {"c": 2}}}), vec![4]),
            (json!({"cfg": {"b": {"c": 3}}}), vec![]),
            (json!({"cfg": {}}), vec![4]),
            (json!({"tags": ["b"]}), vec![4]),
            (json!({"tags": ["b", "a"]}), vec![4]),
            (json!({"tags": ["c"]}), vec![]),
            (json!({"tags": "a"}), vec![]),
            (json!({"gone": null}), vec![5]),
            (json!({"flag": null}), vec![]),
            (json!({"list": [[2]]}), vec![6]),
            (json!({"list": [{"k": "v"}]}), vec![6]),
            (json!({"list": [{"k": "x"}]}), vec![]),
            (json!({"x' OR 1=1 --": 1}), vec![]),
            (json!({"flag": "1' OR '1'='1"}), vec![]),
        ];
        for (filter, want) in cases {
            let q = ThreadQuery {
                metadata: map(filter.clone()),
                limit: 100,
                ..ThreadQuery::default()
            };
            let page = s.search_threads(&q).await.unwrap();
            let got = sorted(ids(&page.items, |t| t.thread_id));
            let want = sorted(want.iter().map(|i| tids[*i]).collect());
            assert_eq!(got, want, "filter {filter}");
            assert_eq!(page.total, want.len() as i64, "total for {filter}");
        }
    }

    pub async fn insert_run_missing_thread(s: Arc<dyn Store>) {
        let tid = ThreadId::new();
        let r = run(tid, at(-1.0), MultitaskStrategy::Reject);
        let err = s.insert_run(&insert(&r, json!({}))).await.unwrap_err();
        assert!(matches!(err, StoreError::NotFound("thread")), "{err}");
        assert!(s.get_thread(tid).await.unwrap().is_none());
        assert!(s.get_run(r.run_id).await.unwrap().is_none());

        let ins = RunInsert {
            create_thread: true,
            ..insert(&r, json!({"graph_id": "g", "assistant_id": "a"}))
        };
        assert!(s.insert_run(&ins).await.unwrap().is_empty());
        let t = s.get_thread(tid).await.unwrap().expect("created");
        assert_eq!(t.status, ThreadStatus::Busy);
        assert_eq!(
            t.metadata,
            map(json!({"graph_id": "g", "assistant_id": "a"}))
        );
        assert_eq!(
            (t.config.clone(), t.values.clone(), t.interrupts.clone()),
            (json!({}), None, json!({}))
        );
        assert_eq!(s.get_run(r.run_id).await.unwrap(), Some(r));
    }

    pub async fn insert_run_reject(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r1 = run(tid, at(-10.0), MultitaskStrategy::Reject);
        assert!(
            s.insert_run(&insert(&r1, json!({"first": 1})))
                .await
                .unwrap()
                .is_empty()
        );
        let before = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(before.status, ThreadStatus::Busy);
        assert_eq!(before.metadata, map(json!({"first": 1})));

        let r2 = run(tid, at(-5.0), MultitaskStrategy::Reject);
        let err = s
            .insert_run(&insert(&r2, json!({"second": 2})))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Busy(t) if t == tid), "{err}");
        assert!(
            s.get_run(r2.run_id).await.unwrap().is_none(),
            "nothing written"
        );
        assert_eq!(s.get_thread(tid).await.unwrap(), Some(before));
        assert_eq!(s.list_runs(tid, None, 10, 0).await.unwrap().len(), 1);

        // Also busy while the first run is running; free again once it finished.
        claim(&s, "w").await;
        assert!(matches!(
            s.insert_run(&insert(&r2, json!({}))).await,
            Err(StoreError::Busy(_))
        ));
        s.finish_run(r1.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();
        assert!(
            s.insert_run(&insert(&r2, json!({})))
                .await
                .unwrap()
                .is_empty()
        );
    }

    pub async fn insert_run_interrupt(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r1 = add_run(&s, tid, -10.0).await;
        assert_eq!(claim(&s, "w1").await.run_id, r1.run_id);
        let r2 = add_run(&s, tid, -5.0).await;
        let r3 = run(tid, at(-1.0), MultitaskStrategy::Interrupt);
        let affected = s.insert_run(&insert(&r3, json!({"k": "v"}))).await.unwrap();
        assert_eq!(ids(&affected, |r| r.run_id), vec![r1.run_id, r2.run_id]);

        let r2_now = s.get_run(r2.run_id).await.unwrap().expect("kept");
        assert_eq!(r2_now.status, RunStatus::Interrupted);
        let r1_now = s.get_run(r1.run_id).await.unwrap().expect("kept");
        assert_eq!(
            r1_now.status,
            RunStatus::Running,
            "running runs only get the flag"
        );
        let state = s.renew_lease(r1.run_id, "w1", LEASE).await.unwrap();
        assert_eq!(
            state,
            LeaseState::Held {
                cancel: Some(CancelAction::Interrupt)
            }
        );

        let inflight = s.inflight_runs(tid).await.unwrap();
        assert_eq!(ids(&inflight, |r| r.run_id), vec![r1.run_id, r3.run_id]);
        let t = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(t.status, ThreadStatus::Busy);
        assert_eq!(t.metadata, map(json!({"k": "v"})));
    }

    pub async fn insert_run_rollback(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r1 = add_run(&s, tid, -10.0).await;
        claim(&s, "w1").await;
        let r2 = add_run(&s, tid, -5.0).await;
        let r3 = run(tid, at(-1.0), MultitaskStrategy::Rollback);
        let affected = s.insert_run(&insert(&r3, json!({}))).await.unwrap();
        assert_eq!(ids(&affected, |r| r.run_id), vec![r1.run_id, r2.run_id]);
        assert!(
            s.get_run(r2.run_id).await.unwrap().is_none(),
            "pending run deleted"
        );
        let state = s.renew_lease(r1.run_id, "w1", LEASE).await.unwrap();
        assert_eq!(
            state,
            LeaseState::Held {
                cancel: Some(CancelAction::Rollback)
            }
        );
        let inflight = s.inflight_runs(tid).await.unwrap();
        assert_eq!(ids(&inflight, |r| r.run_id), vec![r1.run_id, r3.run_id]);
    }

    pub async fn insert_run_enqueue(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r1 = add_run(&s, tid, -10.0).await;
        let r2 = run(tid, at(-5.0), MultitaskStrategy::Enqueue);
        assert!(
            s.insert_run(&insert(&r2, json!({})))
                .await
                .unwrap()
                .is_empty()
        );
        let inflight = s.inflight_runs(tid).await.unwrap();
        assert_eq!(inflight, vec![r1, r2]);
    }

    pub async fn run_statuses_in_one_call(s: Arc<dyn Store>) {
        assert!(s.run_statuses(&[]).await.unwrap().is_empty());
        let (t1, t2) = (new_thread(&s).await, new_thread(&s).await);
        let pending = add_run(&s, t1, -5.0).await;
        let running = add_run(&s, t2, -10.0).await;
        assert_eq!(claim(&s, "w").await.run_id, running.run_id);
        let missing = Uuid::new_v4().into();
        let mut got = s
            .run_statuses(&[pending.run_id, missing, running.run_id, pending.run_id])
            .await
            .unwrap();
        got.sort_by_key(|(id, _)| *id != pending.run_id);
        assert_eq!(
            got,
            vec![
                (pending.run_id, RunStatus::Pending),
                (running.run_id, RunStatus::Running)
            ]
        );
    }

    pub async fn runs_listing_and_delete(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let other = new_thread(&s).await;
        let r1 = add_run(&s, tid, -30.0).await;
        let r2 = add_run(&s, tid, -20.0).await;
        let r3 = add_run(&s, tid, -10.0).await;
        add_run(&s, other, -40.0).await;
        assert_eq!(claim(&s, "w").await.thread_id, other);
        assert_eq!(claim(&s, "w").await.run_id, r1.run_id);
        s.finish_run(r1.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();

        let list = s.list_runs(tid, None, 10, 0).await.unwrap();
        assert_eq!(
            ids(&list, |r| r.run_id),
            vec![r3.run_id, r2.run_id, r1.run_id]
        );
        let list = s.list_runs(tid, None, 1, 1).await.unwrap();
        assert_eq!(ids(&list, |r| r.run_id), vec![r2.run_id]);
        let list = s
            .list_runs(tid, Some(RunStatus::Success), 10, 0)
            .await
            .unwrap();
        assert_eq!(ids(&list, |r| r.run_id), vec![r1.run_id]);
        assert_eq!(list[0].status, RunStatus::Success);
        let list = s
            .list_runs(tid, Some(RunStatus::Pending), 10, 0)
            .await
            .unwrap();
        assert_eq!(ids(&list, |r| r.run_id), vec![r3.run_id, r2.run_id]);
        let inflight = s.inflight_runs(tid).await.unwrap();
        assert_eq!(
            inflight,
            vec![r2.clone(), r3.clone()],
            "oldest first, unchanged rows"
        );

        s.append_events(&[event(&r1, 1, 0), event(&r1, 2, 0)])
            .await
            .unwrap();
        assert!(s.delete_run(r1.run_id).await.unwrap());
        assert!(!s.delete_run(r1.run_id).await.unwrap());
        assert!(s.get_run(r1.run_id).await.unwrap().is_none());
        assert!(
            s.run_events_after(r1.run_id, None)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(s.get_run(r2.run_id).await.unwrap(), Some(r2));
    }

    pub async fn claim_order_and_one_running_per_thread(s: Arc<dyn Store>) {
        let ta = new_thread(&s).await;
        let tb = new_thread(&s).await;
        let a1 = add_run(&s, ta, -30.0).await;
        let b1 = add_run(&s, tb, -20.0).await;
        let a2 = add_run(&s, ta, -10.0).await;
        let b2 = add_run(&s, tb, -5.0).await;

        let before = Timestamp::now();
        let lease = s
            .claim_run("w1", LEASE, 3)
            .await
            .unwrap()
            .expect("claimable");
        assert_eq!(lease.run.run_id, a1.run_id, "oldest first");
        assert_eq!(lease.run.status, RunStatus::Running);
        assert_eq!(lease.fence.worker, "w1");
        assert!(lease.expires_at >= before.plus_secs(29.0) && lease.expires_at <= at(31.0));
        assert_eq!(
            s.get_run(a1.run_id).await.unwrap().expect("kept").status,
            RunStatus::Running
        );

        assert_eq!(claim(&s, "w2").await.run_id, b1.run_id, "a2 waits for a1");
        assert!(
            s.claim_run("w3", LEASE, 3).await.unwrap().is_none(),
            "both threads busy"
        );

        s.finish_run(a1.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();
        assert_eq!(claim(&s, "w3").await.run_id, a2.run_id);
        s.finish_run(b1.run_id, None, &RunEnd::Finished(RunStatus::Error), None)
            .await
            .unwrap();
        assert_eq!(claim(&s, "w3").await.run_id, b2.run_id);
        assert!(s.claim_run("w3", LEASE, 3).await.unwrap().is_none());
    }

    pub async fn claim_skips_future_runs(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let other = new_thread(&s).await;
        let later = add_run(&s, tid, 3600.0).await;
        assert!(s.claim_run("w", LEASE, 3).await.unwrap().is_none());
        let now = add_run(&s, other, -1.0).await;
        assert_eq!(claim(&s, "w").await.run_id, now.run_id);
        assert!(s.claim_run("w", LEASE, 3).await.unwrap().is_none());
        let still = s.get_run(later.run_id).await.unwrap().expect("kept");
        assert_eq!(still.status, RunStatus::Pending);
    }

    pub async fn renew_lease_ownership(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r = add_run(&s, tid, -1.0).await;
        assert_eq!(
            s.renew_lease(r.run_id, "w1", LEASE).await.unwrap(),
            LeaseState::Lost,
            "pending"
        );
        claim(&s, "w1").await;
        let held = LeaseState::Held { cancel: None };
        assert_eq!(s.renew_lease(r.run_id, "w1", LEASE).await.unwrap(), held);
        assert_eq!(
            s.renew_lease(r.run_id, "w2", LEASE).await.unwrap(),
            LeaseState::Lost
        );
        let unknown = s
            .renew_lease(Uuid::new_v4().into(), "w1", LEASE)
            .await
            .unwrap();
        assert_eq!(unknown, LeaseState::Lost);
        // A renewal pushes the expiry forward: the run no longer counts as expired.
        s.renew_lease(r.run_id, "w1", Duration::from_secs(3600))
            .await
            .unwrap();
        assert!(
            s.claim_run("w2", LEASE, 3).await.unwrap().is_none(),
            "not lapsed"
        );
        s.finish_run(r.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();
        assert_eq!(
            s.renew_lease(r.run_id, "w1", LEASE).await.unwrap(),
            LeaseState::Lost
        );
    }

    pub async fn finish_run_thread_status(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r1 = add_run(&s, tid, -20.0).await;
        let r2 = add_run(&s, tid, -10.0).await;
        claim(&s, "w").await;
        let sum1 = summary(ThreadStatus::Idle, json!({"x": 1}));
        s.finish_run(
            r1.run_id,
            None,
            &RunEnd::Finished(RunStatus::Success),
            Some(&sum1),
        )
        .await
        .unwrap();
        let t = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(t.status, ThreadStatus::Busy, "r2 is still pending");
        assert_eq!(t.values, Some(json!({"x": 1})));
        let r1_now = s.get_run(r1.run_id).await.unwrap().expect("kept");
        assert_eq!(r1_now.status, RunStatus::Success);
        assert!(r1_now.updated_at >= r1.updated_at);

        assert_eq!(claim(&s, "w").await.run_id, r2.run_id);
        let sum2 = ThreadSummary {
            status: ThreadStatus::Interrupted,
            values: Some(json!({"x": 2})),
            error: None,
            interrupts: json!({"task-1": [{"value": "approve?"}]}),
        };
        s.finish_run(
            r2.run_id,
            None,
            &RunEnd::Finished(RunStatus::Interrupted),
            Some(&sum2),
        )
        .await
        .unwrap();
        let t2 = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(t2.status, ThreadStatus::Interrupted);
        assert_eq!(
            (t2.values.clone(), t2.interrupts.clone()),
            (sum2.values.clone(), sum2.interrupts.clone())
        );
        assert!(t2.state_updated_at >= t.state_updated_at);
        assert_eq!(
            s.get_run(r2.run_id).await.unwrap().expect("kept").status,
            RunStatus::Interrupted
        );

        let r3 = add_run(&s, tid, -1.0).await;
        claim(&s, "w").await;
        let sum3 = ThreadSummary {
            status: ThreadStatus::Error,
            values: None,
            error: Some(RunFailure {
                error: "Boom".into(),
                message: "bad".into(),
            }),
            interrupts: json!({}),
        };
        s.finish_run(
            r3.run_id,
            None,
            &RunEnd::Finished(RunStatus::Error),
            Some(&sum3),
        )
        .await
        .unwrap();
        let t3 = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(
            (t3.status, t3.error.clone()),
            (ThreadStatus::Error, sum3.error.clone())
        );

        let r4 = add_run(&s, tid, -1.0).await;
        claim(&s, "w").await;
        s.finish_run(r4.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();
        let t4 = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(
            t4.status,
            ThreadStatus::Idle,
            "no summary: idle, state untouched"
        );
        assert_eq!(t4.error, sum3.error);

        let err = s
            .finish_run(Uuid::new_v4().into(), None, &RunEnd::RolledBack, None)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::NotFound("run")), "{err}");
    }

    pub async fn finish_run_rollback_deletes_writes(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r0 = add_run(&s, tid, -20.0).await;
        claim(&s, "w").await;
        s.put_checkpoint(&checkpoint(tid, "", 1, None, Some(r0.run_id)), None, None)
            .await
            .unwrap();
        s.append_events(&[event(&r0, 1, 0)]).await.unwrap();
        s.finish_run(r0.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();

        let r1 = add_run(&s, tid, -10.0).await;
        let r2 = add_run(&s, tid, -5.0).await;
        claim(&s, "w").await;
        s.put_checkpoint(
            &checkpoint(tid, "", 2, Some(1), Some(r1.run_id)),
            None,
            None,
        )
        .await
        .unwrap();
        s.put_checkpoint(
            &checkpoint(tid, "researcher:1", 3, None, Some(r1.run_id)),
            None,
            None,
        )
        .await
        .unwrap();
        s.append_events(&[event(&r1, 2, 0), event(&r1, 2, 1)])
            .await
            .unwrap();

        s.finish_run(r1.run_id, None, &RunEnd::RolledBack, None)
            .await
            .unwrap();
        assert!(s.get_run(r1.run_id).await.unwrap().is_none());
        assert!(s.get_checkpoint(tid, "", cp_id(2)).await.unwrap().is_none());
        assert!(
            s.get_checkpoint(tid, "researcher:1", cp_id(3))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            s.run_events_after(r1.run_id, None)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            s.get_checkpoint(tid, "", cp_id(1)).await.unwrap().is_some(),
            "other runs' writes stay"
        );
        assert_eq!(s.run_events_after(r0.run_id, None).await.unwrap().len(), 1);
        assert_eq!(
            s.get_thread(tid).await.unwrap().expect("exists").status,
            ThreadStatus::Busy
        );

        claim(&s, "w").await;
        let sum = summary(ThreadStatus::Idle, json!({"y": 1}));
        s.finish_run(r2.run_id, None, &RunEnd::RolledBack, Some(&sum))
            .await
            .unwrap();
        let t = s.get_thread(tid).await.unwrap().expect("exists");
        assert_eq!(
            (t.status, t.values),
            (ThreadStatus::Idle, Some(json!({"y": 1})))
        );
        assert_eq!(
            ids(&s.list_runs(tid, None, 10, 0).await.unwrap(), |r| r.run_id),
            vec![r0.run_id]
        );
    }

    /// A lapsed lease (by the database's clock) is taken over by another worker as a new
    /// attempt; the old claim's writes are fenced off; a hand-back lapses at once and does not
    /// count; after `max_attempts` the run is given up with the reason on its thread.
    pub async fn lapsed_leases_are_taken_over_then_given_up(s: Arc<dyn Store>) {
        let (t1, t2) = (new_thread(&s).await, new_thread(&s).await);
        let r1 = add_run(&s, t1, -30.0).await;
        let r2 = add_run(&s, t2, -20.0).await;
        let short = Duration::from_millis(1000);
        let first = s.claim_run("w1", short, 3).await.unwrap().expect("r1");
        assert_eq!((first.run.run_id, first.fence.attempt), (r1.run_id, 1));
        let other = s
            .claim_run("w3", Duration::from_secs(3600), 3)
            .await
            .unwrap();
        assert_eq!(other.map(|l| l.run.run_id), Some(r2.run_id));
        assert!(
            s.claim_run("w2", short, 3).await.unwrap().is_none(),
            "nothing lapsed yet"
        );
        tokio::time::sleep(Duration::from_millis(1200)).await;

        assert!(
            s.fail_expired_runs(3).await.unwrap().is_empty(),
            "attempts left"
        );
        assert!(
            s.claim_run("w1", short, 3).await.unwrap().is_none(),
            "a worker does not take over its own run: it still executes it"
        );
        let second = s
            .claim_run("w2", short, 3)
            .await
            .unwrap()
            .expect("taken over");
        assert_eq!(second.run.run_id, r1.run_id);
        assert_eq!(second.run.status, RunStatus::Running);
        assert_eq!(
            (second.fence.worker.as_str(), second.fence.attempt),
            ("w2", 2)
        );

        // The first claim can no longer write anything for the run.
        let cp = checkpoint(t1, "", 1, None, Some(r1.run_id));
        let refused = s.put_checkpoint(&cp, None, Some(&first.fence)).await;
        assert!(
            matches!(refused, Err(StoreError::LeaseLost(_))),
            "{refused:?}"
        );
        assert!(s.latest_checkpoint(t1, "").await.unwrap().is_none());
        let end = RunEnd::Finished(RunStatus::Success);
        let refused = s
            .finish_run(r1.run_id, Some(&first.fence), &end, None)
            .await;
        assert!(
            matches!(refused, Err(StoreError::LeaseLost(_))),
            "{refused:?}"
        );
        assert_eq!(
            s.renew_lease(r1.run_id, "w1", LEASE).await.unwrap(),
            LeaseState::Lost
        );
        assert!(!s.release_lease(&first.fence).await.unwrap());
        s.put_checkpoint(&cp, None, Some(&second.fence))
            .await
            .unwrap();
        assert_eq!(
            s.get_run(r1.run_id).await.unwrap().expect("kept").status,
            RunStatus::Running
        );

        // Handed back: claimable at once, and the attempt is given back.
        assert!(s.release_lease(&second.fence).await.unwrap());
        let third = s
            .claim_run("w4", short, 3)
            .await
            .unwrap()
            .expect("handed back");
        assert_eq!((third.run.run_id, third.fence.attempt), (r1.run_id, 2));

        // Lapsed again with max_attempts = 2: nobody may take it; the sweep gives it up.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(s.claim_run("w5", short, 2).await.unwrap().is_none());
        let failed = s.fail_expired_runs(2).await.unwrap();
        assert_eq!(ids(&failed, |r| r.run_id), vec![r1.run_id]);
        assert!(failed.iter().all(|r| r.status == RunStatus::Error));
        let lost = RunFailure {
            error: "WorkerLost".into(),
            message: "the run was given up after 2 attempts: each time, the worker running it \
                      stopped before it finished (max_attempts)"
                .into(),
        };
        let th1 = s.get_thread(t1).await.unwrap().expect("exists");
        assert_eq!((th1.status, th1.error), (ThreadStatus::Error, Some(lost)));
        assert_eq!(
            s.get_run(r2.run_id).await.unwrap().expect("kept").status,
            RunStatus::Running,
            "a live lease is left alone"
        );
        assert!(
            s.fail_expired_runs(2).await.unwrap().is_empty(),
            "only once"
        );
        let fenced_end = s
            .finish_run(r1.run_id, Some(&third.fence), &end, None)
            .await;
        assert!(matches!(fenced_end, Err(StoreError::LeaseLost(_))));
    }

    /// Threads past their ttl (minutes since their last update) go with everything on them,
    /// unless a run is in flight; stored events of runs that ended before a cutoff go.
    pub async fn retention(s: Arc<dyn Store>) {
        let mut old = thread(json!({}), None, ThreadStatus::Idle, at(-600.0));
        old.ttl_minutes = Some(5.0);
        s.create_thread(&old, IfExists::Raise).await.unwrap();
        let mut busy = thread(json!({}), None, ThreadStatus::Idle, at(-600.0));
        busy.ttl_minutes = Some(5.0);
        s.create_thread(&busy, IfExists::Raise).await.unwrap();
        add_run(&s, busy.thread_id, -1.0).await;
        let keep = thread(json!({}), None, ThreadStatus::Idle, at(-600.0));
        s.create_thread(&keep, IfExists::Raise).await.unwrap();
        let mut young = thread(json!({}), None, ThreadStatus::Idle, at(-60.0));
        young.ttl_minutes = Some(5.0);
        s.create_thread(&young, IfExists::Raise).await.unwrap();
        // A patch counts as an update and can set a ttl.
        let patched = s
            .patch_thread(keep.thread_id, &JsonMap::new(), Some(0.001), at(-60.0))
            .await
            .unwrap()
            .expect("patched");
        assert_eq!(patched.ttl_minutes, Some(0.001));

        let deleted = s.delete_expired_threads(at(0.0)).await.unwrap();
        assert_eq!(sorted(deleted), sorted(vec![old.thread_id, keep.thread_id]));
        assert!(s.get_thread(old.thread_id).await.unwrap().is_none());
        assert!(s.get_thread(young.thread_id).await.unwrap().is_some());
        let later = s.delete_expired_threads(at(600.0)).await.unwrap();
        assert_eq!(later, vec![young.thread_id]);
        assert!(
            s.get_thread(busy.thread_id).await.unwrap().is_some(),
            "a run in flight"
        );

        let t = new_thread(&s).await;
        let r = add_run(&s, t, -1.0).await;
        claim(&s, "w").await;
        s.append_events(&[event(&r, 1, 0)]).await.unwrap();
        assert_eq!(
            s.delete_events_ended_before(at(60.0)).await.unwrap(),
            0,
            "running"
        );
        s.finish_run(r.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();
        assert_eq!(
            s.delete_events_ended_before(at(-60.0)).await.unwrap(),
            0,
            "too recent"
        );
        assert!(s.delete_events_ended_before(at(60.0)).await.unwrap() > 0);
        assert!(s.last_event_id(r.run_id).await.unwrap().is_none());
    }

    pub async fn cancel_runs(s: Arc<dyn Store>) {
        let (t, u, v) = (
            new_thread(&s).await,
            new_thread(&s).await,
            new_thread(&s).await,
        );
        let r4 = add_run(&s, v, -40.0).await;
        claim(&s, "w").await;
        s.finish_run(r4.run_id, None, &RunEnd::Finished(RunStatus::Success), None)
            .await
            .unwrap();
        let r1 = add_run(&s, t, -30.0).await;
        claim(&s, "w").await;
        let r2 = add_run(&s, t, -20.0).await;
        let r3 = add_run(&s, u, 3600.0).await;

        let asked = [
            r1.run_id,
            r2.run_id,
            r4.run_id,
            Uuid::new_v4().into(),
            r2.run_id,
        ];
        let affected = s
            .cancel_runs(&asked, CancelAction::Interrupt)
            .await
            .unwrap();
        assert_eq!(
            sorted(ids(&affected, |r| r.run_id)),
            sorted(vec![r1.run_id, r2.run_id])
        );
        assert_eq!(
            s.get_run(r2.run_id).await.unwrap().expect("kept").status,
            RunStatus::Interrupted
        );
        assert_eq!(
            s.get_run(r4.run_id).await.unwrap().expect("kept").status,
            RunStatus::Success
        );
        assert_eq!(
            s.get_run(r1.run_id).await.unwrap().expect("kept").status,
            RunStatus::Running
        );
        let state = s.renew_lease(r1.run_id, "w", LEASE).await.unwrap();
        assert_eq!(
            state,
            LeaseState::Held {
                cancel: Some(CancelAction::Interrupt)
            }
        );
        assert_eq!(
            s.get_thread(t).await.unwrap().expect("exists").status,
            ThreadStatus::Busy
        );

        let affected = s
            .cancel_runs(&[r3.run_id], CancelAction::Rollback)
            .await
            .unwrap();
        assert_eq!(affected, vec![r3.clone()]);
        assert!(s.get_run(r3.run_id).await.unwrap().is_none());
        let tu = s.get_thread(u).await.unwrap().expect("exists");
        assert_eq!(tu.status, ThreadStatus::Idle, "no run left in flight");
        assert!(
            s.cancel_runs(&[r3.run_id], CancelAction::Rollback)
                .await
                .unwrap()
                .is_empty()
        );
    }

    pub async fn checkpoints(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let other = new_thread(&s).await;
        let c1 = checkpoint(tid, "", 1, None, None);
        let c2 = checkpoint(tid, "", 2, Some(1), None);
        let c3 = checkpoint(tid, "", 3, Some(2), None);
        let mut c4 = checkpoint(tid, "", 4, Some(2), None);
        c4.source = "fork".into();
        c4.metadata = map(json!({"source": "fork", "step": 4}));
        c4.next = vec![];
        let s1 = checkpoint(tid, "researcher:abc", 5, None, None);
        let o1 = checkpoint(other, "", 9, None, None);
        for c in [&c3, &c1, &c4, &c2, &s1, &o1] {
            s.put_checkpoint(c, None, None).await.unwrap();
        }
        assert_eq!(
            s.get_checkpoint(tid, "", cp_id(2)).await.unwrap(),
            Some(c2.clone())
        );
        assert!(
            s.get_checkpoint(tid, "researcher:abc", cp_id(2))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            s.get_checkpoint(other, "", cp_id(2))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(
            s.latest_checkpoint(tid, "").await.unwrap(),
            Some(c4.clone())
        );
        assert_eq!(
            s.latest_checkpoint(tid, "researcher:abc").await.unwrap(),
            Some(s1.clone())
        );
        assert!(s.latest_checkpoint(tid, "nope").await.unwrap().is_none());

        let list = |q: CheckpointQuery| {
            let s = s.clone();
            async move {
                ids(&s.list_checkpoints(tid, &q).await.unwrap(), |c| {
                    c.checkpoint_id
                })
            }
        };
        let all = vec![cp_id(4), cp_id(3), cp_id(2), cp_id(1)];
        assert_eq!(
            list(CheckpointQuery::default()).await,
            all,
            "newest first; limit 0 = all"
        );
        let q = CheckpointQuery {
            before: Some(cp_id(3)),
            ..CheckpointQuery::default()
        };
        assert_eq!(list(q).await, vec![cp_id(2), cp_id(1)], "strictly before");
        let q = CheckpointQuery {
            limit: 2,
            ..CheckpointQuery::default()
        };
        assert_eq!(list(q).await, all[..2].to_vec());
        let q = CheckpointQuery {
            before: Some(cp_id(4)),
            limit: 1,
            ..CheckpointQuery::default()
        };
        assert_eq!(list(q).await, vec![cp_id(3)]);
        let q = CheckpointQuery {
            metadata: map(json!({"source": "fork"})),
            ..CheckpointQuery::default()
        };
        assert_eq!(list(q).await, vec![cp_id(4)]);
        let q = CheckpointQuery {
            metadata: map(json!({"step": 2})),
            ..CheckpointQuery::default()
        };
        assert_eq!(list(q).await, vec![cp_id(2)]);
        let q = CheckpointQuery {
            checkpoint_ns: "researcher:abc".into(),
            ..CheckpointQuery::default()
        };
        assert_eq!(list(q).await, vec![cp_id(5)]);

        let lineage = s.checkpoint_lineage(tid, "", cp_id(3)).await.unwrap();
        assert_eq!(
            lineage,
            vec![c1.clone(), c2.clone(), c3.clone()],
            "root first"
        );
        let fork = s.checkpoint_lineage(tid, "", cp_id(4)).await.unwrap();
        assert_eq!(
            ids(&fork, |c| c.checkpoint_id),
            vec![cp_id(1), cp_id(2), cp_id(4)]
        );
        assert_eq!(
            s.checkpoint_lineage(tid, "", cp_id(1)).await.unwrap(),
            vec![c1]
        );
        assert!(
            s.checkpoint_lineage(tid, "", cp_id(77))
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            s.checkpoint_lineage(tid, "researcher:abc", cp_id(3))
                .await
                .unwrap()
                .is_empty()
        );

        let mut c3b = c3.clone();
        c3b.metadata = map(json!({"source": "update"}));
        c3b.writes = json!([["x", 1]]);
        s.put_checkpoint(&c3b, None, None).await.unwrap();
        assert_eq!(
            s.get_checkpoint(tid, "", cp_id(3)).await.unwrap(),
            Some(c3b),
            "put overwrites"
        );
        assert_eq!(list(CheckpointQuery::default()).await.len(), 4);
    }

    pub async fn large_strings_are_stored_once(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let text: String = (0..2000).map(|i| format!("finding {i}; ")).collect();
        let mut c1 = checkpoint(tid, "", 1, None, None);
        c1.writes = json!([["notes", [text]]]);
        s.put_checkpoint(&c1, None, None).await.unwrap();
        let one = s.checkpoint_bytes(tid).await.unwrap() as usize;
        assert!(one > text.len() && one < text.len() * 11 / 10, "{one} B");

        // Three more copies, one embedded in a longer string, one in a subgraph namespace.
        let mut c2 = checkpoint(tid, "", 2, Some(1), None);
        c2.writes = json!([
            ["raw_notes", [format!("Notes:\n{text}\nEnd.")]],
            ["messages", [{"type": "tool", "content": text}]],
        ]);
        let mut c3 = checkpoint(tid, "researcher:1", 3, None, None);
        c3.writes = json!([["compressed", text]]);
        s.put_checkpoint(&c2, None, None).await.unwrap();
        s.put_checkpoint(&c3, None, None).await.unwrap();
        let all = s.checkpoint_bytes(tid).await.unwrap() as usize;
        assert!(
            all - one < text.len() / 5,
            "three more copies of {} B cost {} B",
            text.len(),
            all - one
        );
        let read = s.get_checkpoint(tid, "", cp_id(2)).await.unwrap().unwrap();
        assert_eq!(read.writes, c2.writes);
        let lineage = s.checkpoint_lineage(tid, "", cp_id(2)).await.unwrap();
        assert_eq!(lineage[0].writes, c1.writes);

        // A copy carries the chunks; deleting the source leaves the copy whole.
        let to = ThreadId::new();
        s.copy_thread(tid, to, at(0.0)).await.unwrap().unwrap();
        assert_eq!(s.checkpoint_bytes(to).await.unwrap() as usize, all);
        assert!(s.delete_thread(tid).await.unwrap());
        assert_eq!(s.checkpoint_bytes(tid).await.unwrap(), 0);
        let copied = s
            .latest_checkpoint(to, "researcher:1")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(copied.writes, c3.writes);
    }

    pub async fn chunks_a_run_stored_are_not_sent_again(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let stored = StoredChunks::new(tid);
        let text: String = (0..2000).map(|i| format!("source {i}; ")).collect();
        let mut c1 = checkpoint(tid, "", 1, None, None);
        c1.writes = json!([["notes", [text]]]);
        s.put_checkpoint(&c1, Some(&stored), None).await.unwrap();
        let one = s.checkpoint_bytes(tid).await.unwrap() as usize;

        // The second write sends only the chunks around the embedding, yet reads back whole.
        let mut c2 = checkpoint(tid, "researcher:1", 2, None, None);
        c2.writes = json!([
            ["raw_notes", [format!("Notes:\n{text}\nEnd.")]],
            ["again", text]
        ]);
        s.put_checkpoint(&c2, Some(&stored), None).await.unwrap();
        let read = s.latest_checkpoint(tid, "researcher:1").await.unwrap();
        assert_eq!(read.map(|c| c.writes), Some(c2.writes.clone()));
        let two = s.checkpoint_bytes(tid).await.unwrap() as usize;
        assert!(two - one < text.len() / 5, "{one} B, then {two} B");

        // What one thread stored says nothing about another: its chunks are all sent.
        let other = new_thread(&s).await;
        let mut c3 = checkpoint(other, "", 3, None, None);
        c3.writes = c2.writes.clone();
        s.put_checkpoint(&c3, Some(&stored), None).await.unwrap();
        let read = s.get_checkpoint(other, "", cp_id(3)).await.unwrap();
        assert_eq!(read.map(|c| c.writes), Some(c2.writes));
    }

    pub async fn events(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let r = run(tid, at(0.0), MultitaskStrategy::Enqueue);
        let other = run(tid, at(0.0), MultitaskStrategy::Enqueue);
        assert_eq!(s.last_event_id(r.run_id).await.unwrap(), None);
        s.append_events(&[]).await.unwrap();
        s.append_events(&[event(&r, 5, 0), event(&r, 3, 1), event(&other, 4, 0)])
            .await
            .unwrap();
        s.append_events(&[event(&r, 3, 0), event(&r, 5, 2), event(&r, 10, 0)])
            .await
            .unwrap();
        let after = |a: Option<(i64, i64)>| {
            let s = s.clone();
            async move {
                let id = a.map(|(ms, seq)| EventId { ms, seq });
                let got = s.run_events_after(r.run_id, id).await.unwrap();
                got.iter().map(|e| (e.id.ms, e.id.seq)).collect::<Vec<_>>()
            }
        };
        let all = vec![(3, 0), (3, 1), (5, 0), (5, 2), (10, 0)];
        assert_eq!(after(None).await, all, "ordered numerically by (ms, seq)");
        let newest = |run: RunId| {
            let s = s.clone();
            async move {
                s.last_event_id(run)
                    .await
                    .unwrap()
                    .map(|id| (id.ms, id.seq))
            }
        };
        assert_eq!(newest(r.run_id).await, Some((10, 0)));
        assert_eq!(newest(other.run_id).await, Some((4, 0)));
        assert_eq!(
            after(Some((3, 0))).await,
            all[1..].to_vec(),
            "strictly after"
        );
        assert_eq!(after(Some((3, 1))).await, all[2..].to_vec());
        assert_eq!(after(Some((4, 99))).await, all[2..].to_vec());
        assert_eq!(after(Some((5, 1))).await, all[3..].to_vec());
        assert_eq!(after(Some((10, 0))).await, vec![]);
        let full = s
            .run_events_after(r.run_id, Some(EventId { ms: 5, seq: 0 }))
            .await
            .unwrap();
        assert_eq!(full, vec![event(&r, 5, 2), event(&r, 10, 0)]);
        // A retried flush re-sends frames already stored: they are kept once, unchanged.
        let mut again = event(&r, 3, 0);
        again.data = "{\"changed\":true}".into();
        s.append_events(&[again, event(&r, 11, 0)]).await.unwrap();
        let stored = s.run_events_after(r.run_id, None).await.unwrap();
        assert_eq!(stored.len(), all.len() + 1);
        assert_eq!(newest(r.run_id).await, Some((11, 0)));
        assert_eq!(stored[0], event(&r, 3, 0), "the first write wins");
        // A burst larger than one INSERT batch keeps every frame, in order.
        let burst: Vec<StoredEvent> = (0..450).map(|i| event(&other, 100, i)).collect();
        s.append_events(&burst).await.unwrap();
        let got = s.run_events_after(other.run_id, None).await.unwrap();
        assert_eq!(got.len(), 451);
        assert_eq!(got[1..].to_vec(), burst);
    }

    pub async fn copy_thread(s: Arc<dyn Store>) {
        let mut t = thread(
            json!({"user": "u"}),
            Some(json!({"x": 1})),
            ThreadStatus::Idle,
            at(-100.0),
        );
        t.interrupts = json!({"a": []});
        s.create_thread(&t, IfExists::Raise).await.unwrap();
        let tid = t.thread_id;
        let r = add_run(&s, tid, -10.0).await;
        for c in [
            checkpoint(tid, "", 1, None, Some(r.run_id)),
            checkpoint(tid, "", 2, Some(1), Some(r.run_id)),
            checkpoint(tid, "sub:1", 3, None, Some(r.run_id)),
        ] {
            s.put_checkpoint(&c, None, None).await.unwrap();
        }
        let to = ThreadId::new();
        let now = at(0.0);
        let copy = s
            .copy_thread(tid, to, now)
            .await
            .unwrap()
            .expect("source exists");
        assert_eq!(copy.thread_id, to);
        assert_eq!((copy.created_at, copy.updated_at), (now, now));
        assert_eq!(copy.metadata, t.metadata);
        assert_eq!(copy.values, t.values);
        assert_eq!(copy.interrupts, t.interrupts);
        assert_ne!(copy.status, ThreadStatus::Busy, "the copy has no runs");
        assert_eq!(s.get_thread(to).await.unwrap(), Some(copy));

        let copied = s
            .list_checkpoints(to, &CheckpointQuery::default())
            .await
            .unwrap();
        assert_eq!(
            ids(&copied, |c| c.checkpoint_id),
            vec![cp_id(2), cp_id(1)],
            "same ids"
        );
        assert!(copied.iter().all(|c| c.thread_id == to));
        let mut expected = checkpoint(tid, "", 2, Some(1), Some(r.run_id));
        expected.thread_id = to;
        expected.created_at = copied[0].created_at;
        assert_eq!(copied[0], expected);
        assert_eq!(
            s.checkpoint_lineage(to, "", cp_id(2)).await.unwrap().len(),
            2
        );
        assert!(s.latest_checkpoint(to, "sub:1").await.unwrap().is_some());
        assert!(
            s.list_runs(to, None, 10, 0).await.unwrap().is_empty(),
            "runs are not copied"
        );
        assert_eq!(
            s.get_thread(tid).await.unwrap().expect("kept").status,
            ThreadStatus::Busy
        );
        assert_eq!(
            s.list_checkpoints(tid, &CheckpointQuery::default())
                .await
                .unwrap()
                .len(),
            2
        );

        assert!(
            s.copy_thread(Uuid::new_v4().into(), Uuid::new_v4().into(), now)
                .await
                .unwrap()
                .is_none()
        );
        let err = s.copy_thread(tid, to, now).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict("thread")), "{err}");
    }

    pub async fn task_calls_are_kept_until_forgotten(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let other = new_thread(&s).await;
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let call = |task_id: Uuid, key: &str, result: Value| TaskCall {
            task_id,
            key: key.to_owned(),
            result: result.to_string(),
        };
        // A key recorded twice keeps its first result, within one batch and across batches.
        s.put_task_calls(
            tid,
            &[
                call(a, "model:1", json!({"answer": 1})),
                call(a, "model:1", json!({"answer": 2})),
            ],
        )
        .await
        .unwrap();
        s.put_task_calls(
            tid,
            &[
                call(a, "model:1", json!({"answer": 3})),
                call(a, "tool:x", json!("found")),
                call(b, "model:1", json!({"answer": 3})),
            ],
        )
        .await
        .unwrap();
        s.put_task_calls(other, &[call(c, "model:1", json!(4))])
            .await
            .unwrap();
        s.put_task_calls(tid, &[]).await.unwrap();
        let mut calls = s.task_calls(tid, a).await.unwrap();
        calls.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            calls,
            vec![
                ("model:1".to_owned(), json!({"answer": 1})),
                ("tool:x".to_owned(), json!("found"))
            ]
        );
        // Another thread's task is not read through this thread.
        assert!(s.task_calls(tid, c).await.unwrap().is_empty());
        s.forget_task_calls(tid, &[a, c]).await.unwrap();
        assert!(s.task_calls(tid, a).await.unwrap().is_empty());
        assert_eq!(s.task_calls(tid, b).await.unwrap().len(), 1);
        assert_eq!(
            s.task_calls(other, c).await.unwrap().len(),
            1,
            "other thread kept"
        );
        s.forget_task_calls(tid, &[]).await.unwrap();
        assert!(s.delete_thread(other).await.unwrap());
        assert!(s.task_calls(other, c).await.unwrap().is_empty());
    }

    pub async fn delete_thread_cascades(s: Arc<dyn Store>) {
        let tid = new_thread(&s).await;
        let keep = new_thread(&s).await;
        let mut runs = Vec::new();
        for t in [tid, keep] {
            let r = add_run(&s, t, -10.0).await;
            s.put_checkpoint(&checkpoint(t, "", 1, None, Some(r.run_id)), None, None)
                .await
                .unwrap();
            s.put_checkpoint(&checkpoint(t, "ns:1", 2, None, Some(r.run_id)), None, None)
                .await
                .unwrap();
            s.append_events(&[event(&r, 1, 0)]).await.unwrap();
            runs.push(r);
        }
        claim(&s, "w").await;
        assert!(s.delete_thread(tid).await.unwrap());
        assert!(s.get_thread(tid).await.unwrap().is_none());
        assert!(s.get_run(runs[0].run_id).await.unwrap().is_none());
        assert!(s.latest_checkpoint(tid, "").await.unwrap().is_none());
        assert!(s.latest_checkpoint(tid, "ns:1").await.unwrap().is_none());
        assert!(
            s.run_events_after(runs[0].run_id, None)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(!s.delete_thread(tid).await.unwrap());

        assert!(s.get_thread(keep).await.unwrap().is_some());
        assert!(s.get_run(runs[1].run_id).await.unwrap().is_some());
        assert!(s.latest_checkpoint(keep, "ns:1").await.unwrap().is_some());
        assert_eq!(
            s.run_events_after(runs[1].run_id, None)
                .await
                .unwrap()
                .len(),
            1
        );
    }

    pub async fn concurrent_claims(s: Arc<dyn Store>) {
        use std::collections::{HashMap, HashSet};
        use std::sync::Mutex;
        use std::sync::atomic::{AtomicUsize, Ordering};

        const PER_THREAD: usize = 8;
        let threads = [
            new_thread(&s).await,
            new_thread(&s).await,
            new_thread(&s).await,
        ];
        let mut created: HashMap<RunId, Timestamp> = HashMap::new();
        for i in 0..PER_THREAD {
            for (j, t) in threads.iter().enumerate() {
                let r = add_run(&s, *t, -100.0 + (i * 3 + j) as f64).await;
                created.insert(r.run_id, r.created_at);
            }
        }
        let total = created.len();

        // Wave 1: many simultaneous claims, nobody finishes: exactly one run per thread.
        let claims: Vec<_> = (0..16)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(async move { s.claim_run(&format!("w{i}"), LEASE, 3).await.unwrap() })
            })
            .collect();
        let mut first = Vec::new();
        for c in claims {
            first.extend(c.await.unwrap());
        }
        let mut per_thread: Vec<ThreadId> = first.iter().map(|l| l.run.thread_id).collect();
        per_thread.sort();
        assert_eq!(per_thread, sorted(threads.to_vec()), "one claim per thread");
        for t in threads {
            let running = s
                .list_runs(t, Some(RunStatus::Running), 100, 0)
                .await
                .unwrap();
            assert_eq!(running.len(), 1);
        }

        // Wave 2: workers claim and finish until everything ran, checking the rule as they go.
        let held: Arc<Mutex<HashSet<ThreadId>>> = Arc::new(Mutex::new(HashSet::new()));
        let order: Arc<Mutex<HashMap<ThreadId, Vec<RunId>>>> = Arc::default();
        let done = Arc::new(AtomicUsize::new(0));
        for l in &first {
            order
                .lock()
                .unwrap()
                .entry(l.run.thread_id)
                .or_default()
                .push(l.run.run_id);
            s.finish_run(
                l.run.run_id,
                None,
                &RunEnd::Finished(RunStatus::Success),
                None,
            )
            .await
            .unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        }
        let workers: Vec<_> = (0..6)
            .map(|i| {
                let (s, held, order, done) = (s.clone(), held.clone(), order.clone(), done.clone());
                tokio::spawn(async move {
                    let worker = format!("worker-{i}");
                    for _ in 0..2000 {
                        if done.load(Ordering::SeqCst) == total {
                            return;
                        }
                        let Some(lease) = s.claim_run(&worker, LEASE, 3).await.unwrap() else {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            continue;
                        };
                        let (tid, rid) = (lease.run.thread_id, lease.run.run_id);
                        assert!(
                            held.lock().unwrap().insert(tid),
                            "two running runs on {tid}"
                        );
                        order.lock().unwrap().entry(tid).or_default().push(rid);
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        // Release before finishing: a new claim can only succeed after finish.
                        held.lock().unwrap().remove(&tid);
                        let end = RunEnd::Finished(RunStatus::Success);
                        s.finish_run(rid, None, &end, None).await.unwrap();
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                    panic!("worker gave up before all runs finished");
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), total);
        for (tid, runs) in order.lock().unwrap().iter() {
            assert_eq!(runs.len(), PER_THREAD);
            let times: Vec<_> = runs.iter().map(|r| created[r]).collect();
            let mut in_order = times.clone();
            in_order.sort();
            assert_eq!(times, in_order, "runs of {tid} started oldest first");
        }
        for t in threads {
            let th = s.get_thread(t).await.unwrap().expect("exists");
            assert_eq!(th.status, ThreadStatus::Idle);
            assert!(s.inflight_runs(t).await.unwrap().is_empty());
        }
    }

    /// Every searchable resource is filtered by owner, store items of two owners never meet,
    /// and a run cannot be put on another owner's thread.
    pub async fn owners_are_kept_apart(s: Arc<dyn Store>) {
        let (alice, bob) = (Owner::named("alice").unwrap(), Owner::named("bob").unwrap());
        let now = at(0.0);
        // Assistants: each sees their own plus system ones (no owner).
        let mut mine = assistant("g", "alice's", json!({}), now);
        mine.owner = Some(alice.clone());
        let mut system = assistant("g", "system", json!({}), now);
        system.owner = None;
        for a in [&mine, &system] {
            s.create_assistant(a, IfExists::Raise).await.unwrap();
        }
        let names = |who: &Owner| {
            let q = AssistantQuery {
                owner: who.clone(),
                limit: 10,
                ..Default::default()
            };
            let s = s.clone();
            async move {
                let mut n: Vec<String> = s
                    .search_assistants(&q)
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .map(|a| a.name)
                    .collect();
                n.sort();
                n
            }
        };
        assert_eq!(names(&alice).await, ["alice's", "system"]);
        assert_eq!(names(&bob).await, ["system"]);
        let stored = s.get_assistant(system.assistant_id).await.unwrap().unwrap();
        assert_eq!(stored.owner, None, "a system assistant stays ownerless");

        // Threads: search and count see only the owner's.
        let mut t = thread(json!({"k": 1}), None, ThreadStatus::Idle, now);
        t.owner = alice.clone();
        s.create_thread(&t, IfExists::Raise).await.unwrap();
        let count = |who: &Owner| {
            let q = ThreadQuery {
                owner: who.clone(),
                limit: 10,
                ..Default::default()
            };
            let s = s.clone();
            async move { s.search_threads(&q).await.unwrap().total }
        };
        assert_eq!(count(&alice).await, 1);
        assert_eq!(count(&bob).await, 0);
        assert_eq!(
            s.get_thread(t.thread_id).await.unwrap().unwrap().owner,
            alice
        );

        // Runs: only on the owner's thread; a thread created by a run is the creator's.
        let r = run(t.thread_id, now, MultitaskStrategy::Enqueue);
        let mut ins = insert(&r, json!({}));
        ins.owner = bob.clone();
        assert!(matches!(
            s.insert_run(&ins).await,
            Err(StoreError::NotFound("thread"))
        ));
        assert!(
            s.list_runs(t.thread_id, None, 10, 0)
                .await
                .unwrap()
                .is_empty()
        );
        ins.owner = alice.clone();
        s.insert_run(&ins).await.unwrap();
        let fresh = run(Uuid::new_v4().into(), now, MultitaskStrategy::Enqueue);
        let mut ins = insert(&fresh, json!({}));
        ins.owner = bob.clone();
        ins.create_thread = true;
        s.insert_run(&ins).await.unwrap();
        let made = s.get_thread(fresh.thread_id).await.unwrap().unwrap();
        assert_eq!(made.owner, bob);
        // A copy keeps its owner.
        let copy = s
            .copy_thread(t.thread_id, Uuid::new_v4().into(), now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(copy.owner, alice);

        // Store items: the same namespace and key are two items.
        let ns = Namespace::new(vec!["memories".into()]).unwrap();
        s.put_item(&alice, &ns, "k", &map(json!({"who": "alice"})), None, now)
            .await
            .unwrap();
        s.put_item(&bob, &ns, "k", &map(json!({"who": "bob"})), None, now)
            .await
            .unwrap();
        let got = s
            .get_item(&bob, &ns, "k", false, now)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.value["who"], "bob");
        assert!(s.delete_item(&alice, &ns, "k").await.unwrap());
        assert!(
            s.get_item(&alice, &ns, "k", false, now)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            s.get_item(&bob, &ns, "k", false, now)
                .await
                .unwrap()
                .is_some()
        );
        let q = ItemQuery {
            owner: alice.clone(),
            prefix: Namespace::prefix(vec![]).unwrap(),
            filter: vec![],
            limit: 10,
            offset: 0,
            refresh_ttl: false,
        };
        assert!(s.search_items(&q, now).await.unwrap().is_empty());
        let listing = NamespaceQuery {
            owner: alice.clone(),
            prefix: Namespace::prefix(vec![]).unwrap(),
            suffix: vec![],
            max_depth: None,
            limit: 10,
            offset: 0,
        };
        assert!(s.list_namespaces(&listing, now).await.unwrap().is_empty());

        // Storage: what an owner keeps, counted over every table it has rows in.
        assert!(s.owner_storage_bytes(&alice).await.unwrap() > 0);
        let nobody = Owner::named("nobody-at-all").unwrap();
        assert_eq!(s.owner_storage_bytes(&nobody).await.unwrap(), 0);

        // Spend: recorded under the owner given, whatever happens to the thread.
        s.record_spend(r.run_id, &alice, 1_000, 0.5, now)
            .await
            .unwrap();
        s.record_spend(r.run_id, &alice, 1_500, 0.75, now)
            .await
            .unwrap();
        assert_eq!(
            s.owner_spend_since(&alice, at(-60.0)).await.unwrap(),
            (1_500, 0.75)
        );
        assert_eq!(
            s.owner_spend_since(&bob, at(-60.0)).await.unwrap(),
            (0, 0.0)
        );
        assert_eq!(
            s.owner_spend_since(&alice, at(60.0)).await.unwrap(),
            (0, 0.0)
        );
        let mark = map(json!({"stopped_early": {"reason": "cap"}}));
        s.merge_run_metadata(r.run_id, &mark).await.unwrap();
        let got = s.get_run(r.run_id).await.unwrap().unwrap();
        assert_eq!(got.metadata["stopped_early"]["reason"], "cap");
        assert_eq!(s.delete_spend_before(at(60.0)).await.unwrap(), 1);

        // Crons: search and count by owner.
        let mut c = cron(None, mine.assistant_id, at(60.0));
        c.owner = alice.clone();
        s.create_cron(&c).await.unwrap();
        let crons = |who: &Owner| {
            let q = CronQuery {
                owner: who.clone(),
                limit: 10,
                ..Default::default()
            };
            let s = s.clone();
            async move { s.search_crons(&q).await.unwrap().total }
        };
        assert_eq!(crons(&alice).await, 1);
        assert_eq!(crons(&bob).await, 0);
        assert_eq!(s.get_cron(c.cron_id).await.unwrap().unwrap().owner, alice);
    }
}
