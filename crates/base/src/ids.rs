//! The ids of the service's resources. Each is its own type (a thread id cannot be passed where a
//! run id is wanted), a UUID underneath, written and stored as its text. Checkpoint ids must sort
//! in creation order (clients pick the newest by comparing them as strings), so they are UUIDv7
//! made strictly increasing within the process.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use uuid::Uuid;

/// Why a path or body id was refused (the reference server's wording).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("Invalid {0} ID: must be a UUID")]
pub struct BadId(pub &'static str);

macro_rules! id_type {
    ($(#[$meta:meta])* $name:ident, $what:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        // By hand, so a malformed id in a path or a body is refused in the reference's words.
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl $name {
            /// What the id names, as error messages say it.
            pub const WHAT: &'static str = $what;

            /// A fresh UUIDv7 (time-ordered, like the reference server's ids).
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            pub const fn from_uuid(id: Uuid) -> Self {
                Self(id)
            }

            pub const fn uuid(self) -> Uuid {
                self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl FromStr for $name {
            type Err = BadId;
            fn from_str(s: &str) -> Result<Self, BadId> {
                Uuid::parse_str(s).map(Self).map_err(|_| BadId($what))
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }

        impl From<$name> for Uuid {
            fn from(id: $name) -> Uuid {
                id.0
            }
        }
    };
}

id_type!(
    /// A thread: a conversation with its checkpoints and runs.
    ThreadId, "thread"
);
id_type!(
    /// One run of a graph on a thread.
    RunId, "run"
);
id_type!(
    /// An assistant: a graph with saved settings.
    AssistantId, "assistant"
);
id_type!(
    /// A checkpoint of a thread's state; ordered by creation (see `CheckpointId::next`).
    CheckpointId, "checkpoint"
);
id_type!(
    /// A scheduled run.
    CronId, "cron"
);

static LAST: Mutex<u128> = Mutex::new(0);

impl CheckpointId {
    /// A UUIDv7 greater than every checkpoint id this process made before.
    pub fn next() -> Self {
        let fresh = Uuid::now_v7().as_u128();
        let mut last = match LAST.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Within one millisecond the random bits may go backwards; step past the last id instead.
        let next = if fresh > *last { fresh } else { *last + 1 };
        *last = next;
        Self(Uuid::from_u128(next))
    }
}

impl AssistantId {
    /// The id of a graph's default assistant: uuid5 of the graph id in the namespace the
    /// reference server uses, so clients that hard-code it keep working.
    pub fn default_for(graph_id: &str) -> Self {
        const NAMESPACE: Uuid = Uuid::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);
        Self(Uuid::new_v5(&NAMESPACE, graph_id.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_sort_in_creation_order() {
        let ids: Vec<String> = (0..2000)
            .map(|_| CheckpointId::next().to_string())
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn default_assistant_ids_match_the_reference() {
        assert_eq!(
            AssistantId::default_for("agent").to_string(),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
        assert_eq!(
            AssistantId::default_for("Deep Researcher").to_string(),
            "e9a5370f-7a53-55a8-ada8-6ab9ef15bb5b"
        );
    }

    #[test]
    fn ids_read_and_write_as_plain_uuid_text() {
        let id: ThreadId = "1ef4a9b2-0000-7000-8000-000000000001".parse().unwrap();
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"1ef4a9b2-0000-7000-8000-000000000001\""
        );
        let back: ThreadId =
            serde_json::from_str("\"1ef4a9b2-0000-7000-8000-000000000001\"").unwrap();
        assert_eq!(back, id);
        assert_eq!(
            "nope".parse::<RunId>().unwrap_err().to_string(),
            "Invalid run ID: must be a UUID"
        );
    }
}
