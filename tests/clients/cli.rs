//! The `deep-research` binary: `serve` prints where it listens and which store it uses, answers
//! `/ok`, and `healthcheck` reports on it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn serve_prints_its_address_and_store_and_answers_ok() {
    let dir = tempfile::TempDir::new().unwrap();
    let db = dir.path().join("cli.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["serve", "--no-auth", "--port", "0", "--sqlite-path"])
        .arg(&db)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    assert!(
        line.contains(&format!("store: sqlite://{}", db.display())),
        "{line}"
    );
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let ok = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["healthcheck", "--port", &port])
        .status()
        .unwrap();
    child.kill().unwrap();
    let _ = child.wait();
    assert!(ok.success(), "healthcheck against {addr}");
    assert!(db.exists(), "the SQLite file was created");
}

#[test]
fn healthcheck_fails_when_nothing_listens() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    drop(listener);
    let status = Command::new(env!("CARGO_BIN_EXE_deep-research"))
        .args(["healthcheck", "--port", &port])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
}
