use super::*;
use serde_json::json;

fn over(v: Value) -> Result<ResearchConfig, String> {
    let map = v.as_object().cloned().unwrap_or_default();
    ResearchConfig::default().with_overrides(&map, &["search_api".to_owned()])
}

#[test]
fn defaults_are_valid_and_runs_override_them() {
    assert!(ResearchConfig::default().validate().is_ok());
    let c = over(
        json!({"max_concurrent_research_units": "3", "allow_clarification": "false",
                        "research_model": "ollama:llama3.1:8b", "thread_id": "x"}),
    )
    .unwrap();
    assert_eq!(c.max_concurrent_research_units, 3);
    assert!(!c.allow_clarification);
    assert_eq!(c.research_model, "ollama:llama3.1:8b");
}

#[test]
fn every_setting_is_described_in_order() {
    let defaults = serde_json::to_value(ResearchConfig::default()).unwrap();
    let fields: Vec<&String> = defaults.as_object().unwrap().keys().collect();
    let described: Vec<&str> = SETTINGS.iter().map(|s| s.name).collect();
    let mut sorted = described.clone();
    sorted.sort_unstable();
    let mut fields_sorted: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
    fields_sorted.sort_unstable();
    assert_eq!(sorted, fields_sorted);
    assert!(SETTINGS.iter().all(|s| !s.description().is_empty()));
}

#[test]
fn errors_name_the_field() {
    let e = over(json!({"max_concurrent_research_units": 50})).unwrap_err();
    assert!(e.contains("max_concurrent_research_units"), "{e}");
    let e = over(json!({"research_model": "gpt-4.1"})).unwrap_err();
    assert!(e.contains("research_model"), "{e}");
    let e = over(json!({"search_api": "none"})).unwrap_err();
    assert!(e.contains("locked"), "{e}");
    let e = over(json!({"reserch_model": "openai:x"})).unwrap_err();
    assert!(e.contains("reserch_model: unknown setting"), "{e}");
    // mcp_config is checked against the operator's MCP policy (tools::mcp::spec).
    assert!(over(json!({"mcp_config": null})).is_ok());
    let e = over(json!({"allow_clarification": "perhaps"})).unwrap_err();
    assert!(
        e.contains("allow_clarification: expected true or false"),
        "{e}"
    );
    let e = over(json!({"max_concurrent_research_units": "lots"})).unwrap_err();
    assert!(
        e.contains("max_concurrent_research_units: expected a whole number"),
        "{e}"
    );
    let e = over(json!({"research_model": 5})).unwrap_err();
    assert!(e.contains("research_model: expected a string"), "{e}");
    let e = over(json!({"tavily_topic": "sports"})).unwrap_err();
    assert!(
        e.contains("tavily_topic: must be one of general, news, finance"),
        "{e}"
    );
    let c = over(json!({"search_exclude_domains": ["a.example", "b.example"]})).unwrap();
    assert_eq!(c.search_exclude_domains, "a.example, b.example");
    assert_eq!(
        domains(&c.search_exclude_domains),
        ["a.example", "b.example"]
    );
}

/// The schema's choices are what serde reads, and each declared range is enforced: both come
/// from the one declaration of each setting.
#[test]
fn choices_and_ranges_are_the_ones_declared() {
    let no_lock = |v: Value| {
        let map = v.as_object().cloned().unwrap_or_default();
        ResearchConfig::default().with_overrides(&map, &[])
    };
    let defaults = serde_json::to_value(ResearchConfig::default()).unwrap();
    for setting in SETTINGS {
        let name = setting.name;
        if !setting.choices.is_empty() {
            assert!(
                setting.choices.contains(&defaults[name].as_str().unwrap()),
                "{name}"
            );
            for choice in setting.choices {
                // `corpus` needs search_api local; the choices here are the enums'.
                let mut run = json!({ name: choice });
                if name == "search_api" && *choice == "local" {
                    run["corpus"] = json!("");
                }
                assert!(no_lock(run).is_ok(), "{name} = {choice}");
            }
            assert!(no_lock(json!({ name: "nonsense" })).is_err(), "{name}");
        }
        if let Some((lo, hi)) = setting.range {
            assert!(
                no_lock(json!({ name: hi + 1 })).is_err(),
                "{name} above its range"
            );
            if lo > 0 {
                assert!(
                    no_lock(json!({ name: lo - 1 })).is_err(),
                    "{name} below its range"
                );
            }
        }
    }
}
