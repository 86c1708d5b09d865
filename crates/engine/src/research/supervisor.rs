//! The supervisor subgraph: `supervisor` (the lead model picks tools) ⇄ `supervisor_tools`
//! (reflections, parallel researchers, exit checks).

use super::cost::over_cap;
use super::events::ResearchEvent;
use super::fallbacks::{self, AgentFallback};
use super::messages::{self as msg, Kind, Message, ToolCall};
use super::model::{Caller, Deps, Role, run_config};
use super::state::{ResearcherInput, ResearcherOutput, Source, SupervisorState, SupervisorUpdate};
use super::{research_complete_tool, researcher, think_tool};
use crate::graph::{Command, END, Graph, NodeContext, NodeError, Write};
use futures::future::join_all;
use serde_json::json;
use std::sync::Arc;

pub fn graph(deps: Deps) -> Graph {
    let researcher = Arc::new(researcher::graph(deps.clone()));
    let (d1, d2) = (deps.clone(), deps);
    Graph::builder("supervisor")
        .state::<SupervisorState>()
        .typed_node("supervisor", move |s, c| supervisor(d1.clone(), s, c))
        .typed_node("supervisor_tools", move |s, c| {
            tools(d2.clone(), researcher.clone(), s, c)
        })
        .start("supervisor")
        .edge("supervisor", "supervisor_tools")
        .may_goto("supervisor_tools", &["supervisor", END])
        .build()
}

/// The arguments of `ConductResearch`.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)] // Read as JSON: a small model's arguments are taken leniently.
struct ConductResearch {
    /// The topic to research: a single topic, described in full detail (at least a paragraph).
    research_topic: String,
}

fn conduct_research_tool() -> crate::llm::ToolSpec {
    crate::llm::ToolSpec::of::<ConductResearch>(
        "ConductResearch",
        "Delegate research on one topic to a research assistant.",
    )
}

async fn supervisor(
    deps: Deps,
    state: SupervisorState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let iterations = state.research_iterations + 1;
    if over_cap(&ctx).is_some() {
        // No more model calls: the tools step finds no delegation and ends the research.
        return Ok(Command::default());
    }
    let cfg = run_config(&ctx)?;
    if iterations > cfg.max_researcher_iterations {
        // The rounds are spent: ODR calls the model once more here and then discards its
        // answer (its tools step ends the research first). That call is not made.
        return Ok(Command::default());
    }
    // A history that ends in calls nobody answered yet holds an approved plan's delegations:
    // they are this round, without a model call.
    if let Some(last) = state.supervisor_messages.last()
        && last.kind() == Kind::Ai
        && !last.tool_calls().is_empty()
    {
        let upd = SupervisorUpdate {
            research_iterations: Some(iterations),
            ..SupervisorUpdate::default()
        };
        return Ok(Command::write(upd)?.goto("supervisor_tools"));
    }
    let caller = Caller::new(&deps, &ctx, &cfg);
    let delegated = msg::has_result_of(&state.supervisor_messages, "ConductResearch");
    let brief = state.research_brief.clone().unwrap_or_default();
    // The history moves into the request: one copy while the model answers.
    let req = caller.request(Role::Research, state.supervisor_messages)?;
    let req = caller.with_tools(
        req,
        vec![
            conduct_research_tool(),
            research_complete_tool(),
            think_tool(),
        ],
        vec![],
    );
    let mut message = Message::from_model(caller.act(req).await?.message);
    let last_round = iterations >= cfg.max_researcher_iterations;
    if !delegated && ends_undelegated(&message, last_round) {
        delegate_brief(&ctx, &brief, &mut message);
    }
    let upd = SupervisorUpdate {
        supervisor_messages: Some(Write::Add(vec![message])),
        research_iterations: Some(iterations),
        ..SupervisorUpdate::default()
    };
    Ok(Command::write(upd)?.goto("supervisor_tools"))
}

/// Whether this answer, in a research that has delegated nothing yet, would end it with nothing
/// delegated: prose (even after the corrective turn), `ResearchComplete`, or only thinking in
/// the last round (the 1.5B model often reflects first, and with one round that was the end).
fn ends_undelegated(message: &Message, last_round: bool) -> bool {
    let calls = message.tool_calls();
    if calls.iter().any(|c| c.name == "ConductResearch") {
        return false;
    }
    !message.acted() || last_round || calls.iter().any(|c| c.name == "ResearchComplete")
}

/// A supervisor that would end the research before delegating anything: rather than a run with
/// no sources, the brief is researched as one topic (in place of the calls it made), and the
/// run says so.
fn delegate_brief(ctx: &NodeContext, brief: &str, message: &mut Message) {
    if brief.trim().is_empty() {
        return;
    }
    let calls: Vec<String> = message.tool_calls().into_iter().map(|c| c.name).collect();
    let said = if calls.is_empty() {
        format!("it wrote: {}", msg::excerpt(&message.text(), 160))
    } else {
        format!("it called {}", calls.join(", "))
    };
    let fallback = AgentFallback::BriefAsOneTopic.as_str();
    message.add_call(
        "ConductResearch",
        json!({"research_topic": brief}),
        fallback,
    );
    fallbacks::record(
        ctx,
        fallback,
        &format!("the supervisor never delegated ({said}); researching the brief as one topic"),
    );
}

