use super::*;
use serde_json::json;

const AUTOVACUUM: &str = "autovacuum_max_workers (integer) Specifies the maximum number of \
    autovacuum processes that may be running at any one time. The default is three. \
    autovacuum_naptime (integer) Specifies the minimum delay between autovacuum runs on any \
    given database. The default is one minute (1min). autovacuum_vacuum_threshold (integer) \
    Specifies the minimum number of updated or deleted tuples needed to trigger a VACUUM in \
    any one table. The default is 50 tuples.";

fn part(number: usize, text: &str) -> Part {
    Part {
        number,
        text: text.to_owned(),
    }
}

fn listed(facts: Value) -> Vec<ListedFact> {
    serde_json::from_value::<Drafting>(json!({ "facts": facts }))
        .map(|l| l.facts)
        .unwrap_or_default()
}

#[test]
fn a_value_is_kept_as_its_source_writes_it_after_its_name() {
    let sources = [part(1, "Other page."), part(2, AUTOVACUUM)];
    let mine: Vec<&Part> = sources.iter().collect();
    let got = checked(
        listed(json!([
            {"name": "autovacuum_max_workers", "value": "3", "source": 2},
            {"name": "`autovacuum_naptime`", "value": "1min", "source": "[1]"},
            {"name": "autovacuum_vacuum_threshold", "value": "50 tuples", "source": 2},
        ])),
        &mine,
    );
    let lines: Vec<String> = got.iter().map(Fact::line).collect();
    assert_eq!(
        lines,
        [
            "- `autovacuum_max_workers`: three [2]",
            "- `autovacuum_naptime`: 1min [2]",
            "- `autovacuum_vacuum_threshold`: 50 tuples [2]",
        ],
        "a number found as its word, a wrong source number mended"
    );
}

#[test]
fn a_value_of_the_setting_beside_it_or_of_no_source_is_dropped() {
    let sources = [part(1, AUTOVACUUM)];
    let mine: Vec<&Part> = sources.iter().collect();
    let got = checked(
        listed(json!([
            // 50 is the threshold's default, written after the naptime's paragraph and the
            // threshold's name.
            {"name": "autovacuum_naptime", "value": "50 tuples", "source": 1},
            {"name": "autovacuum_vacuum_threshold", "value": "50", "source": 1},
            // Named before the default: a value stands after its name.
            {"name": "VACUUM", "value": "three", "source": 1},
            {"name": "autovacuum_max_workers", "value": "5", "source": 1},
            {"name": "shared_buffers", "value": "128MB", "source": 1},
            {"name": "autovacuum_max_workers", "value": "none", "source": 1},
            {"name": "autovacuum_naptime", "value": "Specifies the minimum delay between autovacuum runs on any given database", "source": 1},
        ])),
        &mine,
    );
    assert_eq!(
        got,
        [Fact {
            name: "autovacuum_vacuum_threshold".into(),
            value: "50".into(),
            source: 1
        }],
        "only the threshold's own 50: {got:?}"
    );
}

#[test]
fn each_name_is_listed_once_and_a_fact_the_prose_gives_is_said() {
    let sources = [part(1, AUTOVACUUM)];
    let mine: Vec<&Part> = sources.iter().collect();
    let got = checked(
        listed(json!([
            {"name": "autovacuum_naptime", "value": "1min", "source": 1},
            {"name": "autovacuum_naptime", "value": "one minute", "source": 1},
        ])),
        &mine,
    );
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].said_in("The launcher wakes every autovacuum_naptime, 1MIN by default [1]."));
    assert!(!got[0].said_in("The launcher wakes every autovacuum_naptime [1]."));
}

#[test]
fn a_name_is_found_as_a_whole_word_and_a_call_by_its_name() {
    let text = "tomllib.load(fp, /, *, parse_float=float) Read a TOML file. The first \
                argument should be a readable and binary file object.";
    assert_eq!(
        value_after_name(text, "tomllib.load()", "binary file object", &[]),
        Some("binary file object".into())
    );
    assert_eq!(
        value_after_name("my_autovacuum_naptime is 5", "autovacuum_naptime", "5", &[]),
        None,
        "a name inside another is not that name"
    );
}

#[test]
fn a_value_after_a_setting_that_extends_a_term_is_not_the_terms() {
    let text = "Autovacuum is run by a launcher. autovacuum_max_workers (integer) Specifies the \
                maximum number of autovacuum processes. The default is three.";
    assert_eq!(
        value_after_name(text, "autovacuum_max_workers", "three", &[]),
        Some("three".into())
    );
    assert_eq!(
        value_after_name(text, "autovacuum", "three", &[]),
        None,
        "three is the setting's default, not autovacuum's"
    );
}
