//! The result files as tables: one evaluation in Markdown, two compared figure by figure, and
//! parts of one set measured apart joined into one.

use super::{EvalReport, QuestionResult, Summary, round2, summarize};
use std::collections::BTreeMap;

/// The results as a Markdown table, the set's figures first.
pub fn markdown(report: &EvalReport) -> String {
    let s = &report.summary;
    let mut out = format!(
        "## {} on corpus '{}' ({})\n\n| figure | value |\n|---|---|\n\
         | questions | {} |\n| researched | {} |\n| researched without inventing a source | {} |\n\
         | key-fact recall, body only, the question's own facts not scored | {:.0}% |\n\
         | copied share of the body (runs of 8+ words) | {:.0}% |\n\
         | copied share of the prose (marked quotations left out) / quoted share | {:.0}% / {:.0}% |\n\
         | section headings that are a source's title | {:.0}% |\n\
         | uncited body sentences no source supports | {} |\n\
         | sections whose sources hold no key fact | {} |\n\
         | key-fact recall, whole report (the old rule) | {:.0}% |\n| key facts in the writer's findings | {:.0}%{} |\n\
         | key facts in what the researchers were shown | {:.0}%{} |\n\
         | key facts in the retrieved texts | {:.0}%{} |\n\
         | body paragraphs citing a source | {:.0}% |\n\
         | citations supported by the cited text | {:.0}% |\n| cited locations not in the corpus | {} |\n\
         | median wall time | {:.0} s |\n| tokens in / out | {} / {} |\n\n",
        report.set,
        report.corpus,
        report.started_at,
        s.questions,
        s.researched,
        s.researched_without_invention,
        s.body_recall * 100.0,
        s.copied_share * 100.0,
        s.copied_prose_share * 100.0,
        s.quoted_share * 100.0,
        s.source_title_heading_share * 100.0,
        s.uncited_unsupported,
        s.off_topic_sections,
        s.fact_recall * 100.0,
        s.notes_recall * 100.0,
        measured_in(&report.results, |r| r.facts_in_notes.is_some()),
        s.shown_recall * 100.0,
        measured_in(&report.results, |r| r.facts_shown.is_some()),
        s.retrieved_recall * 100.0,
        measured_in(&report.results, |r| r.facts_retrieved.is_some()),
        s.cited_paragraph_share * 100.0,
        s.supported_share * 100.0,
        s.invented,
        s.median_wall_secs,
        s.input_tokens,
        s.output_tokens,
    );
    out.push_str(
        "| question | status | sources | facts: report (findings / shown / retrieved) | cited ¶ | supported | invented | wall s | calls |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in &report.results {
        out.push_str(&format!(
            "| {} | {} | {} | {}/{} ({} / {} / {}) | {}/{} | {}/{} | {} | {:.0} | {} |\n",
            r.id,
            r.status,
            r.sources,
            r.facts_found.len(),
            r.facts,
            count(&r.facts_in_notes),
            count(&r.facts_shown),
            count(&r.facts_retrieved),
            r.cited_paragraphs,
            r.paragraphs,
            r.supported,
            r.citations,
            r.invented,
            r.wall_secs,
            r.calls,
        ));
    }
    out
}

/// What changed from `a` to `b`: the set's figures side by side, then each question both ran.
pub fn compare(a: &EvalReport, b: &EvalReport) -> String {
    let mut out = String::from("| figure | A | B | change |\n|---|---|---|---|\n");
    for ((name, va), (_, vb)) in figures(&a.summary).into_iter().zip(figures(&b.summary)) {
        out.push_str(&format!(
            "| {name} | {} | {} | {:+} |\n",
            fmt_num(va),
            fmt_num(vb),
            round2(vb - va)
        ));
    }
    out.push_str(
        "\n| question | recall A → B | supported A → B | wall s A → B |\n|---|---|---|---|\n",
    );
    for ra in &a.results {
        if let Some(rb) = b.results.iter().find(|r| r.id == ra.id) {
            out.push_str(&format!(
                "| {} | {} → {} | {}/{} → {}/{} | {:.0} → {:.0} |\n",
                ra.id,
                ra.fact_recall,
                rb.fact_recall,
                ra.supported,
                ra.citations,
                rb.supported,
                rb.citations,
                ra.wall_secs,
                rb.wall_secs
            ));
        }
    }
    out
}

