//! A run's options as types: each is parsed once, at creation, from the request's text, and
//! stored with the run in the same spelling.

use crate::store::text_enum;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

text_enum!(
    /// What happens to a streamed run when its client disconnects.
    OnDisconnect { Continue => "continue", Cancel => "cancel" }
);

text_enum!(
    /// Whether a stateless run's temporary thread is deleted when it ends.
    OnCompletion { Delete => "delete", Keep => "keep" }
);

text_enum!(
    /// What a run on a missing thread does: fail, or create the thread.
    IfNotExists { Reject => "reject", Create => "create" }
);

text_enum!(
    /// When checkpoints are persisted (LangGraph's `durability`). This server writes every
    /// step's checkpoint before the next step starts (`sync`, which gives what `async`
    /// promises too); `exit` is refused at run creation.
    Durability { Sync => "sync", Async => "async", Exit => "exit" }
);

// Not derived: `text_enum!` declares the variants, so `#[default]` cannot be put on one.
#[allow(clippy::derivable_impls)]
impl Default for Durability {
    fn default() -> Self {
        Self::Async
    }
}
