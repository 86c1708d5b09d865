//! What the handlers' annotations do not say, said once for the whole document: ids the server
//! parses as UUIDs, the choices and ranges of request fields, which bodies are required, and
//! the error responses every operation can give (always `{"detail": ...}` as JSON).

use crate::api::{ASSISTANT_FIELDS, CRON_FIELDS, THREAD_FIELDS};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Path parameters the server parses as UUIDs (a malformed one is a 422).
const UUID_PARAMS: [&str; 4] = ["thread_id", "run_id", "checkpoint_id", "cron_id"];

use crate::api::MAX_TTL_MINUTES;

const STREAM_MODES: [&str; 8] = [
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "tasks",
    "checkpoints",
    "debug",
];

pub(super) fn refine(doc: &mut Value, graphs: &[&str]) {
    // How callers authenticate (`api::auth`); public operations say they need nothing.
    if let Some(components) = doc
        .pointer_mut("/components")
        .and_then(Value::as_object_mut)
    {
        components.insert(
            "securitySchemes".into(),
            json!({
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key",
                           "description": "An API key from the server's keys file (or its one shared key)"},
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                           "description": "A JWT the server verifies (shared secret or JWKS); API keys are accepted here too"}
            }),
        );
    }
    if let Some(root) = doc.as_object_mut() {
        root.insert("security".into(), json!([{"apiKey": []}, {"bearer": []}]));
    }
    if let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    {
        refine_schemas(schemas);
        schemas.insert(
            "ErrorDetail".into(),
            json!({"type": "object", "required": ["detail"],
                   "properties": {"detail": {"description": "What was wrong"}}}),
        );
    }
    let by_id = json!({"anyOf": [{"type": ["string", "null"], "format": "uuid"},
                                 {"type": "string", "enum": graphs}]});
    if let Some(slot) = doc.pointer_mut("/components/schemas/CronSearch/properties/assistant_id") {
        *slot = by_id;
    }
    let schemas = doc
        .pointer("/components/schemas")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut ids: HashMap<String, usize> = HashMap::new();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for (method, op) in item.iter_mut() {
                refine_operation(path, method, op, &schemas, graphs);
                if let Some(id) = op.get("operationId").and_then(Value::as_str) {
                    *ids.entry(id.to_owned()).or_default() += 1;
                }
            }
        }
        unique_operation_ids(paths, &ids);
    }
}

type Override = (&'static str, &'static str, Value);

/// Overrides of request fields, by schema and property.
fn field_overrides() -> Vec<Override> {
    let mut all = assistant_and_thread_fields();
    all.extend(cron_and_cancel_fields());
    all.extend(run_fields());
    all.extend(store_fields());
    all
}

fn uuid() -> Value {
    json!({"type": "string", "format": "uuid"})
}

fn opt_uuid() -> Value {
    json!({"type": ["string", "null"], "format": "uuid"})
}

fn uuids() -> Value {
    json!({"type": ["array", "null"], "items": uuid(), "maxItems": crate::api::MAX_IDS})
}

/// One of `values`, or null.
fn choice(values: &[&str]) -> Value {
    let mut all: Vec<Value> = values.iter().map(|v| json!(v)).collect();
    all.push(Value::Null);
    json!({"type": ["string", "null"], "enum": all})
}

/// A `select` list: any of a resource's fields.
fn select(fields: &[&str]) -> Value {
    json!({"type": "array", "items": {"type": "string", "enum": fields}})
}

fn ttl() -> Value {
    json!({"anyOf": [{"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL_MINUTES},
                     {"type": "object", "required": ["ttl"],
                      "properties": {"ttl": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL_MINUTES},
                                     "strategy": {"type": "string", "enum": ["delete"]}}},
                     {"type": "null"}],
           "description": "Minutes after the last update, or {ttl, strategy: delete}"})
}

fn assistant_and_thread_fields() -> Vec<Override> {
    let if_exists = choice(&["raise", "do_nothing"]);
    vec![
        ("AssistantSearch", "select", select(&ASSISTANT_FIELDS)),
        ("NewAssistant", "if_exists", if_exists.clone()),
        ("NewAssistant", "assistant_id", opt_uuid()),
        ("ThreadSearch", "select", select(&THREAD_FIELDS)),
        ("ThreadSearch", "ids", uuids()),
        ("NewThread", "if_exists", if_exists),
        ("NewThread", "thread_id", opt_uuid()),
        ("NewThread", "ttl", ttl()),
        (
            "NewThread",
            "supersteps",
            json!({"type": "null", "description": "Not supported"}),
        ),
        ("ThreadPatch", "ttl", ttl()),
        ("Prune", "strategy", choice(&["delete", "keep_latest"])),
        (
            "Prune",
            "thread_ids",
            json!({"type": "array", "items": uuid(), "maxItems": crate::api::MAX_IDS}),
        ),
    ]
}

