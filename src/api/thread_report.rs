//! `GET /threads/{thread_id}/report`: the thread's report as a file to keep or share
//! (`export/`), in the format `?format=` names or else the one the `Accept` header prefers
//! (Markdown when it names none), with an evidence appendix. The owner check is the thread's.

use super::AppState;
use super::auth::Principal;
use super::error::{ApiResult, AppError, Params};
use super::lookups;
use super::params::Ids;
use crate::export::{Format, Report};
use crate::graph::state::View;
use crate::ids::ThreadId;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ReportQuery {
    /// `md`, `html`, `pdf` or `docx`; without it, the `Accept` header chooses.
    #[param(schema_with = format_names)]
    format: Option<String>,
}

/// The names `Format::named` reads, as the contract's enum (so a client or a fuzzer knows an
/// empty or unknown name is the caller's error, not a format).
fn format_names() -> utoipa::openapi::Object {
    use utoipa::openapi::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(
            "`md`, `html`, `pdf` or `docx`; without it, the `Accept` header chooses.",
        ))
        .enum_values(Some(["md", "markdown", "html", "pdf", "docx"]))
        .build()
}

/// The format asked for: `?format=`, else `Accept`, else Markdown.
fn format_asked(query: &ReportQuery, headers: &HeaderMap) -> ApiResult<Format> {
    if let Some(name) = query.format.as_deref() {
        return Format::named(name).ok_or_else(|| {
            AppError::Invalid(format!(
                "format: expected one of md, html, pdf, docx; got '{name}'"
            ))
        });
    }
    let Some(accept) = headers.get(header::ACCEPT) else {
        return Ok(Format::Markdown);
    };
    let accept = accept.to_str().unwrap_or("");
    Format::accepted(accept).ok_or_else(|| {
        let offered: Vec<&str> = Format::ALL.iter().map(|f| f.content_type()).collect();
        AppError::NotAcceptable(format!(
            "the report is served as {}; Accept names none of them",
            offered.join(", ")
        ))
    })
}

pub(super) fn router() -> axum::Router<AppState> {
    axum::Router::new().route(
        "/threads/{thread_id}/report",
        axum::routing::get(thread_report),
    )
}

/// The thread's report as a file: Markdown, one self-contained HTML page, PDF or DOCX, each with
/// its citations linked to the Sources list and an evidence appendix (each cited sentence with
/// the passage of its source the citation check matched).
#[utoipa::path(get, path = "/threads/{thread_id}/report", tag = "threads",
    params(("thread_id" = String, Path), ReportQuery),
    responses(
        (status = 200, description = "The report as a download (Content-Disposition: attachment)",
            content((String = "text/markdown"), (String = "text/html"),
                (String = "application/pdf"),
                (String = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"))),
        (status = 404, description = "No such thread, or it has no report yet"),
        (status = 406, description = "Accept names none of the four formats"),
        (status = 422, description = "format names none of md, html, pdf, docx")))]
pub(super) async fn thread_report(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    Params(query): Params<ReportQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let format = format_asked(&query, &headers)?;
    let thread = lookups::thread(&state, id, &who).await?;
    // The evidence appendix quotes the pages' texts, which clients are otherwise not sent.
    let values = super::threads::state_of(&state, &thread, None, View::Everything).await?;
    let report = Report::from_values(&values["values"])
        .ok_or_else(|| AppError::NotFound(format!("Thread {id} has no report yet")))?;
    let bytes = report
        .render(format)
        .map_err(|e| AppError::Internal(anyhow::Error::new(e)))?;
    let disposition = format!("attachment; filename=\"{}\"", report.file_name(format));
    let disposition = HeaderValue::from_str(&disposition)
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        bytes,
    )
        .into_response())
}
