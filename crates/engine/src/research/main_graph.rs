//! The main graph: `clarify_with_user` → `write_research_brief` → `research_supervisor` →
//! `final_report_generation` (the report itself: `report/`); a question on a written report
//! goes from `clarify_with_user` to `answer_follow_up` (`report/follow_up.rs`), which answers
//! it or goes on to the brief.

use super::config::{FollowUp, SearchApi};
use super::messages::{self as msg, Message};
use super::metering::{metered, resume_meter};
use super::model::{Caller, Deps, Role, prepare_run, run_config};
use super::report::follow_up;
use super::state::FollowUpMode;
use super::state::{AgentState, AgentUpdate, SupervisorInput, SupervisorOutput};
use super::stream_fields::FieldStreamer;
use super::{plan_review, report, supervisor};
use crate::graph::{Command, END, Graph, NodeContext, NodeError, Write};
use crate::llm::ResponseSchema;
use crate::tools::SummaryLedger;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use uuid::Uuid;

pub fn build(id: &str, deps: Deps) -> Graph {
    let sup = Arc::new(supervisor::graph(deps.clone()));
    let (d1, d2, d4) = (deps.clone(), deps.clone(), deps.clone());
    let (d5, d6, d7) = (deps.clone(), deps.clone(), deps.clone());
    Graph::builder(id)
        .state::<AgentState>()
        .typed_node("clarify_with_user", move |s, c| clarify(d1.clone(), s, c))
        .typed_node("write_research_brief", move |s, c| brief(d2.clone(), s, c))
        .typed_node("plan_research", move |s, c| {
            plan_review::plan(d5.clone(), s, c)
        })
        .typed_node("review_plan", move |s, c| {
            plan_review::review(d6.clone(), s, c)
        })
        .typed_node("research_supervisor", move |s, c| {
            research(sup.clone(), s, c)
        })
        .typed_node("final_report_generation", move |s, c| {
            report::node(d4.clone(), s, c)
        })
        .typed_node("answer_follow_up", move |s, c| {
            report::follow_up::node(d7.clone(), s, c)
        })
        .start("clarify_with_user")
        .may_goto(
            "clarify_with_user",
            &["write_research_brief", "answer_follow_up", END],
        )
        .may_goto("answer_follow_up", &["write_research_brief", END])
        .may_goto(
            "write_research_brief",
            &["plan_research", "research_supervisor"],
        )
        .edge("plan_research", "review_plan")
        .may_goto("review_plan", &["research_supervisor", "plan_research"])
        .edge("research_supervisor", "final_report_generation")
        .edge("final_report_generation", END)
        .schemas(super::schemas(&deps))
        .config_check(super::config_check(&deps))
        // A report cut short by a spend cap says so in the run list too.
        .run_mark("stopped_early")
        .prepare(Arc::new(move |scope| prepare_run(&deps, scope)))
        .build()
}

#[derive(Deserialize, Serialize)]
struct ClarifyWithUser {
    need_clarification: bool,
    #[serde(default)]
    question: String,
    #[serde(default)]
    verification: String,
}

fn clarify_schema() -> ResponseSchema {
    ResponseSchema {
        name: "ClarifyWithUser".into(),
        description: "Whether to ask the user a clarifying question before researching.".into(),
        schema: json!({"type": "object", "properties": {
            "need_clarification": {"type": "boolean", "description": "Whether the user must be asked a clarifying question."},
            "question": {"type": "string", "description": "The question that clarifies the report's scope."},
            "verification": {"type": "string", "description": "A note confirming research will start."}},
            "required": ["need_clarification", "question", "verification"]}),
    }
}

async fn clarify(deps: Deps, state: AgentState, ctx: NodeContext) -> Result<Command, NodeError> {
    resume_meter(&ctx, &state).await;
    let cfg = run_config(&ctx)?;
    // A question on a written report is answered from its sources first (`follow_up`).
    // Under `follow_up = "research"` it goes on as Open Deep Research does.
    let mut researched = None;
    if follow_up::is_follow_up(&state) {
        // The earlier question again is researched afresh (no clarification: it was asked
        // before), every page read again, so the report can tell what changed.
        if cfg.follow_up != FollowUp::Answer
            && let Some(why) = follow_up::reruns(&state)
        {
            let upd = AgentUpdate {
                follow_up: Some(follow_up::rerun(&ctx, why)),
                ..metered(&ctx)
            };
            return Ok(Command::write(upd)?.goto("write_research_brief"));
        }
        if cfg.follow_up != FollowUp::Research {
            return Ok(Command::write(metered(&ctx))?.goto("answer_follow_up"));
        }
        researched = Some(follow_up::researched(&ctx, "follow_up = research"));
    }
    if !cfg.allow_clarification {
        let upd = AgentUpdate {
            follow_up: researched,
            ..metered(&ctx)
        };
        return Ok(Command::write(upd)?.goto("write_research_brief"));
    }
    let caller = Caller::new(&deps, &ctx, &cfg);
    let history = msg::buffer_string(&state.messages);
    let date = msg::today();
    let prompt = deps.prompts.render(
        "clarify_with_user",
        &[("messages", &history), ("date", &date)],
    );
    let req = caller.request(Role::Research, vec![Message::human(prompt)])?;
    let streamer = FieldStreamer::new(
        &ctx,
        format!("run-{}", Uuid::new_v4()),
        &["question", "verification"],
    );
    let answer: ClarifyWithUser = caller
        .structured(req, clarify_schema(), Some(&streamer))
        .await?;
    // The message keeps the id its streamed tokens carried.
    let reply = |text: &str| Message::ai(streamer.id(), text);
    // Metered after the call, so the step's usage holds it.
    let mut upd = AgentUpdate {
        follow_up: researched,
        ..metered(&ctx)
    };
    if answer.need_clarification && !answer.question.trim().is_empty() {
        upd.messages = Some(vec![reply(&answer.question)]);
        return Ok(Command::write(upd)?.goto(END));
    }
    if !answer.verification.trim().is_empty() {
        upd.messages = Some(vec![reply(&answer.verification)]);
    }
    Ok(Command::write(upd)?.goto("write_research_brief"))
}

