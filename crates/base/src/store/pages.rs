//! Run events are stored in pages: every flush of a run's stream becomes one row that holds its
//! frames, instead of one row per frame. A model streaming tokens one by one produces thousands
//! of frames per run; as rows they cost more in index and statement work than the frames weigh.
//!
//! A page is text: per frame a header line `<ms> <seq> <event bytes> <data bytes>\n`, then the
//! event name and the data, with nothing between them. Lengths make it safe for any content;
//! the header keeps it readable with `psql`. A page is keyed by its largest id, so reading the
//! frames after an id starts at the first page whose largest id is past it.

use super::{EventId, StoreError, StoreResult, StoredEvent};
use crate::ids::{RunId, ThreadId};
use std::fmt::Write;

/// A page is cut once it holds this much text, so one flush after a long store outage does not
/// become one huge statement.
const PAGE_BYTES: usize = 1 << 20;

/// One page ready to store.
pub struct Page {
    pub run_id: RunId,
    pub thread_id: ThreadId,
    /// The largest frame id in the page.
    pub last: EventId,
    pub frames: String,
}

/// Packs events into pages, one run per page, in the order given.
pub fn pack(events: &[StoredEvent]) -> Vec<Page> {
    let mut pages: Vec<Page> = Vec::new();
    for event in events {
        let fits = pages.last().is_some_and(|p| {
            p.run_id == event.run_id
                && p.thread_id == event.thread_id
                && p.frames.len() < PAGE_BYTES
        });
        if !fits {
            pages.push(Page {
                run_id: event.run_id,
                thread_id: event.thread_id,
                last: event.id,
                frames: String::new(),
            });
        }
        let Some(page) = pages.last_mut() else {
            continue;
        };
        page.last = page.last.max(event.id);
        let EventId { ms, seq } = event.id;
        // Writing to a String cannot fail.
        let _ = writeln!(
            page.frames,
            "{ms} {seq} {} {}",
            event.event.len(),
            event.data.len()
        );
        page.frames.push_str(&event.event);
        page.frames.push_str(&event.data);
    }
    pages
}

/// The frames of one stored page, in the order they were packed.
pub fn unpack(run_id: RunId, thread_id: ThreadId, frames: &str) -> StoreResult<Vec<StoredEvent>> {
    let bad = |detail: &str| StoreError::Corrupt {
        what: "run event page",
        detail: detail.to_owned(),
    };
    let mut events = Vec::new();
    let mut rest = frames;
    while !rest.is_empty() {
        let (header, body) = rest
            .split_once('\n')
            .ok_or_else(|| bad("header without end"))?;
        let mut fields = header.split(' ').map(str::parse::<i64>);
        let mut field = || -> StoreResult<i64> {
            fields
                .next()
                .and_then(Result::ok)
                .ok_or_else(|| bad(&format!("bad header '{header}'")))
        };
        let (ms, seq, event_len, data_len) = (field()?, field()?, field()?, field()?);
        let event_len = usize::try_from(event_len).map_err(|_| bad("negative length"))?;
        let data_len = usize::try_from(data_len).map_err(|_| bad("negative length"))?;
        let event = body
            .get(..event_len)
            .ok_or_else(|| bad("event cut short"))?;
        let end = event_len
            .checked_add(data_len)
            .ok_or_else(|| bad("length overflow"))?;
        let data = body
            .get(event_len..end)
            .ok_or_else(|| bad("data cut short"))?;
        events.push(StoredEvent {
            run_id,
            thread_id,
            id: EventId { ms, seq },
            event: event.to_owned(),
            data: data.into(),
        });
        rest = body.get(end..).unwrap_or_default();
    }
    Ok(events)
}

/// The frames after `after` from pages read in key order: sorted by id, each id once. A retried
/// flush may store a frame a second time in a later page; the first copy stored wins.
pub fn merge(pages: Vec<Vec<StoredEvent>>, after: Option<EventId>) -> Vec<StoredEvent> {
    let mut events: Vec<StoredEvent> = pages
        .into_iter()
        .flatten()
        .filter(|e| after.is_none_or(|a| e.id > a))
        .collect();
    // Stable: among equal ids the copy from the earlier page stays first.
    events.sort_by_key(|e| e.id);
    events.dedup_by_key(|e| e.id);
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn event(run: u128, ms: i64, seq: i64, event: &str, data: &str) -> StoredEvent {
        StoredEvent {
            run_id: Uuid::from_u128(run).into(),
            thread_id: Uuid::from_u128(9).into(),
            id: EventId { ms, seq },
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn any_content_round_trips() {
        let events = vec![
            event(
                1,
                5,
                0,
                "messages|researcher:1",
                "[{\"content\":\"a\\nb\"},{}]",
            ),
            event(1, 5, 1, "odd\nname é", "raw\nnew line and 12 34 56 78\n"),
            event(1, 3, 7, "", ""),
        ];
        let pages = pack(&events);
        assert_eq!(pages.len(), 1);
        assert_eq!(
            pages[0].last,
            EventId { ms: 5, seq: 1 },
            "keyed by the largest id"
        );
        let back = unpack(
            Uuid::from_u128(1).into(),
            Uuid::from_u128(9).into(),
            &pages[0].frames,
        )
        .unwrap();
        assert_eq!(back, events);
    }

    #[test]
    fn runs_and_size_split_pages() {
        let big = "x".repeat(PAGE_BYTES / 2);
        let events = vec![
            event(1, 1, 0, "values", &big),
            event(1, 1, 1, "values", &big),
            event(1, 1, 2, "values", "{}"),
            event(2, 1, 3, "values", "{}"),
        ];
        let pages = pack(&events);
        let shape: Vec<(u128, i64)> = pages
            .iter()
            .map(|p| (p.run_id.uuid().as_u128(), p.last.seq))
            .collect();
        assert_eq!(shape, vec![(1, 1), (1, 2), (2, 3)]);
    }

    #[test]
    fn damaged_pages_are_errors_not_panics() {
        for text in [
            "1 2 3",
            "1 2 x 4\nabc",
            "1 2 3 40\nabcdef",
            "1 2 -1 0\n",
            "1 2 1 0\né",
        ] {
            assert!(
                unpack(Uuid::nil().into(), Uuid::nil().into(), text).is_err(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn merge_sorts_filters_and_keeps_the_first_copy() {
        let first = vec![
            event(1, 3, 0, "values", "old"),
            event(1, 4, 0, "values", "b"),
        ];
        let retry = vec![
            event(1, 3, 0, "values", "new"),
            event(1, 4, 0, "values", "b"),
            event(1, 6, 0, "values", "c"),
        ];
        let all = merge(vec![first.clone(), retry.clone()], None);
        assert_eq!(
            all,
            vec![first[0].clone(), first[1].clone(), retry[2].clone()]
        );
        let after = merge(vec![first, retry.clone()], Some(EventId { ms: 4, seq: 0 }));
        assert_eq!(after, vec![retry[2].clone()]);
    }
}
