//! The supervisor subgraph: `supervisor` (the lead model picks tools) ⇄ `supervisor_tools`
//! (reflections, parallel researchers, exit checks).

use super::cost::over_cap;
use super::fallbacks::{self, AgentFallback};
use super::keys;
use super::messages::{self as msg, ToolCall, tool};
use super::model::{Caller, Deps, Role, run_config};
use super::{research_complete_tool, researcher, think_tool};
use crate::graph::{Command, END, Graph, NodeContext, NodeError, Reducer};
use futures::future::join_all;
use serde_json::{Value, json};
use std::sync::Arc;

pub fn graph(deps: Deps) -> Graph {
    let researcher = Arc::new(researcher::graph(deps.clone()));
    let (d1, d2) = (deps.clone(), deps);
    Graph::builder("supervisor")
        .channel(
            keys::SUPERVISOR_MESSAGES,
            Reducer::AppendOrOverride,
            json!([]),
        )
        .channel(keys::RESEARCH_BRIEF, Reducer::Override, Value::Null)
        .channel(keys::NOTES, Reducer::AppendOrOverride, json!([]))
        .channel(keys::RESEARCH_ITERATIONS, Reducer::Override, json!(0))
        .channel(keys::RAW_NOTES, Reducer::AppendOrOverride, json!([]))
        .channel(keys::SOURCES, Reducer::AppendOrOverride, json!([]))
        .node("supervisor", move |s, c| supervisor(d1.clone(), s, c))
        .node("supervisor_tools", move |s, c| {
            tools(d2.clone(), researcher.clone(), s, c)
        })
        .start("supervisor")
        .edge("supervisor", "supervisor_tools")
        .may_goto("supervisor_tools", &["supervisor", END])
        .build()
}

fn conduct_research_tool() -> crate::llm::ToolSpec {
    super::tool(
        "ConductResearch",
        "Delegate research on one topic to a research assistant.",
        json!({"research_topic": {"type": "string", "description":
            "The topic to research: a single topic, described in full detail (at least a paragraph)."}}),
        &["research_topic"],
    )
}

async fn supervisor(
    deps: Deps,
    state: Arc<crate::store::JsonMap>,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let iterations = state
        .get(keys::RESEARCH_ITERATIONS)
        .and_then(Value::as_u64)
        .unwrap_or(0)
        + 1;
    if over_cap(&ctx).is_some() {
        // No more model calls: the tools step finds no delegation and ends the research.
        return Ok(Command::default());
    }
    let cfg = run_config(&deps, &ctx)?;
    if iterations > u64::from(cfg.max_researcher_iterations) {
        // The rounds are spent: ODR calls the model once more here and then discards its
        // answer (its tools step ends the research first). That call is not made.
        return Ok(Command::default());
    }
    // A history that ends in calls nobody answered yet holds an approved plan's delegations:
    // they are this round, without a model call.
    if let Some(last) = msg::slice(&state, keys::SUPERVISOR_MESSAGES).last()
        && msg::kind(last) == "ai"
        && !msg::tool_calls(last).is_empty()
    {
        let mut upd = crate::store::JsonMap::new();
        upd.insert(keys::RESEARCH_ITERATIONS.into(), json!(iterations));
        return Ok(Command::update(upd).goto("supervisor_tools"));
    }
    let caller = Caller::new(&deps, &ctx, &cfg);
    let req = caller.request(Role::Research, msg::list(&state, keys::SUPERVISOR_MESSAGES))?;
    let req = caller.with_tools(
        req,
        vec![
            conduct_research_tool(),
            research_complete_tool(),
            think_tool(),
        ],
        vec![],
    );
    let mut message = caller.act(req).await?.message;
    let history = msg::slice(&state, keys::SUPERVISOR_MESSAGES);
    if !msg::acted(&message) && !msg::has_result_of(history, "ConductResearch") {
        delegate_brief(&ctx, &state, &mut message);
    }
    let mut upd = crate::store::JsonMap::new();
    upd.insert(keys::SUPERVISOR_MESSAGES.into(), json!([message]));
    upd.insert(keys::RESEARCH_ITERATIONS.into(), json!(iterations));
    Ok(Command::update(upd).goto("supervisor_tools"))
}

/// A supervisor that would end the research before delegating anything (it answered in prose
/// even after a corrective turn): rather than a run with no sources, the brief is researched as
/// one topic, and the run says so.
fn delegate_brief(ctx: &NodeContext, state: &crate::store::JsonMap, message: &mut Value) {
    let brief = msg::string(state, keys::RESEARCH_BRIEF);
    if brief.trim().is_empty() {
        return;
    }
    let said = msg::excerpt(&msg::text(message), 160);
    let fallback = AgentFallback::BriefAsOneTopic.as_str();
    msg::add_call(
        message,
        "ConductResearch",
        json!({"research_topic": brief}),
        fallback,
    );
    fallbacks::record(
        ctx,
        fallback,
        &format!(
            "the supervisor never delegated (it wrote: {said}); researching the brief as one topic"
        ),
    );
}

/// The research results in the supervisor's history: what the report is written from. (ODR also
/// passed on think-tool echoes and over-limit errors.)
fn notes(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| {
            msg::kind(m) == "tool" && m["name"] == "ConductResearch" && m["status"] != "error"
        })
        .map(|m| json!(msg::text(m)))
        .collect()
}

fn finish(messages: &[Value]) -> Command {
    let mut upd = crate::store::JsonMap::new();
    upd.insert(
        keys::NOTES.into(),
        json!({"type": "override", "value": notes(messages)}),
    );
    Command::update(upd).goto(END)
}

