//! Joins streamed deltas that arrive together.
//!
//! A provider's stream often lands in bursts: one socket read holds dozens of token events.
//! Handing each one on separately costs a frame per token on every subscriber for no gain in
//! latency, because they all arrived at the same instant. So a delta is held back only while the
//! next event is already waiting; the moment the stream would have to wait, whatever is pending
//! goes out. Nothing is ever delayed for a token that has not arrived yet.

use super::{Delta, OnDelta};
use futures::{FutureExt, Stream, StreamExt};
use serde_json::Value;

/// Text held back at most: a provider that answers faster than it can be read (a local model,
/// a replay) still shows progress in steps of this size rather than all at the end.
const MAX_PENDING_BYTES: usize = 16 * 1024;

/// Pending deltas of one streaming call.
pub struct Coalescer<'a> {
    on_delta: OnDelta<'a>,
    pending: Option<Delta>,
}

impl<'a> Coalescer<'a> {
    pub fn new(on_delta: OnDelta<'a>) -> Self {
        Self {
            on_delta,
            pending: None,
        }
    }

    /// Adds a delta to the pending one (handing it on once it is large).
    pub fn push(&mut self, delta: Delta) {
        let pending = match &mut self.pending {
            Some(pending) => {
                absorb(pending, delta);
                pending
            }
            None => self.pending.insert(delta),
        };
        if pending.content.len() >= MAX_PENDING_BYTES {
            self.flush();
        }
    }

    /// Hands on what is pending.
    pub fn flush(&mut self) {
        if let Some(delta) = self.pending.take() {
            (self.on_delta)(delta);
        }
    }

    /// The stream's next item: at once if it is already there, else after flushing what is
    /// pending, so held-back text never waits on the network.
    ///
    /// "Already there" includes bytes the socket holds but the HTTP connection task has not
    /// handed over yet: with something pending, this yields once to the scheduler so that task
    /// can run, and only then decides that the stream would have to wait.
    pub async fn next<S: Stream + Unpin>(&mut self, events: &mut S) -> Option<S::Item> {
        if let Some(ready) = events.next().now_or_never() {
            return ready;
        }
        if self.pending.is_some() {
            tokio::task::yield_now().await;
            if let Some(ready) = events.next().now_or_never() {
                return ready;
            }
        }
        self.flush();
        events.next().await
    }
}

/// Appends `next` to `into`: text is concatenated, and tool-call fragments of the same call
/// (same `index` as the last fragment) have their argument text joined, as clients would.
fn absorb(into: &mut Delta, next: Delta) {
    into.content.push_str(&next.content);
    for chunk in next.tool_call_chunks {
        match into.tool_call_chunks.last_mut() {
            Some(last) if last["index"] == chunk["index"] => join_fragment(last, &chunk),
            _ => into.tool_call_chunks.push(chunk),
        }
    }
}

fn join_fragment(last: &mut Value, next: &Value) {
    for key in ["name", "id"] {
        if last[key].is_null() && !next[key].is_null() {
            last[key] = next[key].clone();
        }
    }
    let args = next["args"].as_str().unwrap_or_default();
    if !args.is_empty() {
        let joined = format!("{}{args}", last["args"].as_str().unwrap_or_default());
        last["args"] = Value::String(joined);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    fn delta(content: &str, calls: Vec<Value>) -> Delta {
        Delta {
            id: "m".into(),
            content: content.into(),
            tool_call_chunks: calls,
        }
    }

    fn fragment(index: u64, name: Option<&str>, args: &str) -> Value {
        json!({"name": name, "args": args, "id": name.map(|n| format!("call_{n}")),
               "index": index, "type": "tool_call_chunk"})
    }

    #[tokio::test]
    async fn ready_items_are_joined_and_a_wait_flushes() {
        let seen = Mutex::new(Vec::new());
        let on_delta = |d: Delta| seen.lock().unwrap().push(d);
        let mut batch = Coalescer::new(&on_delta);
        let (tx, rx) = futures::channel::mpsc::unbounded::<&str>();
        let mut rx = rx;
        for piece in ["He", "ll", "o"] {
            tx.unbounded_send(piece).unwrap();
        }
        for _ in 0..3 {
            let piece = batch.next(&mut rx).await.unwrap();
            batch.push(delta(piece, vec![]));
        }
        assert!(seen.lock().unwrap().is_empty(), "nothing had to wait yet");
        let waiter = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tx.unbounded_send(" world").unwrap();
        });
        let piece = batch.next(&mut rx).await.unwrap();
        assert_eq!(
            seen.lock().unwrap()[0].content,
            "Hello",
            "flushed before waiting"
        );
        batch.push(delta(piece, vec![]));
        batch.flush();
        waiter.await.unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].content, " world");
    }

    #[test]
    fn a_long_burst_goes_out_in_bounded_pieces() {
        let seen = Mutex::new(Vec::new());
        let on_delta = |d: Delta| seen.lock().unwrap().push(d.content.len());
        let mut batch = Coalescer::new(&on_delta);
        let piece = "x".repeat(1000);
        for _ in 0..40 {
            batch.push(delta(&piece, vec![]));
        }
        batch.flush();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.iter().sum::<usize>(), 40_000);
        // A piece ends with the delta that reached the bound.
        assert!(
            seen.iter().all(|&n| n < MAX_PENDING_BYTES + 1000),
            "{seen:?}"
        );
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn tool_call_fragments_of_one_call_are_joined() {
        let mut d = delta("", vec![fragment(0, Some("search"), "{\"q\":")]);
        absorb(&mut d, delta("", vec![fragment(0, None, "\"rust\"}")]));
        absorb(&mut d, delta("", vec![fragment(1, Some("fetch"), "{}")]));
        assert_eq!(d.tool_call_chunks.len(), 2);
        assert_eq!(d.tool_call_chunks[0]["args"], "{\"q\":\"rust\"}");
        assert_eq!(d.tool_call_chunks[0]["name"], "search");
        assert_eq!(d.tool_call_chunks[0]["id"], "call_search");
        assert_eq!(d.tool_call_chunks[1]["name"], "fetch");
    }
}
