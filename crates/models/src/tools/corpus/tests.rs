//! Tests of the corpus: indexing a directory, search, and fetching a document.

use super::*;

fn filler(word: &str) -> String {
    vec![word; 50].join(" ")
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn config(dir: &Path) -> CorpusConfig {
    CorpusConfig {
        path: dir.display().to_string(),
        base_url: String::new(),
        description: String::new(),
    }
}

#[test]
fn finds_sections_by_stemmed_words_and_phrases_and_locates_them() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "guide/vacuum.html",
        &format!(
            "<html><head><title>Vacuuming</title></head><body>\
             <h2 id=\"basics\">Basics</h2><p>Vacuuming reclaims storage held by dead tuples. {}</p>\
             <h2 id=\"wrap\">Wraparound</h2><p>Freezing old rows prevents transaction ID wraparound. {}</p>\
             </body></html>",
            filler("alpha"),
            filler("beta")
        ),
    );
    write(
        docs.path(),
        "notes/wal.md",
        &format!(
            "# WAL\n\nThe write-ahead log records every change. {}",
            filler("gamma")
        ),
    );
    write(
        docs.path(),
        ".hidden/x.md",
        "# Hidden\n\nreclaims reclaims reclaims",
    );
    let corpus = Corpus::open(
        "docs",
        &config(docs.path()),
        index.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let hits = corpus.search_blocking("reclaim storage", "", 5).unwrap();
    assert_eq!(hits.len(), 1, "{hits:#?}");
    let root = std::fs::canonicalize(docs.path()).unwrap();
    assert_eq!(
        hits[0].url,
        format!("file://{}/guide/vacuum.html#basics", root.display())
    );
    assert_eq!(hits[0].title, "Vacuuming — Basics");
    assert!(hits[0].content.contains("reclaims"));
    assert!(
        hits[0]
            .raw_content
            .as_deref()
            .unwrap()
            .contains("dead tuples")
    );
    // A phrase matches only where its words stand together.
    let hits = corpus
        .search_blocking("\"transaction ID wraparound\"", "", 5)
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert!(hits[0].url.ends_with("#wrap"));
    assert!(
        corpus
            .search_blocking("\"wraparound transaction\"", "", 5)
            .unwrap()
            .is_empty()
    );
    // Markdown files are searched too, and stray operators do not break a query.
    let hits = corpus
        .search_blocking("write-ahead log: (records)^2", "", 5)
        .unwrap();
    assert!(hits[0].url.ends_with("notes/wal.md#wal"), "{hits:#?}");
}

#[test]
fn reopening_reuses_the_index_and_picks_up_changed_files() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "a.md",
        &format!("# A\n\nzebra {}", filler("one")),
    );
    write(
        docs.path(),
        "b.md",
        &format!("# B\n\nyak {}", filler("two")),
    );
    let cfg = CorpusConfig {
        base_url: "https://docs.example.org/v1/".into(),
        ..config(docs.path())
    };
    let hour = Duration::from_secs(3600);
    let corpus = Corpus::open("docs", &cfg, index.path(), hour).unwrap();
    assert_eq!(corpus.sections(), 2);
    drop(corpus);
    // Reopened without changes: nothing is indexed again.
    let corpus = Corpus::open("docs", &cfg, index.path(), hour).unwrap();
    assert_eq!(
        corpus.refresh().unwrap(),
        Refresh {
            unchanged: 2,
            ..Refresh::default()
        }
    );
    // One file changes, one goes: only those are touched.
    write(
        docs.path(),
        "a.md",
        &format!("# A\n\nokapi okapi {}", filler("three")),
    );
    std::fs::remove_file(docs.path().join("b.md")).unwrap();
    let done = corpus.refresh().unwrap();
    assert_eq!((done.indexed, done.removed, done.unchanged), (1, 1, 0));
    assert!(corpus.search_blocking("zebra", "", 5).unwrap().is_empty());
    assert!(corpus.search_blocking("yak", "", 5).unwrap().is_empty());
    let hits = corpus.search_blocking("okapi", "", 5).unwrap();
    assert_eq!(hits[0].url, "https://docs.example.org/v1/a.md#a");
}

#[test]
fn a_run_picks_a_corpus_by_name_or_the_only_one() {
    let empty = Corpora::default();
    assert!(empty.pick("").unwrap_err().contains("has none"));
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(docs.path(), "a.txt", &filler("word"));
    let hour = Duration::from_secs(3600);
    let one = Corpus::open("wiki", &config(docs.path()), index.path(), hour).unwrap();
    let corpora = Corpora::new([one]);
    assert_eq!(corpora.pick("").unwrap().name(), "wiki");
    let e = corpora.pick("manual").unwrap_err();
    assert!(
        e.contains("no corpus named 'manual'") && e.contains("wiki"),
        "{e}"
    );
}