/// The set's figures that `compare` sets side by side, in its order.
fn figures(s: &Summary) -> [(&'static str, f64); 17] {
    [
        ("questions", s.questions as f64),
        ("key-fact recall, body only", s.body_recall),
        ("copied share of the body", s.copied_share),
        (
            "headings that are a source's title",
            s.source_title_heading_share,
        ),
        (
            "uncited sentences no source supports",
            s.uncited_unsupported as f64,
        ),
        ("off-topic sections", s.off_topic_sections as f64),
        ("researched", s.researched as f64),
        (
            "researched without inventing",
            s.researched_without_invention as f64,
        ),
        ("key-fact recall (whole report)", s.fact_recall),
        ("cited paragraph share", s.cited_paragraph_share),
        ("key facts in the findings", s.notes_recall),
        ("key facts shown", s.shown_recall),
        ("key facts retrieved", s.retrieved_recall),
        ("supported share", s.supported_share),
        ("invented", s.invented as f64),
        ("median wall s", s.median_wall_secs),
        (
            "tokens (in + out)",
            (s.input_tokens + s.output_tokens) as f64,
        ),
    ]
}

/// One report from several that measured parts of the same set with the same settings (a set
/// longer than one sitting is measured in parts). A question measured twice, or parts from
/// another set, corpus or settings, are refused: the figures would mix two measurements.
pub fn merge(parts: Vec<(String, EvalReport)>) -> anyhow::Result<EvalReport> {
    let Some((first_name, first)) = parts.first() else {
        anyhow::bail!("nothing to merge");
    };
    let mut merged = EvalReport {
        set: first.set.clone(),
        corpus: first.corpus.clone(),
        corpus_prefix: first.corpus_prefix.clone(),
        ..EvalReport::default()
    };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (name, part) in &parts {
        anyhow::ensure!(
            (&part.set, &part.corpus) == (&first.set, &first.corpus),
            "{name} measured set '{}' on corpus '{}', {first_name} set '{}' on corpus '{}'",
            part.set,
            part.corpus,
            first.set,
            first.corpus
        );
        // Parts written while a run was still going carry no settings; the others must agree.
        if !part.configurable.is_null() {
            anyhow::ensure!(
                merged.configurable.is_null() || merged.configurable == part.configurable,
                "{name} was measured with other settings than the parts before it: {} vs {}",
                part.configurable,
                merged.configurable
            );
            merged.configurable = part.configurable.clone();
        }
        if merged.corpus_prefix.is_empty() {
            merged.corpus_prefix = part.corpus_prefix.clone();
        }
        if merged.started_at.is_empty()
            || (!part.started_at.is_empty() && part.started_at < merged.started_at)
        {
            merged.started_at = part.started_at.clone();
        }
        for result in &part.results {
            if let Some(other) = seen.insert(result.id.clone(), name.clone()) {
                anyhow::bail!("question {} is in both {other} and {name}", result.id);
            }
            merged.results.push(result.clone());
        }
    }
    merged.results.sort_by(|a, b| a.id.cmp(&b.id));
    merged.summary = summarize(&merged.results);
    Ok(merged)
}

/// " (k of n questions)" when only some results measured a figure (older result files).
fn measured_in(results: &[QuestionResult], has: fn(&QuestionResult) -> bool) -> String {
    let k = results.iter().filter(|r| has(r)).count();
    if k == results.len() {
        String::new()
    } else {
        format!(" ({k} of {} questions)", results.len())
    }
}

/// How many facts a stage holds, or a dash where it was not measured.
fn count(found: &Option<Vec<String>>) -> String {
    found
        .as_ref()
        .map_or("–".to_owned(), |f| f.len().to_string())
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}