#[derive(Deserialize, Serialize)]
struct ResearchQuestion {
    research_brief: String,
}

async fn brief(deps: Deps, state: AgentState, ctx: NodeContext) -> Result<Command, NodeError> {
    resume_meter(&ctx, &state).await;
    let cfg = run_config(&ctx)?;
    let caller = Caller::new(&deps, &ctx, &cfg);
    let history = msg::buffer_string(&state.messages);
    let date = msg::today();
    let prompt = deps
        .prompts
        .render("research_brief", &[("messages", &history), ("date", &date)]);
    let req = caller.request(Role::Research, vec![Message::human(prompt)])?;
    let schema = ResponseSchema {
        name: "ResearchQuestion".into(),
        description: "The research question that will guide the research.".into(),
        schema: json!({"type": "object", "properties": {"research_brief": {"type": "string",
                       "description": "A research question that will be used to guide the research."}},
                       "required": ["research_brief"]}),
    };
    // The brief is kept in `research_brief`, not in `messages`, so it is not streamed as a
    // message: a client shown its tokens as one would lose that message on reload (the
    // conversation it saw would not be the thread's). Clients see it in the step's updates.
    let answer: ResearchQuestion = caller.structured(req, schema, None).await?;
    if answer.research_brief.trim().is_empty() {
        return Err(NodeError::new(
            "ResearchError",
            "brief stage: the research model returned an empty research brief",
        ));
    }
    let supervisor_prompt = deps.prompts.render(
        "supervisor_system",
        &[
            ("date", &date),
            (
                "max_concurrent_research_units",
                &cfg.max_concurrent_research_units.to_string(),
            ),
            (
                "max_researcher_iterations",
                &cfg.max_researcher_iterations.to_string(),
            ),
        ],
    );
    let supervisor = vec![
        Message::system(supervisor_prompt),
        Message::human(answer.research_brief.clone()),
    ];
    let upd = AgentUpdate {
        research_brief: Some(answer.research_brief),
        supervisor_messages: Some(Write::Replace(supervisor)),
        // A new brief is planned afresh.
        research_plan: Some(None),
        plan_feedback: Some(None),
        ..metered(&ctx)
    };
    let next = if cfg.review_plan {
        "plan_research"
    } else {
        "research_supervisor"
    };
    Ok(Command::write(upd)?.goto(next))
}

async fn research(
    sup: Arc<Graph>,
    state: AgentState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    resume_meter(&ctx, &state).await;
    // A re-run reads every page again (`what_changed`): nothing of the last run is reused.
    let rerun = state
        .follow_up
        .as_ref()
        .is_some_and(|t| t.mode == FollowUpMode::Rerun);
    // Pages earlier runs on this thread summarised are not paid for again.
    // What the supervisor does not need (the conversation, earlier raw notes) is let go here,
    // not held while it researches.
    let (sources, input) = {
        let s = state;
        let input = SupervisorInput {
            supervisor_messages: s.supervisor_messages,
            research_brief: s.research_brief,
        };
        (s.sources, input)
    };
    let ledger = ctx.scope.local::<SummaryLedger>();
    for source in sources.into_iter().filter(|_| !rerun) {
        if let Some(summary) = source.summary {
            ledger.remember(&source.url, summary);
        }
    }
    let out: SupervisorOutput = ctx.typed_subgraph(&sup, &input).await?;
    let sources = if !rerun {
        Write::Add(out.sources)
    } else if out.sources.is_empty() && run_config(&ctx)?.search_api != SearchApi::None {
        // Failing here keeps the last report's sources: a re-run whose searches all failed
        // must not leave the thread unable to answer questions on its report.
        return Err(NodeError::new(
            "NoSourcesError",
            "research stage: the re-run of the thread's question gathered no sources (no \
             search returned any result), so no new report was written; the last report and \
             its sources are kept.",
        ));
    } else {
        Write::Replace(out.sources)
    };
    // Only what this round added flows back (ODR re-applied the whole subgraph state through
    // the parent's reducers, duplicating raw notes and supervisor messages on later turns).
    let upd = AgentUpdate {
        supervisor_messages: Some(Write::Replace(out.supervisor_messages)),
        notes: Some(Write::Replace(out.notes)),
        raw_notes: Some(Write::Add(out.raw_notes)),
        sources: Some(sources),
        ..metered(&ctx)
    };
    Command::write(upd)
}