#[test]
fn sections_with_every_word_rank_above_sections_with_common_ones() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    // A long model query: two common words many pages repeat, and the rare pair only one
    // page has.
    for i in 0..5 {
        write(
            docs.path(),
            &format!("server{i}.md"),
            &format!(
                "# Server value

The server value server value server value. {}",
                filler("other")
            ),
        );
    }
    write(
        docs.path(),
        "memory.md",
        &format!(
            "# Memory

shared_buffers sets the shared memory buffers; the server value is 128MB. {}",
            filler("memory")
        ),
    );
    let corpus = Corpus::open(
        "docs",
        &config(docs.path()),
        index.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let hits = corpus
        .search_blocking("optimal server value for shared_buffers", "", 3)
        .unwrap();
    assert!(hits[0].url.ends_with("memory.md#memory"), "{hits:#?}");
    assert_eq!(hits.len(), 3, "the rest filled with partial matches");
}

/// A documentation build's `_sources` copies and a page's Markdown source are the same text
/// as the rendered page: indexed once, as the page. A Markdown file with no page stays.
#[test]
fn sources_of_rendered_pages_are_not_indexed_twice() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    let page = |title: &str| {
        format!(
            "<html><head><title>{title}</title></head><body><h1>{title}</h1><p>The task group \
             waits for its tasks. {}</p></body></html>",
            filler("tasks")
        )
    };
    write(docs.path(), "library/asyncio.html", &page("asyncio"));
    write(
        docs.path(),
        "_sources/library/asyncio.rst.txt",
        &format!(
            "asyncio\n=======\n\nThe task group waits for its tasks. {}",
            filler("tasks")
        ),
    );
    write(docs.path(), "guide.html", &page("guide"));
    write(
        docs.path(),
        "guide.md",
        &format!("# guide\n\nThe task group waits. {}", filler("tasks")),
    );
    write(
        docs.path(),
        "notes.md",
        &format!("# notes\n\nThe task group waits. {}", filler("tasks")),
    );
    let corpus = Corpus::open(
        "docs",
        &config(docs.path()),
        index.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let hits = corpus.search_blocking("task group", "", 10).unwrap();
    let mut urls: Vec<&str> = hits
        .iter()
        .map(|h| h.url.rsplit('/').next().unwrap_or_default())
        .collect();
    urls.sort();
    assert_eq!(
        urls,
        ["asyncio.html", "guide.html", "notes.md#notes"],
        "{hits:#?}"
    );
}

/// A short, general query a small model writes finds many sections; the researcher's topic
/// ranks first the one it needs, and finds nothing the query does not.
#[test]
fn the_topic_ranks_what_a_general_query_finds() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    for (name, text) in [
        (
            "signals",
            "Exception handling for signals: a handler runs between bytecodes; \
                     exception handling there is limited.",
        ),
        (
            "codecs",
            "Exception handling in codecs: errors='strict' raises on bad bytes; \
                    exception handling is set per codec.",
        ),
        (
            "groups",
            "Exception handling of several errors at once. Raising several \
                    unrelated errors together: a group of them is caught with except*, \
                    and notes are added with add_note. The group nests other groups, and a \
                    handler sees only the ones it names, while the rest propagate.",
        ),
        (
            "tomllib",
            "Parsing TOML with tomllib: groups of keys are tables.",
        ),
    ] {
        write(
            docs.path(),
            &format!("{name}.md"),
            &format!("# {name}\n\n{text} {}", filler(name)),
        );
    }
    let corpus = Corpus::open(
        "docs",
        &config(docs.path()),
        index.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let alone = corpus.search_blocking("exception handling", "", 3).unwrap();
    assert_eq!(alone.len(), 3);
    assert!(!alone[0].url.ends_with("groups.md#groups"), "{alone:#?}");
    let topic = "Python 3.11: exception groups, except* and notes";
    let ranked = corpus
        .search_blocking("exception handling", topic, 3)
        .unwrap();
    assert!(ranked[0].url.ends_with("groups.md#groups"), "{ranked:#?}");
    assert!(
        ranked.iter().all(|h| !h.url.contains("tomllib")),
        "the topic alone finds nothing: {ranked:#?}"
    );
}

