//! The researcher subgraph: `researcher` (the model picks tools) ⇄ `researcher_tools` (search,
//! reflect) → `compress_research` (clean up the findings for the supervisor).

use super::config::{ResearchConfig, SearchApi};
use super::cost::over_cap;
use super::events::ResearchEvent;
use super::fallbacks::{self, AgentFallback};
use super::messages::{self as msg, Kind, Message, ToolCall};
use super::model::{Caller, Deps, Role, node_error, run_config};
use super::raw_findings;
use super::replay;
use super::state::{LastTurn, ResearcherState, ResearcherUpdate, Source, SourceKind};
use super::{ResearchDeps, research_complete_tool, think_tool};
use crate::graph::{Command, END, Graph, NodeContext, NodeError, Write};
use crate::llm::{NativeTool, ResponseSchema, ToolSpec};
use crate::tools::mcp::{self, Toolbox};
use crate::tools::{
    LongPages, PageSummarizer, PageSummary, QueryOptions, SearchOptions, Searcher, SummaryLedger,
    web_search,
};
use async_trait::async_trait;
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::future::Future;

/// How a tool's result starts when the call failed (the model reads it; a redo tries again).
const TOOL_ERROR: &str = "Error executing tool";

pub fn graph(deps: Deps) -> Graph {
    let (d1, d2, d3) = (deps.clone(), deps.clone(), deps);
    Graph::builder("researcher")
        .state::<ResearcherState>()
        .typed_node("researcher", move |s, c| researcher(d1.clone(), s, c))
        .typed_node("researcher_tools", move |s: LastTurn, c| {
            tools(d2.clone(), s, c)
        })
        .typed_node("compress_research", move |s, c| compress(d3.clone(), s, c))
        .start("researcher")
        .edge("researcher", "researcher_tools")
        .may_goto("researcher_tools", &["researcher", "compress_research"])
        .edge("compress_research", END)
        .build()
}

fn search_tools(search: SearchApi) -> (Vec<ToolSpec>, Vec<NativeTool>, String) {
    if let Some(name) = search.tool_name() {
        let spec = crate::tools::web_search::tool_spec(name);
        let tool = ToolSpec {
            name: name.to_owned(),
            description: spec["description"].as_str().unwrap_or_default().to_owned(),
            parameters: spec["parameters"].clone(),
        };
        let note = format!("- {name}(queries): web search; several queries at once are fine.");
        return (vec![tool], vec![], note);
    }
    match search {
        SearchApi::Anthropic | SearchApi::Openai | SearchApi::Google => (
            vec![],
            vec![NativeTool::WebSearch { max_uses: 5 }],
            "- web_search: your built-in web search.".into(),
        ),
        _ => (
            vec![],
            vec![],
            "- (no web search is available for this run)".into(),
        ),
    }
}

/// The document search tool says which collection it searches; the prompt line too.
fn describe_corpus(deps: &ResearchDeps, corpus: &str, tools: &mut [ToolSpec]) -> String {
    let (name, about) = match deps.corpora.pick(corpus) {
        Ok(c) if !c.description().is_empty() => (c.name().to_owned(), c.description().to_owned()),
        Ok(c) => (c.name().to_owned(), format!("the '{}' documents", c.name())),
        Err(_) => (corpus.to_owned(), "documents".to_owned()),
    };
    let description = format!(
        "Full-text search over {about} (the '{name}' collection). Each query is a few keywords; \
         results are the best-matching sections with their text and location."
    );
    for tool in tools.iter_mut() {
        tool.description = description.clone();
    }
    format!(
        "- document_search(queries): searches {about}; give several short keyword queries at once."
    )
}

