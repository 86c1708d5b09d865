//! Reading server-sent events: the providers' streamed answers and, in the CLI and the
//! benchmark, this service's own streams.
//!
//! A small incremental decoder instead of a general parser crate: a streamed report arrives as
//! thousands of events, and the parser combinators of `eventsource-stream` cost about 4,000
//! instructions per event (a tenth of a whole research run's CPU in a profile). This one looks
//! at each byte once. It follows the WHATWG rules that matter here: CR, LF and CRLF line ends,
//! comment lines, `data` lines joined with `\n`, one optional space after the colon, and an
//! event dispatched at a blank line only if it had data.

use bytes::Bytes;
use futures::Stream;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field (empty when absent).
    pub event: String,
    /// The last `id` seen on the stream (ids persist across events, as in browsers).
    pub id: String,
    pub data: String,
}

/// Incremental decoder: feed bytes, take events.
#[derive(Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    /// A CR ended the last line; an LF right after it belongs to the same line end.
    after_cr: bool,
    event: String,
    id: String,
    data: Vec<u8>,
    has_data: bool,
}

impl SseDecoder {
    /// Adds bytes and hands every event they complete to `on_event`, in order. Complete lines
    /// are read where they lie; only a line cut off at the end of `chunk` is copied, to be
    /// finished by the next one (a burst can arrive as one read of hundreds of kilobytes).
    pub fn push(&mut self, mut chunk: &[u8], on_event: &mut impl FnMut(SseEvent)) {
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        if !self.buf.is_empty() {
            let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) else {
                self.buf.extend_from_slice(chunk);
                return;
            };
            let mut line = std::mem::take(&mut self.buf);
            line.extend_from_slice(&chunk[..end]);
            if let Some(event) = self.line(&line) {
                on_event(event);
            }
            line.clear();
            self.buf = line;
            chunk = &chunk[self.line_end(chunk, end)..];
        }
        let mut pos = 0;
        while let Some(offset) = memchr::memchr2(b'\n', b'\r', &chunk[pos..]) {
            let end = pos + offset;
            if let Some(event) = self.line(&chunk[pos..end]) {
                on_event(event);
            }
            pos = self.line_end(chunk, end);
        }
        self.buf.extend_from_slice(&chunk[pos..]);
    }

    /// Where the next line starts after a line end at `bytes[end]`: a CR followed by an LF is
    /// one line end, and a CR that ends `bytes` may have its LF in the next chunk.
    fn line_end(&mut self, bytes: &[u8], end: usize) -> usize {
        let next = end + 1;
        if bytes[end] != b'\r' {
            return next;
        }
        match bytes.get(next) {
            Some(b'\n') => next + 1,
            Some(_) => next,
            None => {
                self.after_cr = true;
                next
            }
        }
    }

    /// Handles one line; returns an event when it was a blank line ending one.
    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match field {
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => self.id = String::from_utf8_lossy(value).into_owned(),
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        let data = std::mem::take(&mut self.data);
        let data = String::from_utf8(data)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Some(SseEvent {
            event,
            id: self.id.clone(),
            data,
        })
    }
}

/// The events of a byte stream (an HTTP body). Transport errors pass through; an event left
/// incomplete when the body ends is dropped, as the standard says.
pub struct SseStream<S> {
    body: S,
    decoder: SseDecoder,
    ready: std::collections::VecDeque<SseEvent>,
    ended: bool,
}

impl<S> SseStream<S> {
    pub fn new(body: S) -> Self {
        Self {
            body,
            decoder: SseDecoder::default(),
            ready: Default::default(),
            ended: false,
        }
    }
}

impl<S, E> Stream for SseStream<S>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    type Item = Result<SseEvent, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut this.body).poll_next(cx)) {
                Some(Ok(bytes)) => {
                    let ready = &mut this.ready;
                    this.decoder.push(&bytes, &mut |e| ready.push_back(e));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                None => this.ended = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&str]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for piece in pieces {
            decoder.push(piece.as_bytes(), &mut |e| out.push(e));
        }
        out
    }

    #[test]
    fn fields_comments_and_every_line_ending() {
        let events = decode(&[
            ": comment\n",
            "event: update\r\ndata: {\"a\":\r\ndata:1}\r\nid: 7\r\n\r\n",
            "data: second\r\rdata:third\n\n",
            "event: no-data\n\n",
        ]);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].event, "update");
        assert_eq!(events[0].data, "{\"a\":\n1}");
        assert_eq!(events[0].id, "7");
        assert_eq!(events[1].data, "second");
        assert_eq!(events[1].event, "", "the event name does not carry over");
        assert_eq!(events[1].id, "7", "the id does");
        assert_eq!(events[2].data, "third");
    }

    #[test]
    fn any_split_of_the_bytes_gives_the_same_events() {
        let text = "event: a\r\ndata: héllo\r\n\r\ndata: x\n\ndata: y\r\r";
        let whole = decode(&[text]);
        assert_eq!(whole.len(), 3);
        let bytes = text.as_bytes();
        for cut in 1..bytes.len() {
            let mut decoder = SseDecoder::default();
            let mut out = Vec::new();
            decoder.push(&bytes[..cut], &mut |e| out.push(e));
            decoder.push(&bytes[cut..], &mut |e| out.push(e));
            assert_eq!(out, whole, "split at {cut}");
        }
    }

    #[test]
    fn one_byte_at_a_time_gives_the_same_events() {
        let text = "event: a\r\ndata: héllo\r\n\r\n: note\rdata: x\n\ndata: long line\r\r";
        let whole = decode(&[text]);
        assert_eq!(whole.len(), 3);
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for byte in text.as_bytes() {
            decoder.push(std::slice::from_ref(byte), &mut |e| out.push(e));
        }
        assert_eq!(out, whole);
    }

    #[tokio::test]
    async fn a_stream_yields_events_and_drops_an_unfinished_one() {
        use futures::StreamExt;
        let body = futures::stream::iter(vec![
            Ok::<_, std::io::Error>(Bytes::from_static(b"data: 1\n\nda")),
            Ok(Bytes::from_static(b"ta: 2\n\ndata: cut off")),
        ]);
        let events: Vec<String> = SseStream::new(body)
            .map(|e| e.unwrap().data)
            .collect()
            .await;
        assert_eq!(events, ["1", "2"]);
    }
}