/// One round's results.
#[derive(Default)]
struct Round {
    messages: Vec<Value>,
    raw_notes: Vec<Value>,
    sources: Vec<Value>,
}

async fn tools(
    deps: Deps,
    researcher: Arc<Graph>,
    state: Arc<crate::store::JsonMap>,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let cfg = run_config(&deps, &ctx)?;
    let history = msg::slice(&state, keys::SUPERVISOR_MESSAGES);
    let last = history.last().cloned().unwrap_or(Value::Null);
    let calls = msg::tool_calls(&last);
    let invalid = msg::invalid_tool_calls(&last);
    let iterations = state
        .get(keys::RESEARCH_ITERATIONS)
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let exhausted = iterations > u64::from(cfg.max_researcher_iterations);
    if exhausted
        || over_cap(&ctx).is_some()
        || (calls.is_empty() && invalid.is_empty())
        || calls.iter().any(|c| c.name == "ResearchComplete")
    {
        return Ok(finish(history));
    }
    let cap = cfg.max_concurrent_research_units as usize;
    let research: Vec<&ToolCall> = calls
        .iter()
        .filter(|c| c.name == "ConductResearch")
        .collect();
    let (allowed, overflow) = research.split_at(research.len().min(cap));
    let results = join_all(
        allowed
            .iter()
            .enumerate()
            .map(|(i, c)| run_researcher(&deps, &researcher, &ctx, i, c)),
    )
    .await;
    let mut round = Round::default();
    for (call, result) in allowed.iter().zip(results) {
        round.absorb(call, result?);
    }
    for call in &calls {
        match call.name.as_str() {
            "think_tool" => {
                let reflection = call.args["reflection"].as_str().unwrap_or_default();
                round.messages.push(tool(format!("Reflection recorded: {reflection}"), "think_tool", &call.id));
            }
            "ConductResearch" => {}
            other => round.messages.push(error_tool(&format!(
                "Error: there is no tool named '{other}'. Use ConductResearch, think_tool or ResearchComplete."
            ), other, &call.id)),
        }
    }
    for call in overflow {
        round.messages.push(error_tool(&format!(
            "Error: Did not run this research as you have already exceeded the maximum number of concurrent research units. Please try again with {cap} or fewer research units."
        ), "ConductResearch", &call.id));
    }
    for call in &invalid {
        round.messages.push(error_tool(
            &format!(
                "Error: the arguments of this call were not valid JSON ({}).",
                call.args["error"]
            ),
            &call.name,
            &call.id,
        ));
    }
    let mut upd = crate::store::JsonMap::new();
    upd.insert(
        keys::SUPERVISOR_MESSAGES.into(),
        Value::Array(round.messages),
    );
    upd.insert(keys::RAW_NOTES.into(), Value::Array(round.raw_notes));
    upd.insert(keys::SOURCES.into(), Value::Array(round.sources));
    Ok(Command::update(upd).goto("supervisor"))
}

fn error_tool(content: &str, name: &str, id: &str) -> Value {
    let mut m = tool(content, name, id);
    m["status"] = json!("error");
    m
}

impl Round {
    /// Records one researcher's outcome; a failed researcher is reported, not swallowed.
    fn absorb(&mut self, call: &ToolCall, outcome: Result<crate::store::JsonMap, NodeError>) {
        match outcome {
            Ok(out) => {
                let compressed = out
                    .get(keys::COMPRESSED_RESEARCH)
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.messages
                    .push(tool(compressed, "ConductResearch", &call.id));
                let raw: Vec<String> = msg::slice(&out, keys::RAW_NOTES)
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect();
                if !raw.is_empty() {
                    self.raw_notes.push(json!(raw.join("\n")));
                }
                self.sources
                    .extend(msg::slice(&out, keys::SOURCES).iter().cloned());
            }
            Err(e) => {
                let text = format!(
                    "Error: the research assistant for this topic failed, so no findings were gathered for it ({e})."
                );
                self.messages
                    .push(error_tool(&text, "ConductResearch", &call.id));
            }
        }
    }
}

/// Runs one researcher under the process-wide researcher cap. Only cancellation is an error
/// here; a researcher's own failure comes back as its outcome.
async fn run_researcher(
    deps: &Deps,
    graph: &Graph,
    ctx: &NodeContext,
    index: usize,
    call: &ToolCall,
) -> Result<Result<crate::store::JsonMap, NodeError>, NodeError> {
    let topic = call.args["research_topic"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_owned();
    if topic.is_empty() {
        return Ok(Err(NodeError::new(
            "ValueError",
            "ConductResearch needs a non-empty research_topic",
        )));
    }
    let permit = tokio::select! {
        permit = deps.researcher_slots.clone().acquire_owned() => permit.map_err(|_| NodeError::Cancelled)?,
        () = ctx.cancelled().cancelled() => return Err(NodeError::Cancelled),
    };
    let input =
        json!({(keys::RESEARCHER_MESSAGES): [msg::human(&topic)], (keys::RESEARCH_TOPIC): topic});
    // The call's position and id name its researcher's checkpoints: a resumed run re-running
    // this step finds finished researchers done and goes on with the others. (Weak models
    // repeat or omit ids; the position keeps keys apart.)
    let key = format!("{index}:{}", call.id);
    let outcome = ctx.subgraph_keyed("researcher", &key, graph, input).await;
    drop(permit);
    match outcome {
        Err(NodeError::Cancelled) => Err(NodeError::Cancelled),
        Err(e) => {
            ctx.emit_run_custom(
                json!({"type": "researcher_error", "topic": topic, "error": e.to_string()}),
            );
            tracing::warn!(error = %e, "a researcher failed; the supervisor continues without it");
            Ok(Err(e))
        }
        Ok(out) => Ok(Ok(out)),
    }
}
