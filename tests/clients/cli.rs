//! The `deep-research` binary: `serve` prints where it listens and which store it uses, answers
//! `/ok`, and `healthcheck` reports on it; `eval --merge` joins result files measured in parts.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Starts `serve` with `args` and reads the line that says where it listens: (child, the
/// line, its port).
fn serve(args: &[&std::ffi::OsStr]) -> (std::process::Child, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["serve", "--no-auth", "--port", "0"])
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("DR_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    (child, line, port)
}

fn healthy(port: &str) -> bool {
    Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["healthcheck", "--port", port])
        .status()
        .unwrap()
        .success()
}

#[test]
fn serve_prints_its_address_and_store_and_answers_ok() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("cli.db");
    let (mut child, line, port) = serve(&["--sqlite-path".as_ref(), db.as_os_str()]);
    assert!(
        line.contains(&format!("store: sqlite://{}", db.display())),
        "{line}"
    );
    let ok = healthy(&port);
    child.kill().unwrap();
    let _ = child.wait();
    assert!(ok, "healthcheck on port {port}");
    assert!(db.exists(), "the SQLite file was created");
}

/// A corpus holding a page of 50,000 nested elements (which overflowed the main thread's
/// stack at every start) and one the HTML parser would take minutes over: the server starts,
/// answers, and the readable page is searchable.
#[test]
fn serve_starts_over_a_corpus_with_hostile_pages() {
    let dir = tempfile::TempDir::new().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let nested = |open: &str, close: &str, depth: usize| {
        format!(
            "<html><body>{}deep text{}</body></html>",
            open.repeat(depth),
            close.repeat(depth)
        )
    };
    std::fs::write(docs.join("spans.html"), nested("<span>", "</span>", 50_000)).unwrap();
    std::fs::write(
        docs.join("lists.html"),
        nested("<ul><li>", "</li></ul>", 8_000),
    )
    .unwrap();
    let filler = vec!["word"; 60].join(" ");
    std::fs::write(
        docs.join("plain.html"),
        format!(
            "<html><body><h1>Vacuum</h1><p>Vacuum reclaims storage. {filler}</p></body></html>"
        ),
    )
    .unwrap();
    let db = dir.path().join("cli.db");
    let corpus = format!("docs={}", docs.display());
    let (mut child, _, port) = serve(&[
        "--sqlite-path".as_ref(),
        db.as_os_str(),
        "--corpus".as_ref(),
        corpus.as_ref(),
    ]);
    let ok = healthy(&port);
    child.kill().unwrap();
    let _ = child.wait();
    assert!(
        ok,
        "the server answers with the hostile pages in its corpus"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["search", "--corpus", &corpus, "--json", "reclaims storage"])
        .current_dir(dir.path())
        .env_remove("DR_CONFIG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits.as_array().map(Vec::len), Some(1), "{hits}");
}

#[test]
fn healthcheck_fails_when_nothing_listens() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    drop(listener);
    let status = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["healthcheck", "--port", &port])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
}

/// Two parts of one evaluation become one result file and table; the same question in two
/// parts is refused, and nothing is written.
#[test]
fn eval_merge_joins_parts_and_refuses_a_question_measured_twice() {
    let dir = tempfile::TempDir::new().unwrap();
    let part = |name: &str, id: &str, recall: f64| {
        let path = dir.path().join(name);
        let report = serde_json::json!({
            "set": "postgresql-15", "corpus": "postgresql",
            "configurable": {"search_api": "local", "corpus": "postgresql"},
            "started_at": "2026-11-28T00:00:00Z",
            "results": [{"id": id, "status": "success", "researched": true, "facts": 4,
                         "fact_recall": recall, "wall_secs": 200.0}],
            "summary": {}
        });
        std::fs::write(&path, report.to_string()).unwrap();
        path
    };
    let (a, b) = (part("a.json", "pg-02", 0.5), part("b.json", "pg-01", 1.0));
    let out = dir.path().join("all.json");
    let merge = |files: &[&std::path::Path]| {
        Command::new(env!("CARGO_BIN_EXE_deep-research"))
            .arg("eval")
            .arg("--merge")
            .args(files)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap()
    };
    let done = merge(&[&a, &b]);
    assert!(done.status.success(), "{done:?}");
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(merged["results"][0]["id"], "pg-01");
    assert_eq!(merged["summary"]["questions"], 2);
    assert_eq!(merged["summary"]["fact_recall"], 0.75);
    let table = std::fs::read_to_string(out.with_extension("md")).unwrap();
    assert!(
        table.contains("| key-fact recall, whole report (the old rule) | 75% |"),
        "{table}"
    );

    std::fs::remove_file(&out).unwrap();
    let twice = merge(&[&a, &b, &a]);
    assert!(!twice.status.success());
    let err = String::from_utf8_lossy(&twice.stderr);
    assert!(err.contains("question pg-02 is in both"), "{err}");
    assert!(!out.exists(), "a refused merge writes nothing");
}