fn cron_and_cancel_fields() -> Vec<Override> {
    vec![
        ("CronSearch", "select", select(&CRON_FIELDS)),
        ("CronSearch", "thread_id", opt_uuid()),
        ("CancelMany", "thread_id", opt_uuid()),
        ("CancelMany", "run_ids", uuids()),
        (
            "CancelMany",
            "status",
            json!({"type": "null", "description": "Cancelling by status is not supported"}),
        ),
    ]
}

fn run_fields() -> Vec<Override> {
    let mode = json!({"type": "string", "enum": STREAM_MODES});
    let nodes = json!({"anyOf": [{"type": "string", "enum": ["*"]},
                                 {"type": "array", "items": {"type": "string"}},
                                 {"type": "null"}],
                       "description": "\"*\" or node names of the assistant's graph"});
    vec![
        // `exit` is a `Durability` but refused (every step is checkpointed).
        ("NewRun", "durability", choice(&["sync", "async"])),
        (
            "NewRun",
            "feedback_keys",
            json!({"type": ["array", "null"], "items": {"type": "string"}, "maxItems": 0,
            "description": "Feedback needs LangSmith, which this server does not use"}),
        ),
        (
            "NewRun",
            "checkpoint_during",
            json!({"type": ["boolean", "null"], "enum": [true, null],
            "description": "false (no checkpoints during the run) is not served"}),
        ),
        (
            "NewRun",
            "stream_mode",
            json!({"anyOf": [mode, {"type": "array", "items": mode}, {"type": "null"}]}),
        ),
        ("NewRun", "interrupt_before", nodes.clone()),
        ("NewRun", "interrupt_after", nodes),
        ("NewRun", "checkpoint_id", opt_uuid()),
        (
            "NewRun",
            "after_seconds",
            json!({"type": ["number", "null"], "minimum": 0, "maximum": 31536000}),
        ),
        (
            "NewRun",
            "webhook",
            json!({"type": ["string", "null"], "format": "uri"}),
        ),
    ]
}

fn store_fields() -> Vec<Override> {
    let label = json!({"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[^.]+$"});
    let labels = json!({"type": "array", "items": label, "maxItems": 32});
    let namespace = json!({"type": "array", "items": label, "minItems": 1, "maxItems": 32});
    let key = json!({"type": "string", "minLength": 1, "maxLength": 256});
    vec![
        ("PutItem", "namespace", namespace.clone()),
        ("PutItem", "key", key.clone()),
        (
            "PutItem",
            "index",
            json!({"enum": [false, null], "description": "No embeddings index: only false"}),
        ),
        (
            "PutItem",
            "ttl",
            json!({"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": MAX_TTL_MINUTES}),
        ),
        ("ItemRef", "namespace", namespace),
        ("ItemRef", "key", key),
        ("ItemSearch", "namespace_prefix", labels.clone()),
        (
            "ItemSearch",
            "query",
            json!({"type": ["string", "null"], "maxLength": 0,
            "description": "Semantic search needs an embeddings index, which this server has not"}),
        ),
        ("NamespaceSearch", "prefix", labels.clone()),
        ("NamespaceSearch", "suffix", labels),
        (
            "NamespaceSearch",
            "max_depth",
            json!({"type": ["integer", "null"], "minimum": 1}),
        ),
    ]
}

