//! Plan review (the `review_plan` setting): after the brief, `plan_research` asks the research
//! model for the topics it would research, and `review_plan` interrupts with the brief and the
//! topics. The user approves, edits them, or rejects the plan with feedback (it is planned
//! again); only an approved plan reaches the supervisor, whose first round researches exactly
//! the approved topics. The model call is a node of its own so that resuming the review (which
//! re-runs the node) never plans again behind the user's back.

use super::messages::{self as msg, Message};
use super::metering::{metered, resume_meter};
use super::model::{Caller, Deps, Role, run_config};
use super::state::{AgentState, AgentUpdate};
use crate::graph::{Command, NodeContext, NodeError, Write};
use crate::llm::ResponseSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

/// The name the plan has in the interrupt's action request (LangChain's HITL shape, so
/// front ends that render those show approve / edit / reject).
const ACTION: &str = "research_plan";

#[derive(Deserialize, Serialize)]
struct Plan {
    topics: Vec<String>,
}

pub(super) async fn plan(
    deps: Deps,
    state: AgentState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    resume_meter(&ctx, &state).await;
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
    resume_meter(&ctx, &state).await;
    let cfg = run_config(&ctx)?;
    let max = cfg.max_concurrent_research_units as usize;
    let brief = state.research_brief.clone().unwrap_or_default();
    let topics = state.research_plan.clone().unwrap_or_default();
    // An answer that cannot be read is asked again, saying why (the node's next question).
    let mut problem = None;
    let decision = loop {
        let question = Question::new(&brief, &topics, max, problem.as_deref());
        let answer = ctx.interrupt(json!(question))?;
        let read = Answer::deserialize(&answer).map_err(|_| UNREADABLE.to_owned());
        match read.and_then(|answer| answer.decide(max)) {
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
#[derive(Serialize)]
struct Question<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    research_brief: &'a str,
    topics: &'a [String],
    max_topics: usize,
    how_to_answer: &'static str,
    action_requests: [ActionRequest<'a>; 1],
    review_configs: [ReviewConfig; 1],
    /// Why the last answer could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct ActionRequest<'a> {
    name: &'static str,
    args: PlanArgs<'a>,
    description: &'static str,
}

#[derive(Serialize)]
struct PlanArgs<'a> {
    research_brief: &'a str,
    topics: &'a [String],
}

#[derive(Serialize)]
struct ReviewConfig {
    action_name: &'static str,
    allowed_decisions: [&'static str; 3],
}

impl<'a> Question<'a> {
    fn new(brief: &'a str, topics: &'a [String], max: usize, problem: Option<&'a str>) -> Self {
        Self {
            kind: "plan_review",
            research_brief: brief,
            topics,
            max_topics: max,
            how_to_answer: HOW_TO_ANSWER,
            action_requests: [ActionRequest {
                name: ACTION,
                args: PlanArgs {
                    research_brief: brief,
                    topics,
                },
                description: "Review the research plan before researchers start.",
            }],
            review_configs: [ReviewConfig {
                action_name: ACTION,
                allowed_decisions: ["approve", "edit", "reject"],
            }],
            error: problem,
        }
    }
}

const HOW_TO_ANSWER: &str = "Resume with {\"action\": \"approve\"}; or {\"action\": \"edit\", \
    \"research_brief\"?: string, \"topics\"?: [string]} to change the plan and approve it; or \
    {\"action\": \"reject\", \"feedback\": string} to have it planned again.";

const UNREADABLE: &str = "could not read the answer: expected \"approve\", or an object whose \
    \"action\" is approve, edit or reject, with \"research_brief\" a string, \"topics\" a list of \
    strings and \"feedback\" a string";

/// An answer: ours (`"approve"`, `true`, `{"action": ...}`) or LangChain's HITL response
/// (`{"decisions": [{"type": ...}]}`).
#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Word(String),
    Flag(bool),
    Hitl { decisions: Vec<HitlDecision> },
    Ours(OurAnswer),
}

#[derive(Deserialize)]
struct HitlDecision {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    edited_action: Option<EditedAction>,
}

#[derive(Default, Deserialize)]
struct EditedAction {
    #[serde(default)]
    args: PlanEdit,
}

#[derive(Default, Deserialize)]
struct PlanEdit {
    #[serde(default)]
    research_brief: Option<String>,
    #[serde(default)]
    topics: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct OurAnswer {
    action: String,
    #[serde(default)]
    feedback: Option<String>,
    #[serde(flatten)]
    edit: PlanEdit,
}

impl Answer {
    /// What the answer decides, or why it decides nothing.
    fn decide(self, max: usize) -> Result<Decision, String> {
        let approve = Decision::Approve {
            brief: None,
            topics: None,
        };
        match self {
            Self::Word(word) if word == "approve" => Ok(approve),
            Self::Flag(true) => Ok(approve),
            Self::Word(_) | Self::Flag(false) => Err(UNREADABLE.into()),
            Self::Hitl { decisions } => {
                let Some(first) = decisions.into_iter().next() else {
                    return Err(UNREADABLE.into());
                };
                match first.kind.as_str() {
                    "approve" => Ok(approve),
                    "edit" => first.edited_action.unwrap_or_default().args.decide(max),
                    "reject" => Ok(Decision::Reject {
                        feedback: first.message.unwrap_or_default(),
                    }),
                    _ => Err("decisions[0].type must be approve, edit or reject".into()),
                }
            }
            Self::Ours(answer) => match answer.action.as_str() {
                "approve" => Ok(approve),
                "edit" => answer.edit.decide(max),
                "reject" => match answer.feedback.as_deref().map(str::trim) {
                    Some(feedback) if !feedback.is_empty() => Ok(Decision::Reject {
                        feedback: feedback.to_owned(),
                    }),
                    _ => Err(
                        "a rejection needs feedback: say what the plan should do instead".into(),
                    ),
                },
                _ => Err(UNREADABLE.into()),
            },
        }
    }
}

impl PlanEdit {
    /// The edited plan, approved: a new brief, topics, or both.
    fn decide(self, max: usize) -> Result<Decision, String> {
        let brief = match self.research_brief {
            None => None,
            Some(s) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            Some(_) => return Err("research_brief must be a non-empty string".into()),
        };
        let topics = match self.topics {
            None => None,
            Some(list) => {
                let list = clean(list, usize::MAX);
                if list.is_empty() || list.len() > max {
                    return Err(format!(
                        "topics must list 1 to {max} topics, got {}",
                        list.len()
                    ));
                }
                Some(list)
            }
        };
        Ok(Decision::Approve { brief, topics })
    }
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

    fn decision(answer: &serde_json::Value, max: usize) -> Result<Decision, String> {
        Answer::deserialize(answer)
            .map_err(|_| UNREADABLE.to_owned())
            .and_then(|a| a.decide(max))
    }

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