/// The name of the run's search tool, if the service searches for it.
fn search_tool(caller: &Caller<'_>) -> Option<&'static str> {
    caller.cfg.search_api.tool_name()
}

async fn researcher(
    deps: Deps,
    state: ResearcherState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let cfg = run_config(&ctx)?;
    if over_cap(&ctx).is_some() {
        // No more model calls: the tools step finds nothing to run and compresses.
        return Ok(Command::default());
    }
    let caller = Caller::new(&deps, &ctx, &cfg);
    let (mut tools, native, mut note) = search_tools(cfg.search_api);
    if cfg.search_api == SearchApi::Local {
        note = describe_corpus(&deps, &cfg.corpus, &mut tools);
    }
    tools.splice(0..0, [research_complete_tool(), think_tool()]);
    let history = &state.researcher_messages;
    let toolbox = mcp_tools(&caller).await;
    if history.len() <= 1 {
        announce_unavailable(&toolbox, &ctx);
    }
    let note = format!("{note}{}", mcp_note(&toolbox));
    tools.extend(toolbox.tools.iter().map(|t| ToolSpec {
        name: t.name.clone(),
        description: t.description.clone(),
        parameters: t.parameters.clone(),
    }));
    let prompt = system_prompt(&deps, &cfg, &note);
    let search_name = search_tool(&caller);
    let offers_search = search_name.is_some();
    let researched = |name: &str| Some(name) == search_name || toolbox.find(name).is_some();
    let searched_before = history
        .iter()
        .any(|m| m.tool_name().is_some_and(researched));
    let ResearcherState {
        researcher_messages,
        tool_call_iterations,
        research_topic,
        ..
    } = state;
    // The history moves into the request: the node holds one copy while the model answers.
    let mut messages = vec![Message::system(prompt)];
    messages.extend(researcher_messages);
    let shortened = super::context_budget::bound(&mut messages, cfg.researcher_context_chars);
    if shortened > 0 {
        tracing::debug!(
            shortened,
            "older search results shortened to fit the prompt budget"
        );
    }
    let req = caller.with_tools(caller.request(Role::Research, messages)?, tools, native);
    let mut message = Message::from_model(caller.act(req).await?.message);
    let iterations = tool_call_iterations + 1;
    let last_turn = iterations >= cfg.max_react_tool_calls;
    if offers_search
        && !searched_before
        && finishes_without_searching(&message, last_turn, &researched)
    {
        let topic = research_topic.as_deref().unwrap_or_default();
        search_the_plan(&ctx, topic, &mut message, search_name.unwrap_or_default());
    }
    let upd = ResearcherUpdate {
        researcher_messages: Some(vec![message]),
        tool_call_iterations: Some(iterations),
        ..ResearcherUpdate::default()
    };
    Ok(Command::write(upd)?.goto("researcher_tools"))
}

/// The researcher's system prompt: today's date, the operator's MCP prompt and what its
/// search tools reach.
fn system_prompt(deps: &Deps, cfg: &ResearchConfig, search_note: &str) -> String {
    let mcp = if cfg.mcp_prompt.trim().is_empty() {
        String::new()
    } else {
        format!("\n{}\n", cfg.mcp_prompt)
    };
    deps.prompts.render(
        "researcher_system",
        &[
            ("date", &msg::today()),
            ("mcp_prompt", &mcp),
            ("search_tools", search_note),
        ],
    )
}

/// Said once per researcher: an MCP server that cannot be used is news, not a failure.
fn announce_unavailable(toolbox: &Toolbox, ctx: &NodeContext) {
    for u in &toolbox.unavailable {
        ResearchEvent::McpError {
            server: u.server.clone(),
            tool: None,
            error: u.error.clone(),
        }
        .send(ctx);
    }
}

/// Whether this turn would end a researcher that has not searched yet: it answered in prose,
/// or called `ResearchComplete` (or used its last turn) without a search.
fn finishes_without_searching(
    message: &Message,
    last_turn: bool,
    researches: &dyn Fn(&str) -> bool,
) -> bool {
    if !message.acted() {
        return true;
    }
    let calls = message.tool_calls();
    let searches = calls.iter().any(|c| researches(&c.name));
    let completes = calls.iter().any(|c| c.name == "ResearchComplete");
    !searches && (completes || last_turn)
}

/// A researcher that would finish without one search: it wrote its search plan ("I will use the
/// following queries: …") even after a corrective turn, or declared its research complete
/// before searching. The queries it listed are searched for it (its topic when it listed none),
/// so the research rests on real sources. The run says so.
fn search_the_plan(ctx: &NodeContext, topic: &str, message: &mut Message, search_name: &str) {
    let said = message.text();
    let mut queries = listed_queries(&said);
    if queries.is_empty() {
        queries.push(msg::excerpt(topic, 300));
    }
    if queries.iter().all(|q| q.trim().is_empty()) {
        return;
    }
    let fallback = AgentFallback::PlannedSearch.as_str();
    let detail = format!(
        "the researcher would have finished without a search (it wrote: {}); searching {}",
        msg::excerpt(&said, 160),
        serde_json::to_string(&queries).unwrap_or_default()
    );
    message.add_call(search_name, json!({ "queries": queries }), fallback);
    fallbacks::record(ctx, fallback, &detail);
}

/// The run's MCP tools: the servers its `mcp_config` names (already checked at creation) plus
/// the operator's `always` servers. Listing is cached per connection, so this is cheap per turn.
async fn mcp_tools(caller: &Caller<'_>) -> Toolbox {
    let mcp_config = &caller.ctx.config()["configurable"]["mcp_config"];
    let servers = match mcp::spec::resolve(&caller.deps.mcp_policy, mcp_config) {
        Ok(s) => s,
        // The operator's configuration changed since the run was accepted.
        Err(error) => {
            return Toolbox {
                unavailable: vec![mcp::Unavailable {
                    server: "mcp_config".into(),
                    error,
                }],
                ..Toolbox::default()
            };
        }
    };
    if servers.is_empty() {
        return Toolbox::default();
    }
    let mut taken = vec!["ResearchComplete", "think_tool", "web_search"];
    taken.extend(SearchApi::TOOL_NAMES);
    mcp::toolbox(&caller.deps.mcp, &servers, &taken).await
}

/// The lines of the prompt's tool list that name the MCP tools, and the servers that failed.
fn mcp_note(toolbox: &Toolbox) -> String {
    let mut note = String::new();
    for t in &toolbox.tools {
        let about = msg::excerpt(&t.description, 200);
        note.push_str(&format!(
            "\n- {}: {about} (from the '{}' tool server; cite it by the Source line its result starts with)",
            t.name, t.server
        ));
    }
    for u in &toolbox.unavailable {
        note.push_str(&format!(
            "\n- (the '{}' tool server is unavailable for now: {})",
            u.server,
            msg::excerpt(&u.error, 200)
        ));
    }
    note
}

/// Search queries a model listed in prose: numbered or bulleted lines, quotes stripped; at
/// most five.
fn listed_queries(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let body = line
                .strip_prefix(['-', '*', '•'])
                .or_else(|| {
                    let digits = line.find(|c: char| !c.is_ascii_digit())?;
                    (digits > 0)
                        .then(|| line[digits..].strip_prefix(['.', ')']))
                        .flatten()
                })?
                .trim()
                .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '*' | '“' | '”'))
                .trim();
            (body.chars().count() >= 3 && body.chars().count() <= 200).then(|| body.to_owned())
        })
        .take(PLANNED_QUERIES)
        .collect()
}