fn refine_schemas(schemas: &mut Map<String, Value>) {
    for (_, schema) in schemas.iter_mut() {
        let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(limit) = props.get_mut("limit") {
            limit["minimum"] = json!(1);
            limit["maximum"] = json!(1000);
        }
        if let Some(offset) = props.get_mut("offset") {
            offset["minimum"] = json!(0);
        }
    }
    for (schema, field, value) in field_overrides() {
        if let Some(slot) = schemas
            .get_mut(schema)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(field))
        {
            *slot = value;
        }
    }
    // A cron carries a run request: its fields take the same values.
    let run_fields = schemas
        .get("NewRun")
        .and_then(|s| s.get("properties"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(props) = schemas
        .get_mut("NewCron")
        .and_then(|s| s.get_mut("properties"))
        .and_then(Value::as_object_mut)
    {
        for (name, slot) in props.iter_mut() {
            if let Some(same) = run_fields.get(name) {
                *slot = same.clone();
            }
        }
        props.insert(
            "on_run_completed".into(),
            json!({"type": ["string", "null"], "enum": ["delete", "keep", null],
            "description": "Stateless crons only"}),
        );
    }
    // `/runs/cancel` takes runs of one thread.
    if let Some(cancel) = schemas.get_mut("CancelMany") {
        cancel["required"] = json!(["thread_id", "run_ids"]);
    }
}

fn refine_operation(path: &str, method: &str, op: &mut Value, schemas: &Value, graphs: &[&str]) {
    let Some(op) = op.as_object_mut() else {
        return;
    };
    let mut has_input = false;
    let mut names_a_resource = false;
    if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
        has_input |= !params.is_empty();
        names_a_resource = params.iter().any(|p| p.get("in") == Some(&json!("path")));
        for param in params {
            refine_parameter(path, param, graphs);
        }
    }
    if let Some(body) = op.get_mut("requestBody") {
        has_input = true;
        let reference = body
            .pointer("/content/application~1json/schema/$ref")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let name = reference.rsplit('/').next().unwrap_or_default();
        // The server reads a missing body as `{}`: it is needed only when a field is.
        let required = schemas
            .get(name)
            .and_then(|s| s.get("required"))
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty());
        body["required"] = json!(required);
    }
    let public = matches!(path, "/ok" | "/info" | "/metrics");
    if public {
        op.insert("security".into(), json!([]));
    }
    let responses = op.entry("responses").or_insert_with(|| json!({}));
    let Some(responses) = responses.as_object_mut() else {
        return;
    };
    // Any request may be refused for its Host (400) or a store that is down (503).
    let mut extra: Vec<&str> = vec!["400", "503"];
    if names_a_resource {
        extra.push("404");
    }
    if has_input {
        extra.push("422");
    }
    if op_has_body(method) {
        extra.extend(["408", "413", "415"]);
    }
    if !public {
        extra.extend(["401", "429"]);
    }
    // System assistants are read-only.
    if path.starts_with("/assistants/{assistant_id}") && matches!(method, "patch" | "delete")
        || path == "/assistants/{assistant_id}/latest"
    {
        extra.push("403");
    }
    for code in extra {
        responses.entry(code).or_insert_with(|| json!({}));
    }
    for (code, response) in responses.iter_mut() {
        refine_response(code, response);
    }
    if path.ends_with("/search") && method == "post" {
        loosen_selected(responses);
    }
    if path.ends_with("/commands") {
        commands(op);
    }
}

/// With `select`, search results hold only the selected fields.
fn loosen_selected(responses: &mut Map<String, Value>) {
    if let Some(items) = responses
        .get_mut("200")
        .and_then(|r| r.pointer_mut("/content/application~1json/schema"))
        && items.get("type") == Some(&json!("array"))
    {
        let of = items.get("items").cloned().unwrap_or_else(|| json!({}));
        items["items"] = json!({"anyOf": [of, {"type": "object"}],
                                "description": "Only the selected fields when `select` is given"});
    }
}

/// The thread-centric protocol's command envelope, and its error envelope (also for a 400).
fn commands(op: &mut Map<String, Value>) {
    let methods = [
        "run.start",
        "input.respond",
        "input.inject",
        "state.get",
        "state.listCheckpoints",
        "state.fork",
        "agent.getTree",
        "subscription.subscribe",
        "subscription.unsubscribe",
    ];
    if let Some(body) = op.get_mut("requestBody") {
        body["required"] = json!(true);
        body["content"] = json!({"application/json": {"schema": {
            "type": "object", "required": ["id", "method"],
            "properties": {"id": {"type": "integer"},
                           "method": {"type": "string", "description": format!(
                               "One of {}; others are answered with an error envelope",
                               methods.join(", "))},
                           "params": {"type": ["object", "null"]}}}}});
    }
    let envelope = json!({"type": "object", "required": ["type"],
        "properties": {"type": {"type": "string", "enum": ["success", "error"]}}});
    if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
        if let Some(r) = responses.get_mut("200") {
            r["content"] = json!({"application/json": {"schema": envelope}});
        }
        if let Some(r) = responses.get_mut("400") {
            r["content"] = json!({"application/json": {"schema": {"anyOf": [
                envelope, {"$ref": "#/components/schemas/ErrorDetail"}]}}});
        }
    }
}

