//! `deep-research research "question"`: one research on this machine, through the same HTTP API
//! clients use (served in-process on a loopback port). On a terminal the run unfolds as a tree
//! redrawn in place (brief → researchers → their searches and pages → report, with tokens and
//! cost); through a pipe it is plain lines; `--json` prints every event as a JSON line. The
//! clarifying question is asked at the prompt, and the report goes to a file or to stdout.

pub mod search;
mod view;

use crate::research::progress::RunProgress;
use crate::sse_decoder::SseStream;
use futures::StreamExt;
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::PathBuf;
pub use view::Mode;
use view::View;

/// Where the report goes.
#[derive(Clone, Debug)]
pub enum ReportTo {
    File(PathBuf),
    Stdout,
}

impl ReportTo {
    /// `-` is stdout; anything else a file.
    pub fn parse(raw: &std::path::Path) -> Self {
        if raw.as_os_str() == "-" {
            Self::Stdout
        } else {
            Self::File(raw.to_owned())
        }
    }
}

/// What the command needs.
pub struct ResearchArgs {
    pub question: String,
    pub output: ReportTo,
    /// `configurable` overrides for the run (e.g. models).
    pub configurable: Value,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
    pub mode: Mode,
}

/// Progress goes to `out` (the live view draws on the terminal itself); answers to clarifying
/// questions come from `input`.
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
    let http = crate::outbound::client_builder()
        .default_headers(headers)
        .build()?;
    let thread: Value = http
        .post(format!("{base_url}/threads"))
        .json(&json!({"metadata": {"title": args.question}}))
        .send()
        .await?
        .json()
        .await?;
    let thread_id = thread["thread_id"].as_str().unwrap_or_default().to_owned();
    let mut view = View::new(args.mode, out);
    let mut message = args.question.clone();
    for _turn in 0..3 {
        let run = Run {
            http: &http,
            base_url,
            thread_id: &thread_id,
            configurable: &args.configurable,
        };
        let final_values = run.stream(&message, &mut view).await?;
        if let Some(report) = final_values["final_report"].as_str() {
            if let Some(format) = exported_format(&args.output) {
                let url = format!(
                    "{base_url}/threads/{thread_id}/report?format={}",
                    format.extension()
                );
                let file = http
                    .get(url)
                    .send()
                    .await?
                    .error_for_status()?
                    .bytes()
                    .await?;
                return deliver_file(&file, &args.output, &mut view);
            }
            return deliver(report, &final_values["usage"], &args.output, &mut view);
        }
        let question = final_values["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned();
        view.say(
            "clarification",
            &format!("\nThe researcher asks:\n{question}\n"),
        )?;
        let answer = view.ask("Your answer> ", input)?;
        if answer.is_empty() {
            anyhow::bail!("no answer given; stopping");
        }
        message = answer;
    }
    anyhow::bail!("still no report after three turns")
}

/// The export format a report file's extension names (`.html`, `.pdf`, `.docx`): the server
/// draws those (`GET /threads/{id}/report`); any other file gets the report's Markdown.
fn exported_format(to: &ReportTo) -> Option<crate::export::Format> {
    let ReportTo::File(path) = to else {
        return None;
    };
    let ext = path.extension()?.to_str()?;
    crate::export::Format::named(ext).filter(|f| *f != crate::export::Format::Markdown)
}

/// Writes an exported report file and says so.
fn deliver_file(bytes: &[u8], to: &ReportTo, view: &mut View) -> anyhow::Result<()> {
    if let ReportTo::File(path) = to {
        std::fs::write(path, bytes)?;
        view.say(
            "report",
            &format!(
                "\nReport written to {} ({} bytes, with its evidence).",
                path.display(),
                bytes.len()
            ),
        )?;
    }
    Ok(())
}

/// Writes the report where it was asked for and says so.
fn deliver(report: &str, usage: &Value, to: &ReportTo, view: &mut View) -> anyhow::Result<()> {
    match to {
        ReportTo::File(path) => {
            std::fs::write(path, report)?;
            view.say(
                "report",
                &format!(
                    "\nReport written to {} ({} bytes).",
                    path.display(),
                    report.len()
                ),
            )?;
        }
        ReportTo::Stdout => match view {
            View::Json(out) => writeln!(out, "{}", json!({"event": "report", "data": report}))?,
            View::Plain(plain) => writeln!(plain.out, "\n{report}")?,
            View::Live(_) => println!("\n{report}"),
        },
    }
    view.say("usage", &usage_line(usage))?;
    Ok(())
}

/// One run on the thread.
struct Run<'a> {
    http: &'a reqwest::Client,
    base_url: &'a str,
    thread_id: &'a str,
    configurable: &'a Value,
}

impl Run<'_> {
    /// Streams the run and returns its final values; fails on an `error` event.
    async fn stream(&self, message: &str, view: &mut View<'_>) -> anyhow::Result<Value> {
        let body = json!({
            "assistant_id": "deep_research",
            "input": {"messages": [{"role": "user", "content": message}]},
            "stream_mode": ["values", "updates", "custom"],
            "stream_subgraphs": true,
            "config": {"configurable": self.configurable},
        });
        let url = format!("{}/threads/{}/runs/stream", self.base_url, self.thread_id);
        let mut events = stream_run(self.http, &url, &body).await?;
        let mut values = Value::Null;
        let mut progress = RunProgress::new();
        while let Some(event) = events.next().await {
            let event = event?;
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            let (mode, namespace) = event.event.split_once('|').unwrap_or((&event.event, ""));
            if mode == "error" {
                let not_run = progress.finish("Failed");
                view.finish(&progress, not_run)?;
                anyhow::bail!("the run failed: {}: {}", data["error"], data["message"]);
            }
            if mode == "values" && namespace.is_empty() {
                values = data.clone();
            }
            let changes = progress.on_event(&event.event, &event.data);
            view.event(&event.event, &data, &changes, &mut progress)?;
        }
        let not_run = progress.finish(if values["final_report"].is_string() {
            "Done"
        } else {
            "Waiting for your answer"
        });
        view.finish(&progress, not_run)?;
        Ok(values)
    }
}

/// Posts a streamed run and returns its events; a refusal is an error that quotes its detail.
pub(crate) async fn stream_run(
    http: &reqwest::Client,
    url: &str,
    body: &Value,
) -> anyhow::Result<SseStream<impl futures::Stream<Item = reqwest::Result<bytes::Bytes>>>> {
    let resp = http.post(url).json(body).send().await?;
    if !resp.status().is_success() {
        let status = resp.status();
        let detail: Value = resp.json().await.unwrap_or(Value::Null);
        anyhow::bail!("the run was refused ({status}): {}", detail["detail"]);
    }
    Ok(SseStream::new(resp.bytes_stream()))
}

fn usage_line(usage: &Value) -> String {
    format!(
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