/// Queries searched for a researcher whose own call could not be run as it was (a plan it
/// wrote, a call cut off): enough to cover a topic, few enough that a runaway list costs little.
const PLANNED_QUERIES: usize = 5;

async fn tools(deps: Deps, state: LastTurn, ctx: NodeContext) -> Result<Command, NodeError> {
    let cfg = run_config(&ctx)?;
    let last = state.researcher_messages.unwrap_or_default();
    let calls = last.tool_calls();
    let invalid = last.invalid_tool_calls();
    if calls.is_empty() && invalid.is_empty() && !last.used_native_search() {
        return Ok(Command::default().goto("compress_research"));
    }
    let caller = Caller::new(&deps, &ctx, &cfg);
    let toolbox = if calls.iter().any(|c| !is_builtin(&c.name)) {
        mcp_tools(&caller).await
    } else {
        Toolbox::default()
    };
    let topic = state.research_topic.clone().unwrap_or_default();
    let outcomes = join_all(calls.iter().map(|c| run_tool(&caller, &toolbox, c, &topic))).await;
    let mut messages = Vec::new();
    // Pages the provider's own web search returned count as retrieved sources too.
    let mut sources: Vec<Source> = last.metadata_list("web_search_results");
    for (call, outcome) in calls.iter().zip(outcomes) {
        let (content, found) = outcome?;
        messages.push(Message::tool_result(content, &call.name, &call.id));
        sources.extend(found);
    }
    let search_name = search_tool(&caller);
    for call in &invalid {
        let raw = call.args["raw"].as_str().unwrap_or_default();
        let salvaged = if search_name == Some(call.name.as_str()) {
            fallbacks::salvaged_queries(raw, PLANNED_QUERIES)
        } else {
            Vec::new()
        };
        if salvaged.is_empty() {
            messages.push(Message::tool_result(
                format!(
                    "{TOOL_ERROR}: the arguments were not valid JSON ({})",
                    call.args["error"]
                ),
                &call.name,
                &call.id,
            ));
            continue;
        }
        let detail = format!(
            "the search call was cut off ({}); searching the {} queries written before the cut",
            call.args["error"],
            salvaged.len()
        );
        fallbacks::record(&ctx, AgentFallback::QueriesSalvaged.as_str(), &detail);
        let whole = ToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            args: json!({ "queries": salvaged }),
        };
        let (content, found) = run_tool(&caller, &toolbox, &whole, &topic).await?;
        messages.push(Message::tool_result(content, &call.name, &call.id));
        sources.extend(found);
    }
    let done = state.tool_call_iterations >= cfg.max_react_tool_calls
        || calls.iter().any(|c| c.name == "ResearchComplete")
        || over_cap(&ctx).is_some();
    let upd = ResearcherUpdate {
        researcher_messages: Some(messages),
        sources: Some(Write::Add(sources)),
        ..ResearcherUpdate::default()
    };
    Ok(Command::write(upd)?.goto(if done {
        "compress_research"
    } else {
        "researcher"
    }))
}