fn op_has_body(method: &str) -> bool {
    matches!(method, "post" | "put" | "patch" | "delete")
}

/// Query and header parameters the server reads with rules of its own.
fn parameter_schema(path: &str, name: &str) -> Option<Value> {
    let flag = json!({"type": "string", "enum": ["true", "false", "1", "0", "yes", "no", ""]});
    Some(match (path, name) {
        ("/ok", "check_db") | ("/store/items", "refresh_ttl") => flag,
        ("/store/items", "namespace") => {
            json!({"type": "string", "pattern": "^[^.]{1,256}(\\.[^.]{1,256}){0,31}$"})
        }
        ("/store/items", "key") => json!({"type": "string", "minLength": 1, "maxLength": 256}),
        (_, "Idempotency-Key") => json!({"type": "string", "pattern": "^[!-~]{1,255}$"}),
        (_, "Last-Event-ID") => {
            json!({"type": "string", "pattern": "^(-1|[0-9]{1,15}(-[0-9]{1,9})?)$"})
        }
        ("/threads/{thread_id}/stream", "stream_mode") => {
            let mut modes = vec!["run_modes", "lifecycle"];
            modes.extend(STREAM_MODES);
            json!({"type": "string", "enum": modes})
        }
        _ => return None,
    })
}

fn refine_parameter(path: &str, param: &mut Value, graphs: &[&str]) {
    let name = param
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if let Some(schema) = parameter_schema(path, &name) {
        param["schema"] = schema;
        return;
    }
    // The agent card's query names an assistant as the paths do.
    let card_query = path == "/.well-known/agent-card.json" && name == "assistant_id";
    if param.get("in").and_then(Value::as_str) != Some("path") && !card_query {
        return;
    }
    if UUID_PARAMS.contains(&name.as_str()) {
        param["schema"] = json!({"type": "string", "format": "uuid"});
    } else if name == "assistant_id" {
        param["schema"] = json!({"anyOf": [{"type": "string", "format": "uuid"},
                                           {"type": "string", "enum": graphs}],
                                 "description": "An assistant's id, or a graph id (its system assistant)"});
    }
}

fn refine_response(code: &str, response: &mut Value) {
    let Some(response) = response.as_object_mut() else {
        return;
    };
    response
        .entry("description")
        .or_insert_with(|| json!(describe(code)));
    if code.starts_with('4') || code.starts_with('5') {
        response
            .entry("content")
            .or_insert_with(|| json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}}));
    }
    // Counts are JSON numbers, not text.
    if let Some(content) = response.get_mut("content").and_then(Value::as_object_mut)
        && let Some(text) = content.get("text/plain").cloned()
        && text.pointer("/schema/type") == Some(&json!("integer"))
    {
        content.remove("text/plain");
        content.insert("application/json".into(), text);
    }
}

fn describe(code: &str) -> &'static str {
    match code {
        "200" => "OK",
        "202" => "Accepted",
        "204" => "Done; no body",
        "400" => "The request cannot be served as made (the detail says why)",
        "401" => "Credentials are missing or invalid (x-api-key or Authorization: Bearer)",
        "403" => "Not yours to change (system assistants are read-only)",
        "408" => "The body was not sent in time",
        "415" => "The body is not JSON (send Content-Type: application/json)",
        "429" => "A limit was reached (requests, runs or spend); Retry-After says when to retry",
        "404" => "Not found",
        "409" => "Conflicts with the current state (exists already, busy, nothing to resume)",
        "413" => "The body is too large",
        "422" => "Invalid input (the detail names the field)",
        "503" => "The database is unavailable for now; retry",
        _ => "See the detail",
    }
}

/// Operation ids must be unique in a document; handlers in different modules share names.
fn unique_operation_ids(paths: &mut Map<String, Value>, counts: &HashMap<String, usize>) {
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            let Some(id) = op.get("operationId").and_then(Value::as_str) else {
                continue;
            };
            if counts.get(id).copied().unwrap_or(0) > 1 {
                let slug: String = path
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                let slug = slug.trim_matches('_').replace("__", "_");
                op["operationId"] = json!(format!("{method}_{slug}"));
            }
        }
    }
}
