//! `deep-research research "question"` end to end against the provider fakes: progress on the
//! terminal, the clarifying question answered on stdin, the report written to a file.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use support::research::{Script, config_toml, scripted};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_command_asks_clarifies_and_writes_the_report() {
    let llm = support::fake_llm::FakeLlm::start(std::sync::Arc::new(scripted(Script {
        topics: 2,
        ..Script::default()
    })))
    .await;
    let tavily = support::fake_tavily::FakeTavily::start().await;
    let dir = tempfile::TempDir::new().unwrap();
    let config = dir.path().join("fakes.toml");
    std::fs::write(&config, config_toml(&llm, &tavily)).unwrap();
    let report = dir.path().join("report.md");
    let mut child = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .arg("research")
        .arg("Tell me about the vague thing")
        .arg("--output")
        .arg(&report)
        .arg("--config")
        .arg(&config)
        .arg("--sqlite-path")
        .arg(dir.path().join("cli.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"The history of it\n")
        .unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("Which aspect do you mean?"), "{stdout}");
    for line in [
        "✓ clarify_with_user",
        "✓ supervisor",
        "✓ researcher",
        "✓ final_report_generation",
        "tokens so far",
        "Report written to",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.starts_with("# Report"), "{text}");
    assert!(!text.contains(support::research::INVENTED_URL));
}