/// Runs one tool call: its result text and the sources it showed. Tool failures become text for
/// the model; only cancellation stops the node.
fn is_builtin(name: &str) -> bool {
    matches!(name, "think_tool" | "ResearchComplete") || SearchApi::TOOL_NAMES.contains(&name)
}

async fn run_tool(
    caller: &Caller<'_>,
    toolbox: &Toolbox,
    call: &ToolCall,
    topic: &str,
) -> Result<(String, Vec<Source>), NodeError> {
    match call.name.as_str() {
        "think_tool" => Ok((
            format!("Reflection recorded: {}", call.text_arg("reflection")),
            vec![],
        )),
        "ResearchComplete" => Ok((String::new(), vec![])),
        name if Some(name) == search_tool(caller) => {
            remembered(caller, call, search(caller, call, topic)).await
        }
        other => match toolbox.find(other) {
            Some(tool) => remembered(caller, call, call_mcp(caller, tool, call)).await,
            None => Ok((
                format!("Error executing tool: there is no tool named '{other}'"),
                vec![],
            )),
        },
    }
}

/// An MCP tool call's result, replayed when this step had finished it before it was cut off.
/// A failure is not kept: a redo tries again.
async fn remembered(
    caller: &Caller<'_>,
    call: &ToolCall,
    run: impl Future<Output = Result<(String, Vec<Source>), NodeError>>,
) -> Result<(String, Vec<Source>), NodeError> {
    let key = replay::tool_call_key(caller.ctx, &call.id);
    if let Some(done) = replay::recall(caller.ctx, &key, "tool", &call.name).await {
        return Ok(done);
    }
    let done = run.await?;
    if !done.0.starts_with(TOOL_ERROR) {
        replay::record(caller.ctx, &key, &done);
    }
    Ok(done)
}