/// The research results in the supervisor's history: what the report is written from. (ODR also
/// passed on think-tool echoes and over-limit errors.)
fn notes(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.is_result_of("ConductResearch") && !m.failed())
        .map(Message::text)
        .collect()
}

fn finish(messages: &[Message]) -> Result<Command, NodeError> {
    let upd = SupervisorUpdate {
        notes: Some(Write::Replace(notes(messages))),
        ..SupervisorUpdate::default()
    };
    Ok(Command::write(upd)?.goto(END))
}

/// One round's results.
#[derive(Default)]
struct Round {
    messages: Vec<Message>,
    raw_notes: Vec<String>,
    sources: Vec<Source>,
}

async fn tools(
    deps: Deps,
    researcher: Arc<Graph>,
    state: SupervisorState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let cfg = run_config(&ctx)?;
    let history = &state.supervisor_messages;
    let (calls, invalid) = history
        .last()
        .map(|m| (m.tool_calls(), m.invalid_tool_calls()))
        .unwrap_or_default();
    let exhausted = state.research_iterations > cfg.max_researcher_iterations;
    if exhausted
        || over_cap(&ctx).is_some()
        || (calls.is_empty() && invalid.is_empty())
        || calls.iter().any(|c| c.name == "ResearchComplete")
    {
        return finish(history);
    }
    // The history is not needed while the researchers run.
    drop(state);
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
                let reflection = call.text_arg("reflection");
                round.messages.push(Message::tool_result(format!("Reflection recorded: {reflection}"), "think_tool", &call.id));
            }
            "ConductResearch" => {}
            other => round.messages.push(Message::tool_error(format!(
                "Error: there is no tool named '{other}'. Use ConductResearch, think_tool or ResearchComplete."
            ), other, &call.id)),
        }
    }
    for call in overflow {
        round.messages.push(Message::tool_error(format!(
            "Error: Did not run this research as you have already exceeded the maximum number of concurrent research units. Please try again with {cap} or fewer research units."
        ), "ConductResearch", &call.id));
    }
    for call in &invalid {
        round.messages.push(Message::tool_error(
            format!(
                "Error: the arguments of this call were not valid JSON ({}).",
                call.args["error"]
            ),
            &call.name,
            &call.id,
        ));
    }
    let upd = SupervisorUpdate {
        supervisor_messages: Some(Write::Add(round.messages)),
        raw_notes: Some(Write::Add(round.raw_notes)),
        sources: Some(Write::Add(round.sources)),
        ..SupervisorUpdate::default()
    };
    Ok(Command::write(upd)?.goto("supervisor"))
}

impl Round {
    /// Records one researcher's outcome; a failed researcher is reported, not swallowed.
    fn absorb(&mut self, call: &ToolCall, outcome: Result<ResearcherOutput, NodeError>) {
        match outcome {
            Ok(out) => {
                let compressed = out.compressed_research.unwrap_or_default();
                self.messages.push(Message::tool_result(
                    compressed,
                    "ConductResearch",
                    &call.id,
                ));
                if !out.raw_notes.is_empty() {
                    self.raw_notes.push(out.raw_notes.join("\n"));
                }
                self.sources.extend(out.sources);
            }
            Err(e) => {
                let text = format!(
                    "Error: the research assistant for this topic failed, so no findings were gathered for it ({e})."
                );
                self.messages
                    .push(Message::tool_error(text, "ConductResearch", &call.id));
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
) -> Result<Result<ResearcherOutput, NodeError>, NodeError> {
    let topic = call.text_arg("research_topic").trim().to_owned();
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
    let input = ResearcherInput {
        researcher_messages: vec![Message::human(topic.clone())],
        research_topic: topic.clone(),
    };
    // The call's position and id name its researcher's checkpoints: a resumed run re-running
    // this step finds finished researchers done and goes on with the others. (Weak models
    // repeat or omit ids; the position keeps keys apart.)
    let key = format!("{index}:{}", call.id);
    let outcome = ctx
        .typed_subgraph_keyed("researcher", &key, graph, &input)
        .await;
    drop(permit);
    match outcome {
        Err(NodeError::Cancelled) => Err(NodeError::Cancelled),
        Err(e) => {
            ResearchEvent::ResearcherError {
                topic,
                error: e.to_string(),
            }
            .send(ctx);
            tracing::warn!(error = %e, "a researcher failed; the supervisor continues without it");
            Ok(Err(e))
        }
        Ok(out) => Ok(Ok(out)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tools' argument schemas come from their structs, in the shape providers take.
    #[test]
    fn tool_schemas_come_from_the_argument_types() {
        assert_eq!(
            conduct_research_tool().parameters,
            json!({"type": "object", "properties": {"research_topic": {"type": "string",
                "description": "The topic to research: a single topic, described in full detail (at least a paragraph)."}},
                "required": ["research_topic"]})
        );
        assert_eq!(
            research_complete_tool().parameters,
            json!({"type": "object", "properties": {}, "required": []})
        );
        assert_eq!(think_tool().parameters["required"], json!(["reflection"]));
    }
}