/// `eval --rescore` scores a kept result again against the set's questions; a result that kept
/// no source texts is refused by name.
#[test]
fn eval_rescore_scores_kept_results_and_refuses_results_without_texts() {
    let dir = tempfile::TempDir::new().unwrap();
    let set = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("eval/postgresql-15.json");
    let result = |retrieved: serde_json::Value| {
        serde_json::json!({
            "set": "postgresql-15", "corpus": "postgresql", "corpus_prefix": "file:///docs/",
            "results": [{"id": "pg-03", "status": "success", "wall_secs": 100.0,
                         "report": "# work_mem\n\nThe default of work_mem is 4MB [1].\n\n### Sources\n\n[1] Resource Consumption: file:///docs/runtime-config-resource.html",
                         "source_urls": ["file:///docs/runtime-config-resource.html"],
                         "retrieved": retrieved}]
        })
    };
    let rescore = |name: &str, report: serde_json::Value| {
        let input = dir.path().join(name);
        std::fs::write(&input, report.to_string()).unwrap();
        let out = dir.path().join(format!("rescored-{name}"));
        let done = Command::new(env!("CARGO_BIN_EXE_deep-research"))
            .arg("eval")
            .arg("--questions")
            .arg(&set)
            .arg("--rescore")
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        (done, out)
    };
    let kept = serde_json::json!([{"url": "file:///docs/runtime-config-resource.html",
        "title": "Resource Consumption",
        "text": "work_mem (integer): the default value is four megabytes (4MB)."}]);
    let (done, out) = rescore("kept.json", result(kept));
    assert!(done.status.success(), "{done:?}");
    let again: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let r = &again["results"][0];
    assert_eq!(
        r["facts_found"],
        serde_json::json!(["work_mem defaults to 4 MB"])
    );
    assert_eq!(
        (r["citations"].as_u64(), r["supported"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(r["researched"], true);

    let (refused, out) = rescore("older.json", result(serde_json::json!([])));
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("pg-03: the result kept no source texts"),
        "{err}"
    );
    assert!(!out.exists());
}

/// `search` prints what a researcher's search would get, ranked, as JSON too; a corpus that
/// is not there is a clear error. `eval --retrieval` measures the same search on a set.
#[test]
fn search_prints_ranked_sections_and_eval_retrieval_measures_them() {
    let dir = tempfile::TempDir::new().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(docs.join("_sources")).unwrap();
    let filler = vec!["word"; 60].join(" ");
    std::fs::write(
        docs.join("vacuum.html"),
        format!(
            "<html><head><title>Vacuum — Acme 1.0 documentation</title></head><body>\
             <h1>Vacuum<a class=\"headerlink\" href=\"#\">¶</a></h1>\
             <p>Vacuum reclaims storage held by dead rows. {filler}</p></body></html>"
        ),
    )
    .unwrap();
    std::fs::write(
        docs.join("_sources/vacuum.rst.txt"),
        format!("Vacuum\n======\n\nVacuum reclaims storage held by dead rows. {filler}"),
    )
    .unwrap();
    let spec = format!("acme={}", docs.display());
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_deep-research"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("DR_CONFIG")
            .output()
            .unwrap()
    };
    let out = run(&["search", "--corpus", &spec, "--json", "reclaim storage"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hits = hits.as_array().unwrap();
    assert_eq!(
        hits.len(),
        1,
        "the _sources copy is not a second hit: {hits:?}"
    );
    assert_eq!(hits[0]["title"], "Vacuum");
    assert!(
        hits[0]["url"]
            .as_str()
            .unwrap()
            .ends_with("/docs/vacuum.html")
    );
    assert!(
        hits[0]["passage"]
            .as_str()
            .unwrap()
            .contains("reclaims storage")
    );

    let out = run(&["search", "--corpus", "nowhere", "reclaim"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("corpus"), "{err}");

    let set = dir.path().join("set.json");
    std::fs::write(
        &set,
        serde_json::json!({"name": "acme", "corpus": "acme", "questions": [
            {"id": "a1", "question": "What does vacuum reclaim?",
             "facts": [{"fact": "storage", "any": ["reclaims storage"]}],
             "pages": ["vacuum.html"]}]})
        .to_string(),
    )
    .unwrap();
    let results = dir.path().join("retrieval.json");
    let out = run(&[
        "eval",
        "--retrieval",
        "--questions",
        set.to_str().unwrap(),
        "--corpus",
        &spec,
        "-o",
        results.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(report["recall_at"][0], serde_json::json!([1, 1.0]));
    assert_eq!(report["results"][0]["page_rank"], 1);
    assert!(results.with_extension("md").exists());

    // --index-dir keeps the index where it was told, and the next measure uses it again.
    let kept = dir.path().join("kept-index");
    let measure_in = |kept: &std::path::Path| {
        let out = run(&[
            "eval",
            "--retrieval",
            "--questions",
            set.to_str().unwrap(),
            "--corpus",
            &spec,
            "--index-dir",
            kept.to_str().unwrap(),
            "-o",
            results.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read_to_string(&results).unwrap()
    };
    measure_in(&kept);
    let manifest = std::fs::read_dir(&kept).unwrap().count();
    assert!(manifest > 0, "the index was not kept");
    let again: serde_json::Value = serde_json::from_str(&measure_in(&kept)).unwrap();
    assert_eq!(again["recall_at"][0], serde_json::json!([1, 1.0]));
    assert_eq!(std::fs::read_dir(&kept).unwrap().count(), manifest);
}

/// `reseal` on Postgres, between real server processes: rows sealed under key A are sealed
/// again under B, and a server that holds B alone reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reseal_moves_postgres_rows_to_the_new_key() {
    const KEY_A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const KEY_B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=";
    let Some(admin) = crate::support::pg::admin_url() else {
        return;
    };
    let (name, url) = crate::support::pg::create_database(&admin, "dr_reseal").await;
    let serve_with = |current: &str| {
        Command::new(env!("CARGO_BIN_EXE_deep-research"))
            .args(["serve", "--no-auth", "--port", "0"])
            .env("DATABASE_URL", &url)
            .env("DR_ENCRYPTION_KEY", current)
            .env_remove("DR_ENCRYPTION_PREVIOUS_KEYS")
            .env_remove("DR_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let port_of = |child: &mut std::process::Child| {
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|addr| addr.rsplit(':').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned()
    };
    let client = deep_research::outbound::client_builder().build().unwrap();
    let mut a = serve_with(KEY_A);
    let port = port_of(&mut a);
    let put = client
        .put(format!("http://127.0.0.1:{port}/store/items"))
        .json(&serde_json::json!({"namespace": ["n"], "key": "k", "value": {"note": "sealed under A"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 204);
    a.kill().unwrap();
    let _ = a.wait();
    let out = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .arg("reseal")
        .env("DATABASE_URL", &url)
        .env("DR_ENCRYPTION_KEY", KEY_B)
        .env("DR_ENCRYPTION_PREVIOUS_KEYS", KEY_A)
        .env_remove("DR_CONFIG")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut b = serve_with(KEY_B);
    let port = port_of(&mut b);
    let got = client
        .get(format!(
            "http://127.0.0.1:{port}/store/items?namespace=n&key=k"
        ))
        .send()
        .await
        .unwrap();
    let status = got.status();
    let body = got.text().await.unwrap();
    b.kill().unwrap();
    let _ = b.wait();
    crate::support::pg::drop_database(&admin, &name).await;
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("store_items.value: 1 sealed again"),
        "{printed}"
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("sealed under A"), "{body}");
}

/// A corpus name from the config file names a directory under the index root, so one that
/// leaves it (`../victim`, an absolute path) stops the server at start with the reason, and
/// the directory it points at is untouched (it was emptied before).
#[test]
fn config_corpus_names_cannot_point_the_index_elsewhere() {
    let dir = tempfile::TempDir::new().unwrap();
    let docs = dir.path().join("docs");
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(docs.join("a.md"), "# A\n\nsome text").unwrap();
    std::fs::write(victim.join("keep.txt"), "precious").unwrap();
    let index = dir.path().join("index");
    for name in ["../victim".to_owned(), victim.display().to_string()] {
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[search.local]\nindex_dir = \"{}\"\n\n[corpora.\"{name}\"]\npath = \"{}\"\n",
                index.display(),
                docs.display()
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_deep-research"))
            .args(["serve", "--no-auth", "--port", "0", "--sqlite-path"])
            .arg(dir.path().join("cli.db"))
            .arg("--config")
            .arg(&config)
            .env_remove("DATABASE_URL")
            .env_remove("DR_CONFIG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: the server started");
        assert!(err.contains("a corpus name is letters"), "{name}: {err}");
        assert!(
            victim.join("keep.txt").exists(),
            "{name}: the victim's file is gone"
        );
    }
}

/// Hybrid search from the configuration: the model named by
/// `DR__SEARCH__LOCAL__EMBEDDING_MODEL` finds the section that answers in other words, the
/// retrieval measure compares it with words alone, and a model directory that is not one stops
/// the command with what is wrong. Skips without the suite's model (DR_EMBEDDING_MODEL), unless
/// DR_REQUIRE_EMBEDDINGS=1.
#[test]
fn an_embedding_model_in_the_config_makes_the_search_hybrid() {
    let Some(model) = std::env::var_os("DR_EMBEDDING_MODEL").filter(|m| !m.is_empty()) else {
        assert!(
            std::env::var("DR_REQUIRE_EMBEDDINGS").as_deref() != Ok("1"),
            "DR_REQUIRE_EMBEDDINGS=1 but DR_EMBEDDING_MODEL is not set"
        );
        eprintln!("skipped: DR_EMBEDDING_MODEL is not set");
        return;
    };
    let dir = tempfile::TempDir::new().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    let pages = [
        (
            "cars.md",
            "# Automobiles\n\nA sedan seats five people and carries luggage in its trunk. Most models burn petrol in an engine under the bonnet, and newer ones run on batteries charged overnight from a socket in the garage.",
        ),
        (
            "bread.md",
            "# Baking bread\n\nKnead the dough until it is smooth, leave it somewhere warm until it has doubled, shape the loaf and bake it in a hot oven until the crust is brown and it sounds hollow when tapped underneath.",
        ),
        (
            "tides.md",
            "# Tides\n\nThe sea rises and falls twice a day because the moon pulls on the oceans; when sun and moon line up the difference between high and low water is largest, and harbours publish tables for sailors.",
        ),
    ];
    for (name, text) in pages {
        std::fs::write(docs.join(name), text).unwrap();
    }
    let spec = format!("garage={}", docs.display());
    let run = |args: &[&str], model: &std::ffi::OsStr| {
        Command::new(env!("CARGO_BIN_EXE_deep-research"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("DR_CONFIG")
            .env("DR__SEARCH__LOCAL__EMBEDDING_MODEL", model)
            .output()
            .unwrap()
    };
    let out = run(
        &["search", "--corpus", &spec, "--json", "motor vehicles"],
        &model,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(hits[0]["title"], "Automobiles", "{hits}");

    let set = dir.path().join("set.json");
    std::fs::write(
        &set,
        serde_json::json!({"name": "garage", "corpus": "garage", "questions": [
            {"id": "g1", "question": "Which motor vehicles suit families?",
             "facts": [{"fact": "five", "any": ["seats five people"]}],
             "pages": ["cars.md"]}]})
        .to_string(),
    )
    .unwrap();
    let results = dir.path().join("retrieval.json");
    let args = [
        "eval",
        "--retrieval",
        "--questions",
        set.to_str().unwrap(),
        "--corpus",
        &spec,
        "-o",
        results.to_str().unwrap(),
    ];
    let out = run(&args, &model);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    assert_eq!(report["hybrid"], true);
    assert_eq!(
        report["recall_at"][0],
        serde_json::json!([1, 1.0]),
        "{report}"
    );
    assert_eq!(
        report["words_alone"]["recall_at"][0],
        serde_json::json!([1, 0.0]),
        "{report}"
    );

    let out = run(
        &["search", "--corpus", &spec, "motor"],
        dir.path().as_os_str(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[search.local] embedding_model") && err.contains("config.json"),
        "{err}"
    );
}