/// One MCP tool call. Its failure (the server's error, a timeout, a crash) is the tool's result
/// and a `custom` event; the researcher goes on.
async fn call_mcp(
    caller: &Caller<'_>,
    tool: &mcp::OfferedTool,
    call: &ToolCall,
) -> Result<(String, Vec<Source>), NodeError> {
    let outcome = tokio::select! {
        o = mcp::call(&caller.deps.mcp, tool, &call.args) => o,
        () = caller.ctx.cancelled().cancelled() => return Err(NodeError::Cancelled),
    };
    Ok(match outcome {
        Ok(o) => (o.text, o.sources.into_iter().map(Source::from).collect()),
        Err(e) => {
            ResearchEvent::McpError {
                server: tool.server.clone(),
                tool: Some(tool.remote.clone()),
                error: e.0.clone(),
            }
            .send(caller.ctx);
            (
                format!(
                    "Error executing tool: {} ({} server): {}",
                    tool.remote, tool.server, e.0
                ),
                vec![],
            )
        }
    })
}

async fn search(
    caller: &Caller<'_>,
    call: &ToolCall,
    topic: &str,
) -> Result<(String, Vec<Source>), NodeError> {
    let queries = match queries_of(call) {
        Ok(queries) => queries,
        Err(why) => return Ok((format!("Error executing tool: {why}"), vec![])),
    };
    let deps: &ResearchDeps = caller.deps;
    let cfg = caller.cfg;
    let (searcher, engine_id, engine_name) = match searcher(caller) {
        Ok(found) => found,
        Err(why) => return Ok((format!("Error executing tool: {why}"), vec![])),
    };
    let ledger = caller.ctx.scope.local::<SummaryLedger>();
    ledger.set_budget(cfg.max_page_summaries as usize);
    let opts = SearchOptions {
        query: QueryOptions {
            max_results: cfg.search_max_results,
            topic: cfg.tavily_topic.as_str().to_owned(),
            depth: cfg.tavily_search_depth.as_str().to_owned(),
            include_domains: super::config::domains(&cfg.search_include_domains),
            exclude_domains: super::config::domains(&cfg.search_exclude_domains),
            max_content_length: cfg.max_content_length,
        },
        summary_timeout: deps.summary_timeout,
        summary_slots: deps.summary_slots.clone(),
        verbatim_chars: cfg.verbatim_page_chars,
        long_pages: if cfg.summarize_pages {
            LongPages::Summary
        } else {
            LongPages::Excerpts
        },
        ledger,
        topic: topic.to_owned(),
    };
    let summarizer = ModelSummarizer { caller };
    let local = matches!(searcher, Searcher::Corpus(_));
    match web_search(
        &searcher,
        &queries,
        Some(&summarizer),
        &opts,
        caller.ctx.cancelled(),
    )
    .await
    {
        Ok(out) => {
            ResearchEvent::searched(engine_id, out.found).send(caller.ctx);
            let sources = out
                .sources
                .into_iter()
                .map(|s| source_entry(s, local.then_some(engine_id)))
                .collect();
            Ok((out.text, sources))
        }
        Err(crate::tools::SearchError::Cancelled) => Err(NodeError::Cancelled),
        Err(e) => {
            ResearchEvent::SearchError {
                engine: engine_id.to_owned(),
                queries,
                error: e.to_string(),
            }
            .send(caller.ctx);
            Ok((format!("Error executing tool: {engine_name}: {e}"), vec![]))
        }
    }
}

/// The queries a search call asks for. A small model often sends one query as a string, or
/// names it `query`: that is taken too. The error is for the tool's result.
fn queries_of(call: &ToolCall) -> Result<Vec<String>, &'static str> {
    let given = match &call.args["queries"] {
        Value::Null => &call.args["query"],
        q => q,
    };
    let queries: Vec<String> = match given {
        Value::Array(q) => q
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .filter(|q| !q.trim().is_empty())
            .collect(),
        Value::String(q) => vec![q.clone()],
        _ => return Err("`queries` must be a list of strings"),
    };
    if queries.is_empty() {
        return Err("give at least one search query");
    }
    Ok(queries)
}

