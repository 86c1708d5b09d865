//! Time-ordered ids. Checkpoint ids must sort in creation order (clients pick the newest by
//! comparing them as strings), so they are UUIDv7 made strictly increasing within the process.

use std::sync::Mutex;
use uuid::Uuid;

static LAST: Mutex<u128> = Mutex::new(0);

/// A UUIDv7 greater than every id this function returned before.
pub fn checkpoint_id() -> Uuid {
    let fresh = Uuid::now_v7().as_u128();
    let mut last = match LAST.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    // Within one millisecond the random bits may go backwards; step past the last id instead.
    let next = if fresh > *last { fresh } else { *last + 1 };
    *last = next;
    Uuid::from_u128(next)
}

/// A new id for threads, runs and assistants (UUIDv7, like the reference server).
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}

/// The id of a graph's default assistant: uuid5 of the graph id in the namespace the
/// reference server uses, so clients that hard-code it keep working.
pub fn default_assistant_id(graph_id: &str) -> Uuid {
    const NAMESPACE: Uuid = Uuid::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);
    Uuid::new_v5(&NAMESPACE, graph_id.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_sort_in_creation_order() {
        let ids: Vec<String> = (0..2000).map(|_| checkpoint_id().to_string()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn default_assistant_ids_match_the_reference() {
        assert_eq!(
            default_assistant_id("agent").to_string(),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
        assert_eq!(
            default_assistant_id("Deep Researcher").to_string(),
            "e9a5370f-7a53-55a8-ada8-6ab9ef15bb5b"
        );
    }
}
