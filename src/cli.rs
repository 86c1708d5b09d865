//! `deep-research research "question"`: one research on this machine, through the same HTTP API
//! clients use (served in-process on a loopback port), with live progress on the terminal, the
//! clarifying question asked at the prompt, and the report written to a file.

use crate::sse::SseStream;
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// What the command needs.
pub struct ResearchArgs {
    pub question: String,
    /// Where the report goes.
    pub output: PathBuf,
    /// `configurable` overrides for the run (e.g. models).
    pub configurable: Value,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
}

/// Progress lines go to `out`; answers to clarifying questions come from `input`.
pub async fn research(
    base_url: &str,
    args: &ResearchArgs,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = &args.api_key {
        headers.insert("x-api-key", reqwest::header::HeaderValue::from_str(key)?);
    }
    let http = crate::net::client_builder()
        .default_headers(headers)
        .build()?;
    let thread: Value = http
        .post(format!("{base_url}/threads"))
        .json(&json!({}))
        .send()
        .await?
        .json()
        .await?;
    let thread_id = thread["thread_id"].as_str().unwrap_or_default().to_owned();
    let mut message = args.question.clone();
    for _turn in 0..3 {
        let final_values = stream_run(
            &http,
            base_url,
            &thread_id,
            &message,
            &args.configurable,
            out,
        )
        .await?;
        if let Some(report) = final_values["final_report"].as_str() {
            std::fs::write(&args.output, report)?;
            writeln!(
                out,
                "\nReport written to {} ({} bytes).",
                args.output.display(),
                report.len()
            )?;
            print_usage(&final_values["usage"], out)?;
            return Ok(());
        }
        let question = final_values["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        writeln!(out, "\nThe researcher asks:\n{question}\n")?;
        write!(out, "Your answer> ")?;
        out.flush()?;
        let mut answer = String::new();
        if input.read_line(&mut answer)? == 0 || answer.trim().is_empty() {
            anyhow::bail!("no answer given; stopping");
        }
        message = answer.trim().to_owned();
    }
    anyhow::bail!("still no report after three turns")
}

/// Streams one run and returns its final values; fails on an `error` event.
async fn stream_run(
    http: &reqwest::Client,
    base_url: &str,
    thread_id: &str,
    message: &str,
    configurable: &Value,
    out: &mut dyn Write,
) -> anyhow::Result<Value> {
    let body = json!({
        "assistant_id": "deep_research",
        "input": {"messages": [{"role": "user", "content": message}]},
        "stream_mode": ["values", "updates", "custom"],
        "stream_subgraphs": true,
        "config": {"configurable": configurable},
    });
    let resp = http
        .post(format!("{base_url}/threads/{thread_id}/runs/stream"))
        .json(&body)
        .send()
        .await?;
    if !resp.status().is_success() {
        let status = resp.status();
        let detail: Value = resp.json().await.unwrap_or(Value::Null);
        anyhow::bail!("the run was refused ({status}): {}", detail["detail"]);
    }
    let mut events = SseStream::new(resp.bytes_stream());
    let mut values = Value::Null;
    while let Some(event) = events.next().await {
        let event = event?;
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        match event.event.split('|').next().unwrap_or_default() {
            "values" if !event.event.contains('|') => values = data,
            "updates" => progress(&event.event, &data, out)?,
            "custom" => custom(&data, out)?,
            "error" => anyhow::bail!("the run failed: {}: {}", data["error"], data["message"]),
            _ => {}
        }
    }
    Ok(values)
}

fn progress(name: &str, data: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(node) = data.as_object().and_then(|m| m.keys().next()) else {
        return Ok(());
    };
    let depth = name.matches('|').count();
    let who = name
        .rsplit('|')
        .next()
        .filter(|s| s.starts_with("researcher:"))
        .map(|s| format!(" [{}]", &s[..s.len().min(19)]))
        .unwrap_or_default();
    writeln!(out, "{}✓ {node}{who}", "  ".repeat(depth))
}

fn custom(data: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    match data["type"].as_str() {
        Some("usage") => {
            let run = &data["run"];
            writeln!(
                out,
                "    tokens so far: {} in / {} out, ≈ ${:.4}",
                run["input_tokens"],
                run["output_tokens"],
                run["estimated_usd"].as_f64().unwrap_or(0.0)
            )
        }
        Some("researcher_error") => writeln!(out, "    ! a researcher failed: {}", data["error"]),
        Some("search_error") => writeln!(out, "    ! a search failed: {}", data["error"]),
        Some("citations") => {
            let s = &data["support"];
            writeln!(
                out,
                "    citations checked: {} of {} supported, {} moved, {} removed, {} added; {} \
                 sources cited ({} unretrieved links removed)",
                s["supported"],
                s["citations"],
                s["moved"],
                s["removed"],
                s["attached"],
                s["sources_cited"],
                data["removed"].as_array().map_or(0, Vec::len)
            )
        }
        _ => Ok(()),
    }
}

fn print_usage(usage: &Value, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "Model calls: {}, tokens: {} in / {} out, estimated cost ${:.4}{}",
        usage["calls"],
        usage["input_tokens"],
        usage["output_tokens"],
        usage["estimated_usd"].as_f64().unwrap_or(0.0),
        if usage["all_priced"] == false {
            " (some models have no price in the config)"
        } else {
            ""
        }
    )
}