/// Where this run's queries go: (searcher, short name, display name); the error is the tool's
/// result text.
fn searcher(caller: &Caller<'_>) -> Result<(Searcher, &'static str, &'static str), String> {
    let deps: &ResearchDeps = caller.deps;
    if caller.cfg.search_api == SearchApi::Local {
        // Checked at creation; the operator may have changed the corpora since.
        let corpus = deps.corpora.pick(&caller.cfg.corpus)?;
        return Ok((Searcher::Corpus(corpus.clone()), "local", "document search"));
    }
    let Some(engine) = caller.cfg.search_api.engine() else {
        return Err("no search engine for this run".into());
    };
    let run_key = caller.ctx.config()["configurable"]["apiKeys"][engine.run_key()]
        .as_str()
        .map(str::to_owned);
    let client = deps
        .web_search(engine, run_key)
        .ok_or("this search engine is not configured")?;
    Ok((Searcher::Web(client), engine.id(), engine.name()))
}

/// A source as the state keeps it: where, its title, the text the citation check reads, and
/// what the researcher was shown of it when that was not the text (the summary, so a later run
/// on the thread need not pay for it again, or the snippet).
fn source_entry(source: crate::tools::Source, corpus: Option<&str>) -> Source {
    Source {
        url: source.url,
        title: source.title,
        text: source.text,
        summary: source.summary,
        snippet: source.snippet,
        kind: corpus.map(|_| SourceKind::Document),
        ..Source::default()
    }
}

/// Page summaries by the run's summarisation model.
struct ModelSummarizer<'a> {
    caller: &'a Caller<'a>,
}

#[derive(Deserialize, Serialize)]
struct Summary {
    summary: String,
    key_excerpts: String,
}

#[async_trait]
impl PageSummarizer for ModelSummarizer<'_> {
    async fn summarize(&self, content: String) -> Result<PageSummary, String> {
        let deps = self.caller.deps;
        let prompt = deps.prompts.render(
            "summarize_webpage",
            &[("webpage_content", &content), ("date", &msg::today())],
        );
        // The prompt holds the page now; the model call may take a while.
        drop(content);
        let req = self
            .caller
            .request(Role::Summarization, vec![Message::human(prompt)])
            .map_err(|e| e.to_string())?;
        let schema = ResponseSchema {
            name: "Summary".into(),
            description: "A summary of a web page with key excerpts.".into(),
            schema: json!({"type": "object", "properties": {
                "summary": {"type": "string"}, "key_excerpts": {"type": "string"}},
                "required": ["summary", "key_excerpts"]}),
        };
        let s: Summary = self
            .caller
            .structured(req, schema, None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(PageSummary {
            summary: s.summary,
            key_excerpts: s.key_excerpts,
        })
    }
}

/// Everything except the prefix before the last AI message (ODR's trimming after an overflow).
fn before_last_ai(messages: &[Message]) -> Vec<Message> {
    match messages.iter().rposition(|m| m.kind() == Kind::Ai) {
        Some(i) => messages[..i].to_vec(),
        None => messages.to_vec(),
    }
}

