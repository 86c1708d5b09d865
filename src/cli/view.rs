//! Where a run's progress is shown: a tree redrawn in place on a terminal (indicatif), plain
//! lines when the output is a pipe or a file, or one JSON object per event (`--json`).

use crate::research::progress::{Change, LineId, RunProgress};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

/// How the command shows a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A tree on the terminal, updated in place.
    Live,
    /// One line per change, for pipes and logs.
    Plain,
    /// Every stream event as a JSON line, for programs.
    Json,
}

/// The view of one research (all its runs: a clarification starts a second).
pub enum View<'a> {
    Live(Box<Live>),
    Plain(Plain<'a>),
    Json(&'a mut dyn Write),
}

/// Plain lines: a researcher's line when it changed, a step's when it is over.
pub struct Plain<'a> {
    pub out: &'a mut dyn Write,
    last: HashMap<LineId, String>,
}

impl<'a> View<'a> {
    pub fn new(mode: Mode, out: &'a mut dyn Write) -> Self {
        match mode {
            Mode::Live => Self::Live(Box::new(Live::new())),
            Mode::Plain => Self::Plain(Plain {
                out,
                last: HashMap::new(),
            }),
            Mode::Json => Self::Json(out),
        }
    }

    /// One stream event and what it changed.
    pub fn event(
        &mut self,
        name: &str,
        data: &Value,
        changes: &[Change],
        progress: &mut RunProgress,
    ) -> std::io::Result<()> {
        let notes = std::mem::take(&mut progress.notes);
        match self {
            Self::Json(out) => writeln!(out, "{}", json!({"event": name, "data": data})),
            Self::Plain(plain) => {
                for c in changes {
                    let step = matches!(c.line, LineId::Step(_));
                    // A step's line waits for its end; a researcher's shows each new search.
                    if (step && !c.done) || plain.last.get(&c.line) == Some(&c.text) {
                        continue;
                    }
                    plain.last.insert(c.line.clone(), c.text.clone());
                    let (indent, mark) = match (step, c.done) {
                        (true, _) => ("", "✓"),
                        (false, true) => ("  ", "✓"),
                        (false, false) => ("  ", "…"),
                    };
                    writeln!(plain.out, "{indent}{mark} {}", c.text)?;
                    if step {
                        writeln!(plain.out, "    {}", progress.status())?;
                    }
                }
                for note in notes {
                    writeln!(plain.out, "    {note}")?;
                }
                Ok(())
            }
            Self::Live(live) => {
                for c in changes {
                    live.apply(c);
                }
                for note in notes {
                    live.multi.println(format!("  {note}"))?;
                }
                live.header.set_message(progress.status());
                Ok(())
            }
        }
    }

    /// A message to the person (the clarifying question, the end); in JSON, an event of its own.
    pub fn say(&mut self, event: &str, text: &str) -> std::io::Result<()> {
        match self {
            Self::Json(out) => writeln!(out, "{}", json!({"event": event, "data": text})),
            Self::Plain(plain) => writeln!(plain.out, "{text}"),
            Self::Live(live) => live.multi.suspend(|| {
                let mut stdout = std::io::stdout();
                writeln!(stdout, "{text}")?;
                stdout.flush()
            }),
        }
    }

    /// Asks on the terminal (the live view steps aside while the person types).
    pub fn ask(
        &mut self,
        prompt: &str,
        input: &mut dyn std::io::BufRead,
    ) -> std::io::Result<String> {
        let mut answer = String::new();
        match self {
            Self::Live(live) => live.multi.suspend(|| {
                let mut stdout = std::io::stdout();
                write!(stdout, "{prompt}")?;
                stdout.flush()?;
                input.read_line(&mut answer)
            })?,
            Self::Plain(plain) => {
                write!(plain.out, "{prompt}")?;
                plain.out.flush()?;
                input.read_line(&mut answer)?
            }
            Self::Json(_) => input.read_line(&mut answer)?,
        };
        Ok(answer.trim().to_owned())
    }

    /// The run is over: the status line stays as it ended; a step shown as running that
    /// will not run now (`not_run`) goes.
    pub fn finish(
        &mut self,
        progress: &RunProgress,
        not_run: Option<LineId>,
    ) -> std::io::Result<()> {
        match self {
            Self::Live(live) => {
                if let Some(line) = not_run {
                    live.remove(&line);
                }
                live.header.finish_with_message(progress.status());
                Ok(())
            }
            Self::Plain(plain) => writeln!(plain.out, "{}", progress.status()),
            Self::Json(_) => Ok(()),
        }
    }
}

/// The live tree: a status line, then one line per step and researcher.
pub struct Live {
    multi: MultiProgress,
    header: ProgressBar,
    /// The lines below the header, in the order shown.
    lines: Vec<(LineId, ProgressBar)>,
    /// Where each line's bar is, by id.
    index: HashMap<LineId, usize>,
}

const TICK: Duration = Duration::from_millis(120);

fn style(template: &str) -> ProgressStyle {
    // The templates are constants: a bad one is a bug here, shown as the default style.
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Live {
    fn new() -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let header = multi.add(ProgressBar::new_spinner());
        header.set_style(style("{spinner:.cyan} {msg:.bold}"));
        header.set_message("Starting");
        header.enable_steady_tick(TICK);
        Self {
            multi,
            header,
            lines: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Where a new line goes: steps in the graph's order, researchers under the research.
    fn position(&self, line: &LineId) -> usize {
        match line {
            LineId::Researcher(_) => self
                .lines
                .iter()
                .rposition(|(id, _)| {
                    matches!(id, LineId::Researcher(_))
                        || *id == LineId::Step("research_supervisor")
                })
                .map_or(self.lines.len(), |at| at + 1),
            LineId::Step(name) => {
                let rank = step_rank(name);
                self.lines
                    .iter()
                    .position(
                        |(id, _)| matches!(id, LineId::Step(other) if step_rank(other) > rank),
                    )
                    .unwrap_or(self.lines.len())
            }
        }
    }

    fn remove(&mut self, line: &LineId) {
        if let Some(at) = self.index.get(line).copied() {
            let (_, bar) = self.lines.remove(at);
            bar.finish_and_clear();
            self.multi.remove(&bar);
            self.reindex();
        }
    }

    fn reindex(&mut self) {
        self.index = self
            .lines
            .iter()
            .enumerate()
            .map(|(i, (id, _))| (id.clone(), i))
            .collect();
    }

    fn apply(&mut self, change: &Change) {
        let indent = if matches!(change.line, LineId::Researcher(_)) {
            "    "
        } else {
            "  "
        };
        let bar = match self.index.get(&change.line) {
            Some(&at) => self.lines[at].1.clone(),
            None => {
                let at = self.position(&change.line);
                // +1: the header is the first bar.
                let bar = self.multi.insert(at + 1, ProgressBar::new_spinner());
                bar.set_prefix(indent);
                self.lines.insert(at, (change.line.clone(), bar.clone()));
                self.reindex();
                bar
            }
        };
        if change.done {
            bar.set_style(style("{prefix}{msg}"));
            bar.finish_with_message(format!("✓ {}", change.text));
        } else {
            bar.set_style(style("{prefix}{spinner:.cyan} {msg}"));
            bar.set_message(change.text.clone());
            bar.enable_steady_tick(TICK);
        }
    }
}

fn step_rank(name: &str) -> usize {
    [
        "clarify_with_user",
        "write_research_brief",
        "plan_research",
        "review_plan",
        "research_supervisor",
        "final_report_generation",
    ]
    .iter()
    .position(|n| *n == name)
    .unwrap_or(usize::MAX)
}