/// Requiring every word of a long query would rank a long page that happens to hold them all
/// ("differences", "between", "and", the versions) above the section on the subject; the
/// all-words and any-word rankings fused rank the section first.
#[test]
fn a_long_query_finds_the_section_on_its_subject() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "reference.md",
        &format!(
            "# reference\n\nFunctions. Differences between modes are listed; changed in 3.10 \
             and in 3.11; performance notes elsewhere. {}",
            filler("function")
        ),
    );
    write(
        docs.path(),
        "faster.md",
        "# Faster CPython\n\nCPython 3.11 is 10-60% faster than 3.10: performance gains \
         from the adaptive interpreter. The performance work goes on.",
    );
    for i in 0..6 {
        write(
            docs.path(),
            &format!("other{i}.md"),
            &format!(
                "# other {i}\n\nThe differences between these and those. {}",
                filler("x")
            ),
        );
    }
    let corpus = Corpus::open(
        "docs",
        &config(docs.path()),
        index.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let hits = corpus
        .search_blocking("performance differences between 3.11 and 3.10", "", 3)
        .unwrap();
    assert!(
        hits[0].url.ends_with("faster.md#faster-cpython"),
        "{hits:#?}"
    );
    assert!(corpus.holds("10-60% FASTER").unwrap());
    assert!(!corpus.holds("70% faster").unwrap());
}

/// A folder of the documents teams keep: a PDF is searched and located by page, and a file
/// that cannot be read is skipped (and logged), never a failed index.
#[test]
fn pdfs_are_searched_by_page_and_damaged_files_are_skipped() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    let page = "Checkpoints write every dirty buffer to disk. ".repeat(6);
    let archive = "The archiver copies each finished WAL segment away from the server. ".repeat(4);
    let pdf = super::formats::tests::pdf_of(&[&page, &archive]);
    std::fs::write(docs.path().join("ops.pdf"), pdf).unwrap();
    std::fs::write(docs.path().join("broken.pdf"), b"%PDF-1.5 not really").unwrap();
    std::fs::write(docs.path().join("broken.docx"), b"PK not a zip").unwrap();
    let corpus = Corpus::open(
        "docs",
        &config(docs.path()),
        index.path(),
        Duration::from_secs(3600),
    )
    .unwrap();
    let hits = corpus
        .search_blocking("archiver WAL segment", "", 5)
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:#?}");
    assert!(hits[0].url.ends_with("/ops.pdf#page=2"), "{hits:#?}");
    assert_eq!(hits[0].title, "ops.pdf");
    // The damaged files are not read again until they change.
    assert_eq!(
        corpus.refresh().unwrap(),
        Refresh {
            unchanged: 3,
            ..Refresh::default()
        }
    );
}

#[test]
fn model_queries_become_plain_words() {
    assert_eq!(
        plain_query("title:vacuum -freeze AND \"dead tuples\""),
        "title vacuum freeze \"dead tuples\""
    );
    assert_eq!(plain_query("work_mem \"default"), "work_mem default");
    assert_eq!(percent_path("/a b/c#d.html"), "/a%20b/c%23d.html");
}

/// A page of `depth` nested `open`…`close` elements around `word`.
fn nested_page(open: &str, close: &str, depth: usize, word: &str) -> String {
    format!(
        "<html><head><title>Deep</title></head><body>{}{word} {} {}</body></html>",
        open.repeat(depth),
        filler("delta"),
        close.repeat(depth)
    )
}

/// Deeply nested pages neither overflow a thread's stack nor take the parser's quadratic
/// time, at the first index (the server's start) or at a refresh (on a small blocking-pool
/// stack): up to `MAX_HTML_NESTING` levels are read (900 `<span>`s, deeper than the old
/// recursive walk could go on a 256 KB stack); deeper nesting (8,000 `<ul><li>`, which took
/// the parser 14 s, or the 50,000 `<span>`s that overflowed the main thread's stack) is
/// skipped with a warning, and the rest of the corpus is indexed.
#[test]
fn deeply_nested_pages_are_read_or_skipped_without_overflowing_the_stack() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "spans.html",
        &nested_page("<span>", "</span>", 900, "spanneedle"),
    );
    write(
        docs.path(),
        "lists.html",
        &nested_page("<ul><li>", "</li></ul>", 8_000, "listneedle"),
    );
    write(
        docs.path(),
        "fine.html",
        &nested_page("<div><ul><li>", "</li></ul></div>", 300, "fineneedle"),
    );
    let (docs_path, index_path) = (docs.path().to_owned(), index.path().to_owned());
    let started = Instant::now();
    let corpus = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            Corpus::open("docs", &config(&docs_path), &index_path, Duration::ZERO).unwrap()
        })
        .unwrap()
        .join()
        .expect("opening the corpus on a 256 KB stack");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        corpus.search_blocking("spanneedle", "", 5).unwrap().len(),
        1
    );
    assert_eq!(
        corpus.search_blocking("fineneedle", "", 5).unwrap().len(),
        1
    );
    assert!(
        corpus
            .search_blocking("listneedle", "", 5)
            .unwrap()
            .is_empty()
    );
    write(
        docs.path(),
        "more.html",
        &nested_page("<b><span>", "</span></b>", 450, "moreneedle"),
    );
    write(
        docs.path(),
        "spans-deep.html",
        &nested_page("<span>", "</span>", 50_000, "deepneedle"),
    );
    let again = Arc::clone(&corpus);
    let done = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || again.refresh().unwrap())
        .unwrap()
        .join()
        .expect("refreshing on a 256 KB stack");
    assert_eq!((done.indexed, done.unreadable), (1, 1), "{done:?}");
    assert_eq!(
        corpus.search_blocking("moreneedle", "", 5).unwrap().len(),
        1
    );
}