async fn compress(
    deps: Deps,
    state: ResearcherState,
    ctx: NodeContext,
) -> Result<Command, NodeError> {
    let cfg = run_config(&ctx)?;
    let caller = Caller::new(&deps, &ctx, &cfg);
    let mut history = state.researcher_messages;
    if over_cap(&ctx).is_some() {
        return compressed(&history, uncompressed(&history));
    }
    if !cfg.compress_research {
        // What the fallback below would hand on, without the call it falls back from.
        return compressed(
            &history,
            raw_findings::from_results(&search_results(&history)),
        );
    }
    let system_prompt = deps
        .prompts
        .render("compress_system", &[("date", &msg::today())]);
    let request = deps.prompts.render("compress_request", &[]);
    let mut last_error = None;
    for _ in 0..3 {
        let mut messages = vec![Message::system(system_prompt.clone())];
        messages.extend(history.iter().cloned());
        // The instruction stays after trimming (ODR trimmed it away with the last AI turn).
        messages.push(Message::human(request.clone()));
        let req = caller.request(Role::Compression, messages)?;
        match caller.call(req, false).await {
            Ok(resp) => {
                let text = Message::from_model(resp.message).text();
                let results = search_results(&history);
                if let Some(why) = raw_findings::unusable(&text, &results) {
                    fallbacks::record(&ctx, AgentFallback::ResultsAsFindings.as_str(), why);
                    return compressed(&history, raw_findings::from_results(&results));
                }
                return compressed(&history, text);
            }
            Err(NodeError::Failed { kind, message }) if kind == "ContextOverflowError" => {
                history = before_last_ai(&history);
                last_error = Some(NodeError::Failed { kind, message });
            }
            Err(other) => return Err(other),
        }
    }
    Err(last_error
        .unwrap_or_else(|| node_error(crate::llm::LlmError::Config("compression failed".into()))))
}

/// The search results as they came, for a researcher stopped by the spend cap before its notes
/// could be summarised.
fn uncompressed(history: &[Message]) -> String {
    let found = search_results(history);
    if found.is_empty() {
        return "(The spend cap was reached before this topic was searched.)".into();
    }
    format!(
        "(Search results as found: the spend cap was reached before they were summarised.)\n\n{}",
        raw_findings::from_results(&found)
    )
}

/// The texts of the researcher's tool results, reflections left out.
fn search_results(history: &[Message]) -> Vec<String> {
    history
        .iter()
        .filter(|m| m.kind() == Kind::Tool && !m.is_result_of("think_tool"))
        .map(Message::text)
        .collect()
}

fn compressed(history: &[Message], text: String) -> Result<Command, NodeError> {
    let raw: Vec<String> = history
        .iter()
        .filter(|m| matches!(m.kind(), Kind::Tool | Kind::Ai))
        .map(Message::text)
        .collect();
    let upd = ResearcherUpdate {
        compressed_research: Some(text),
        raw_notes: Some(Write::Add(vec![raw.join("\n")])),
        ..ResearcherUpdate::default()
    };
    Ok(Command::write(upd)?.goto(END))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finishing_before_any_search_is_caught() {
        let with = |names: &[&str]| {
            let calls: Vec<serde_json::Value> = names
                .iter()
                .map(|n| json!({"name": n, "args": {}, "id": n, "type": "tool_call"}))
                .collect();
            Message::from_model(json!({"type": "ai", "content": "", "tool_calls": calls}))
        };
        let researches = |n: &str| n == "tavily_search" || n == "read_text_file";
        let finishes = |m: &Message, last| finishes_without_searching(m, last, &researches);
        assert!(finishes(
            &Message::from_model(json!({"type": "ai", "content": "plan"})),
            false
        ));
        assert!(finishes(&with(&["ResearchComplete"]), false));
        assert!(finishes(&with(&["think_tool"]), true));
        assert!(!finishes(&with(&["think_tool"]), false));
        assert!(!finishes(
            &with(&["tavily_search", "ResearchComplete"]),
            false
        ));
        // An MCP tool is research too: its sources count.
        assert!(!finishes(
            &with(&["read_text_file", "ResearchComplete"]),
            false
        ));
    }

    #[test]
    fn queries_listed_in_prose_are_found() {
        let plan = "I will use the following queries:\n1. \"sodium-ion battery cost 2025\"\n2) LFP cycle life\n- `grid storage chemistry`\nThen I will compare.";
        assert_eq!(
            listed_queries(plan),
            vec![
                "sodium-ion battery cost 2025",
                "LFP cycle life",
                "grid storage chemistry"
            ]
        );
        assert!(listed_queries("I will research this topic carefully.").is_empty());
        assert!(listed_queries("2024 was a year.").is_empty());
    }
}
