//! Plan review (the `review_plan` setting): after the brief, `plan_research` asks the research
//! model for the topics it would research, and `review_plan` interrupts with the brief and the
//! topics. The user approves, edits them, or rejects the plan with feedback (it is planned
//! again); only an approved plan reaches the supervisor, whose first round researches exactly
//! the approved topics. The model call is a node of its own so that resuming the review (which
//! re-runs the node) never plans again behind the user's back.

use super::main_graph::metered;
use super::messages::{self as msg, Message};
use super::model::{Caller, Deps, Role, run_config};
use super::state::{AgentState, AgentUpdate};
use crate::graph::{Command, NodeContext, NodeError, Write};
use crate::llm::ResponseSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

/// The name the plan has in the interrupt's action request (LangChain's HITL shape, so
/// front ends that render those show approve / edit / reject).
const ACTION: &str = "research_plan";

#[derive(Deserialize)]
struct Plan {
    topics: Vec<String>,
}

pub(super) async fn plan(
    deps: Deps,
    state: AgentState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let cfg = run_config(&ctx)?;
    let caller = Caller::new(&deps, &ctx, &cfg);
    let brief = state.research_brief.unwrap_or_default();
    let feedback = state.plan_feedback.unwrap_or_default();
    let max = cfg.max_concurrent_research_units;
    let prompt = deps.prompts.render(
        "plan_research",
        &[
            ("date", &msg::today()),
            ("research_brief", &brief),
            ("max_topics", &max.to_string()),
            (
                "feedback",
                if feedback.is_empty() {
                    "none"
                } else {
                    &feedback
                },
            ),
        ],
    );
    let req = caller.request(Role::Research, vec![Message::human(prompt)])?;
    let schema = ResponseSchema {
        name: "ResearchPlan".into(),
        description: "The topics research assistants will investigate.".into(),
        schema: json!({"type": "object", "properties": {"topics": {"type": "array",
            "items": {"type": "string"}, "minItems": 1, "maxItems": max,
            "description": "One fully described topic per research assistant."}},
            "required": ["topics"]}),
    };
    let answer: Plan = caller.structured(req, schema, None).await?;
    let topics = clean(answer.topics, max as usize);
    if topics.is_empty() {
        return Err(NodeError::new(
            "ResearchError",
            "plan stage: the research model planned no topics",
        ));
    }
    let upd = AgentUpdate {
        research_plan: Some(Some(topics)),
        ..metered(&ctx)
    };
    Ok(Command::write(upd)?.goto("review_plan"))
}

/// Trimmed, non-empty, without repeats, at most `max`.
fn clean(topics: Vec<String>, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for topic in topics {
        let topic = topic.trim().to_owned();
        if !topic.is_empty() && !out.contains(&topic) {
            out.push(topic);
        }
    }
    out.truncate(max);
    out
}

/// What the user decided.
#[derive(Debug, PartialEq)]
enum Decision {
    Approve {
        brief: Option<String>,
        topics: Option<Vec<String>>,
    },
    Reject {
        feedback: String,
    },
}

pub(super) async fn review(
    deps: Deps,
    state: AgentState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let cfg = run_config(&ctx)?;
    let max = cfg.max_concurrent_research_units as usize;
    let brief = state.research_brief.clone().unwrap_or_default();
    let topics = state.research_plan.clone().unwrap_or_default();
    // An answer that cannot be read is asked again, saying why (the node's next question).
    let mut problem = None;
    let decision = loop {
        let answer = ctx.interrupt(question(&brief, &topics, max, problem.as_deref()))?;
        match decision(&answer, max) {
            Ok(decision) => break decision,
            Err(why) => problem = Some(why),
        }
    };
    match decision {
        Decision::Reject { feedback } => {
            let upd = AgentUpdate {
                plan_feedback: Some(Some(feedback)),
                ..metered(&ctx)
            };
            Ok(Command::write(upd)?.goto("plan_research"))
        }
        Decision::Approve {
            brief: new_brief,
            topics: new_topics,
        } => {
            let brief = new_brief.unwrap_or(brief);
            let topics = new_topics.unwrap_or(topics);
            let upd = approved(&deps, &ctx, &state, brief, topics);
            Ok(Command::write(upd)?.goto("research_supervisor"))
        }
    }
}

/// The interrupt's value: our fields, plus LangChain's HITL request shape.
fn question(brief: &str, topics: &[String], max: usize, problem: Option<&str>) -> Value {
    let mut value = json!({
        "type": "plan_review",
        "research_brief": brief,
        "topics": topics,
        "max_topics": max,
        "how_to_answer": "Resume with {\"action\": \"approve\"}; or {\"action\": \"edit\", \
            \"research_brief\"?: string, \"topics\"?: [string]} to change the plan and approve it; \
            or {\"action\": \"reject\", \"feedback\": string} to have it planned again.",
        "action_requests": [{"name": ACTION, "args": {"research_brief": brief, "topics": topics},
                             "description": "Review the research plan before researchers start."}],
        "review_configs": [{"action_name": ACTION, "allowed_decisions": ["approve", "edit", "reject"]}],
    });
    if let (Some(problem), Some(map)) = (problem, value.as_object_mut()) {
        map.insert("error".into(), json!(problem));
    }
    value
}