/// A corpus name becomes a directory under the index root: one that leaves it is refused, and
/// an index directory that holds anything but an index of this service is never emptied.
#[test]
fn corpus_names_and_index_directories_cannot_point_at_other_files() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    let victim = tempfile::tempdir().unwrap();
    write(docs.path(), "a.md", &format!("# A\n\n{}", filler("alpha")));
    write(victim.path(), "keep.txt", "precious");
    let absolute = victim.path().display().to_string();
    let relative = format!(
        "../{}",
        victim.path().file_name().unwrap().to_string_lossy()
    );
    for name in [absolute.as_str(), relative.as_str(), "a/b", "..", ""] {
        let refused = Corpus::open(name, &config(docs.path()), index.path(), Duration::ZERO);
        assert!(
            matches!(refused, Err(CorpusError::Name(_))),
            "{name}: {refused:?}"
        );
    }
    assert!(victim.path().join("keep.txt").exists());
    // The index root's directory for this name holds someone's files: refused, kept.
    write(index.path(), "docs/keep.txt", "precious");
    let refused = Corpus::open("docs", &config(docs.path()), index.path(), Duration::ZERO);
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("no index of this service"), "{message}");
    assert!(index.path().join("docs/keep.txt").exists());
    // An index of this service for another directory is rebuilt in place.
    std::fs::remove_file(index.path().join("docs/keep.txt")).unwrap();
    Corpus::open("docs", &config(docs.path()), index.path(), Duration::ZERO).unwrap();
    let other = tempfile::tempdir().unwrap();
    write(other.path(), "b.md", &format!("# B\n\n{}", filler("beta")));
    let rebuilt =
        Corpus::open("docs", &config(other.path()), index.path(), Duration::ZERO).unwrap();
    assert_eq!(rebuilt.search_blocking("beta", "", 5).unwrap().len(), 1);
    assert!(rebuilt.search_blocking("alpha", "", 5).unwrap().is_empty());
}

/// A listed file swapped for a symbolic link before it is read is not followed.
#[test]
fn a_file_swapped_for_a_link_after_listing_is_not_read() {
    let docs = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.md", "# Secret\n\nhunter2");
    write(docs.path(), "page.md", "# Page\n\nplain");
    let page = docs.path().join("page.md");
    std::fs::remove_file(&page).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), &page).unwrap();
    let read = files::read_listed(&page, Format::Markdown);
    assert!(read.is_err(), "{read:?}");
}

/// An anchor is a fragment a link can hold: quotes, spaces and brackets in an `id` are encoded.
#[test]
fn anchors_are_percent_encoded_in_locations() {
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(
        docs.path(),
        "a.html",
        &format!(
            "<html><body><h2 id=\"x&quot;)><script>'y z\">Odd</h2><p>oddword {}</p>\
             <h2 id=\"page=2:ok\">Plain</h2><p>plainword {}</p></body></html>",
            filler("alpha"),
            filler("beta")
        ),
    );
    let corpus = Corpus::open("docs", &config(docs.path()), index.path(), Duration::ZERO).unwrap();
    let odd = corpus.search_blocking("oddword", "", 1).unwrap();
    assert!(
        odd[0].url.ends_with("#x%22%29%3E%3Cscript%3E%27y%20z"),
        "{}",
        odd[0].url
    );
    let plain = corpus.search_blocking("plainword", "", 1).unwrap();
    assert!(plain[0].url.ends_with("#page=2:ok"), "{}", plain[0].url);
}

