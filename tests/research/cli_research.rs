//! `deep-research research "question"` end to end against the provider fakes, three ways: plain
//! lines into a pipe, the live tree on a terminal (a real pseudo-terminal, made by `script`),
//! and `--json`. Each asks the clarifying question, takes the answer on stdin, and ends with
//! the report.

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use support::fake_llm::FakeLlm;
use support::fake_tavily::FakeTavily;
use support::research::{Script, config_toml, scripted};

const QUESTION: &str = "Tell me about the vague thing";
const ANSWER: &[u8] = b"The history of it\n";

struct Fakes {
    _llm: FakeLlm,
    _tavily: FakeTavily,
    dir: tempfile::TempDir,
}

impl Fakes {
    async fn start() -> Self {
        let llm = FakeLlm::start(std::sync::Arc::new(scripted(Script {
            topics: 2,
            ..Script::default()
        })))
        .await;
        let tavily = FakeTavily::start().await;
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join("fakes.toml"), config_toml(&llm, &tavily)).unwrap();
        Self {
            _llm: llm,
            _tavily: tavily,
            dir,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// The command's arguments after `deep-research`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = vec!["research".into(), QUESTION.into()];
        args.extend(["--config".into(), self.path("fakes.toml")]);
        args.extend(["--sqlite-path".into(), self.path("cli.db")]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    }
}

/// Runs `command`, answers the clarifying question on stdin, and waits for it.
async fn run(mut command: Command) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(ANSWER).unwrap();
    // Kept open until the end: `script` ends the session when its input ends.
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    drop(stdin);
    assert!(
        output.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn check_report(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.starts_with("# Report"), "{text}");
    assert!(!text.contains(support::research::INVENTED_URL));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_a_pipe_the_run_is_plain_lines() {
    let fakes = Fakes::start().await;
    let report = fakes.path("report.md");
    let mut command = Command::new(env!("CARGO_BIN_EXE_deep-research"));
    command.args(fakes.args(&["--output", &report]));
    let output = run(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("Which aspect do you mean?"), "{stdout}");
    for line in [
        "✓ Question checked",
        "✓ Brief: ",
        "  … Researcher 1: searching “",
        "  … Researcher 2: searching “",
        "  ✓ Researcher 2: searched “",
        "✓ Research done: 2 researchers, ",
        "✓ Report written",
        "citations checked: ",
        "Done · 2 researchers · ",
        "Report written to",
        "Model calls: ",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains('\u{1b}'),
        "no terminal codes in a pipe:\n{stdout}"
    );
    check_report(Path::new(&report));
}

/// `-o report.pdf`: the file is the exported PDF (the report with its evidence), read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_file_named_pdf_is_the_report_as_a_pdf() {
    let fakes = Fakes::start().await;
    let report = fakes.path("report.pdf");
    let mut command = Command::new(env!("CARGO_BIN_EXE_deep-research"));
    command.args(fakes.args(&["--output", &report]));
    let output = run(command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("with its evidence"), "{stdout}");
    let bytes = std::fs::read(&report).unwrap();
    let text = pdf_extract::extract_text_from_mem(&bytes).unwrap();
    assert!(text.contains("Evidence"), "{text}");
    assert!(!text.contains(support::research::INVENTED_URL));
}

/// Under a pseudo-terminal the tree is drawn and redrawn in place, and ends with the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_the_run_is_a_tree_redrawn_in_place() {
    let fakes = Fakes::start().await;
    let report = fakes.path("report.md");
    let mut line = String::from(env!("CARGO_BIN_EXE_deep-research"));
    for arg in fakes.args(&["--output", &report]) {
        line.push_str(&format!(" '{}'", arg.replace('\'', r"'\''")));
    }
    // `script` (util-linux, on every Debian) runs the command on a new pseudo-terminal.
    let mut command = Command::new("script");
    command
        .args(["-q", "-e", "-f", "-c", &line, "/dev/null"])
        .env("TERM", "xterm-256color");
    let output = run(command).await;
    let screen = String::from_utf8_lossy(&output.stdout);
    // Cursor movements: lines are rewritten, not appended.
    assert!(screen.contains("\u{1b}["), "no terminal codes:\n{screen}");
    let plain = strip_ansi(&screen);
    for text in [
        "Which aspect do you mean?",
        "Your answer> ",
        "✓ Question checked",
        "✓ Brief: ",
        "Researcher 1: ",
        "✓ Research done: 2 researchers",
        "✓ Report written",
        "Done · 2 researchers · ",
        "Report written to",
    ] {
        assert!(
            plain.contains(text),
            "missing {text:?} on the screen:\n{plain}"
        );
    }
    check_report(Path::new(&report));
}

/// `--json -o -`: every event a JSON line, the question an event, the report the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_for_programs_with_the_report_on_stdout() {
    let fakes = Fakes::start().await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_deep-research"));
    command.args(fakes.args(&["--json", "--output", "-"]));
    let output = run(command).await;
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let events: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    assert!(events.contains(&"clarification"), "{events:?}");
    assert!(
        events.iter().any(|e| e.starts_with("updates|")),
        "{events:?}"
    );
    let report = lines
        .iter()
        .find(|l| l["event"] == "report")
        .expect("a report event");
    assert!(report["data"].as_str().unwrap().starts_with("# Report"));
    assert_eq!(lines.last().unwrap()["event"], "usage");
}

/// The text of a terminal transcript without its escape sequences.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}