/// Reads an answer: ours (`"approve"`, `{"action": ...}`) or LangChain's HITL response
/// (`{"decisions": [{"type": ...}]}`).
fn decision(answer: &Value, max: usize) -> Result<Decision, String> {
    let approve = || Decision::Approve {
        brief: None,
        topics: None,
    };
    match answer {
        Value::String(s) if s == "approve" => return Ok(approve()),
        Value::Bool(true) => return Ok(approve()),
        _ => {}
    }
    if let Some(first) = answer["decisions"].as_array().and_then(|d| d.first()) {
        return match first["type"].as_str() {
            Some("approve") => Ok(approve()),
            Some("edit") => edit(&first["edited_action"]["args"], max),
            Some("reject") => Ok(Decision::Reject {
                feedback: first["message"].as_str().unwrap_or_default().to_owned(),
            }),
            _ => Err("decisions[0].type must be approve, edit or reject".into()),
        };
    }
    match answer["action"].as_str() {
        Some("approve") => Ok(approve()),
        Some("edit") => edit(answer, max),
        Some("reject") => match answer["feedback"].as_str().map(str::trim) {
            Some(feedback) if !feedback.is_empty() => Ok(Decision::Reject {
                feedback: feedback.to_owned(),
            }),
            _ => Err("a rejection needs feedback: say what the plan should do instead".into()),
        },
        _ => Err(format!(
            "could not read the answer {answer}: expected \"approve\", or an object whose \
             \"action\" is approve, edit or reject"
        )),
    }
}

fn edit(args: &Value, max: usize) -> Result<Decision, String> {
    let brief = match &args["research_brief"] {
        Value::Null => None,
        Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        _ => return Err("research_brief must be a non-empty string".into()),
    };
    let topics = match &args["topics"] {
        Value::Null => None,
        Value::Array(items) => {
            let list: Option<Vec<String>> = items
                .iter()
                .map(|t| t.as_str().map(str::to_owned))
                .collect();
            let list = clean(list.ok_or("topics must be a list of strings")?, usize::MAX);
            if list.is_empty() || list.len() > max {
                return Err(format!(
                    "topics must list 1 to {max} topics, got {}",
                    list.len()
                ));
            }
            Some(list)
        }
        _ => return Err("topics must be a list of strings".into()),
    };
    Ok(Decision::Approve { brief, topics })
}

/// The update that starts the research on an approved plan: the supervisor's history gets the
/// brief with the plan, and a first turn that delegates each approved topic, which its first
/// round runs without asking the model.
fn approved(
    deps: &Deps,
    ctx: &NodeContext,
    state: &AgentState,
    brief: String,
    topics: Vec<String>,
) -> AgentUpdate {
    let listed: String = topics
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{}. {t}\n", i + 1))
        .collect();
    let question = deps.prompts.render(
        "plan_approved",
        &[("research_brief", &brief), ("topics", &listed)],
    );
    // A researcher sees only its topic: each carries the brief as context (a small model's
    // plan names topics in two words).
    let mut delegate = Message::ai(&format!("run-{}", Uuid::new_v4()), "");
    delegate.set_calls(
        "ConductResearch",
        topics.iter().map(|t| {
            let topic = deps
                .prompts
                .render("plan_topic", &[("topic", t), ("research_brief", &brief)]);
            json!({"research_topic": topic.trim()})
        }),
    );
    let system = state.supervisor_messages.first().cloned();
    let history: Vec<Message> = system
        .into_iter()
        .chain([Message::human(question), delegate])
        .collect();
    AgentUpdate {
        research_brief: Some(brief),
        research_plan: Some(Some(topics)),
        supervisor_messages: Some(Write::Replace(history)),
        ..metered(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_every_accepted_shape() {
        let approve = Decision::Approve {
            brief: None,
            topics: None,
        };
        assert_eq!(decision(&json!("approve"), 3), Ok(approve));
        assert!(matches!(
            decision(&json!({"decisions": [{"type": "approve"}]}), 3),
            Ok(Decision::Approve { .. })
        ));
        assert_eq!(
            decision(&json!({"action": "edit", "topics": [" a ", "b", "a"]}), 3),
            Ok(Decision::Approve {
                brief: None,
                topics: Some(vec!["a".into(), "b".into()])
            })
        );
        assert_eq!(
            decision(&json!({"action": "reject", "feedback": "narrower"}), 3),
            Ok(Decision::Reject {
                feedback: "narrower".into()
            })
        );
    }

    #[test]
    fn unreadable_answers_say_why() {
        for (answer, says) in [
            (json!("yes please"), "expected"),
            (json!({"action": "reject"}), "feedback"),
            (json!({"action": "edit", "topics": []}), "1 to 3"),
            (
                json!({"action": "edit", "topics": ["a", "b", "c", "d"]}),
                "1 to 3",
            ),
            (json!({"action": "edit", "topics": [1]}), "strings"),
            (
                json!({"action": "edit", "research_brief": ""}),
                "research_brief",
            ),
        ] {
            let why = decision(&answer, 3).unwrap_err();
            assert!(why.contains(says), "{answer}: {why}");
        }
    }
}