/// The embedding model the suite installs (`scripts/embedding-model.sh`, exported by
/// `scripts/test.sh` as DR_EMBEDDING_MODEL); without it the hybrid tests skip, unless
/// DR_REQUIRE_EMBEDDINGS=1 says they must run.
fn embedding_model() -> Option<Arc<Embedder>> {
    let Some(dir) = std::env::var_os("DR_EMBEDDING_MODEL").filter(|d| !d.is_empty()) else {
        assert!(
            std::env::var("DR_REQUIRE_EMBEDDINGS").as_deref() != Ok("1"),
            "DR_REQUIRE_EMBEDDINGS=1 but DR_EMBEDDING_MODEL is not set"
        );
        eprintln!(
            "skipped: DR_EMBEDDING_MODEL is not set (bash scripts/embedding-model.sh install)"
        );
        return None;
    };
    Some(Arc::new(Embedder::load(Path::new(&dir)).unwrap()))
}

const CARS: &str = "# Automobiles\n\nA sedan seats five people and carries luggage in its trunk. \
    Most models burn petrol in an engine under the bonnet, and newer ones run on batteries that \
    are charged overnight from a socket in the garage. Tyres are changed with the seasons.";
const BREAD: &str = "# Baking bread\n\nKnead the dough until it is smooth, leave it somewhere \
    warm until it has doubled, shape the loaf and bake it in a hot oven until the crust is brown \
    and it sounds hollow when tapped underneath. Flour, water, salt and yeast are all it takes.";
const TIDES: &str = "# Tides\n\nThe sea rises and falls twice a day because the moon pulls on \
    the oceans; when sun and moon line up the difference between high and low water is largest, \
    and harbours publish tables so that sailors know when they can leave port safely.";

/// A question worded unlike the section that answers it: no word of "motor vehicles" is in any
/// document, so words alone find nothing, and the sections nearest in meaning find the page.
#[test]
fn hybrid_search_finds_the_section_that_answers_in_other_words() {
    let Some(model) = embedding_model() else {
        return;
    };
    let docs = tempfile::tempdir().unwrap();
    let index = tempfile::tempdir().unwrap();
    write(docs.path(), "cars.md", CARS);
    write(docs.path(), "bread.md", BREAD);
    write(docs.path(), "tides.md", TIDES);
    let hour = Duration::from_secs(3600);
    let open = || {
        Corpus::open_with(
            "docs",
            &config(docs.path()),
            index.path(),
            hour,
            Some(model.clone()),
        )
    };
    let corpus = open().unwrap();
    assert_eq!(corpus.embed_pending().unwrap(), 3);
    assert_eq!(corpus.vectors(), 3);
    let words = corpus
        .search_ranked("motor vehicles", "", 3, false)
        .unwrap();
    assert!(words.is_empty(), "{words:#?}");
    let hybrid = corpus.search_blocking("motor vehicles", "", 3).unwrap();
    assert!(hybrid[0].url.contains("/cars.md#"), "{hybrid:#?}");
    let bread = corpus
        .search_blocking("how do I make a loaf", "", 3)
        .unwrap();
    assert!(bread[0].url.contains("/bread.md#"), "{bread:#?}");

    // Only what changed is embedded again; a file gone takes its vector with it.
    write(
        docs.path(),
        "bread.md",
        &format!("{BREAD} Rye flour makes a denser loaf."),
    );
    std::fs::remove_file(docs.path().join("tides.md")).unwrap();
    corpus.refresh().unwrap();
    assert_eq!(corpus.embed_pending().unwrap(), 1);
    assert_eq!(corpus.vectors(), 2);
    drop(corpus);

    // The vectors outlive the process: a reopened corpus embeds nothing and still finds it.
    let again = open().unwrap();
    assert_eq!(again.vectors(), 2);
    assert_eq!(again.embed_pending().unwrap(), 0);
    let hybrid = again.search_blocking("motor vehicles", "", 3).unwrap();
    assert!(hybrid[0].url.contains("/cars.md#"), "{hybrid:#?}");
}

/// A model directory that is not one says what is missing and opens nothing.
#[test]
fn an_embedding_model_that_is_not_one_is_refused_with_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let err = Embedder::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
    std::fs::write(dir.path().join("config.json"), "{}").unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
    std::fs::write(dir.path().join("model.safetensors"), "not weights").unwrap();
    let err = Embedder::load(dir.path()).unwrap_err().to_string();
    assert!(err.starts_with("embedding model "), "{err}");
}
