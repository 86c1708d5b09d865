//! What every main-graph step writes about the run's cost: the meter resumed after a crash,
//! and the usage and fallback counts each update carries.

use super::cost::{CostMeter, SpentEntry};
use super::fallbacks::FallbackMeter;
use super::state::{AgentState, AgentUpdate};
use crate::graph::NodeContext;

/// A run resumed after a crash or a deploy goes on counting what it spent from its state, plus
/// what the step being redone had spent before it was cut off (its subgraphs' checkpointed
/// work is not done again, and its replayed calls are not counted again).
pub(super) async fn resume_meter(ctx: &NodeContext, state: &AgentState) {
    let meter = ctx.scope.local::<CostMeter>();
    meter.resume_from(state.usage.as_ref());
    for entry in ctx.recorded_spend().await {
        if let Ok(spent) = serde_json::from_value::<SpentEntry>(entry) {
            meter.restore(&spent);
        }
    }
    let (tokens, usd) = meter.spent();
    ctx.scope.local::<crate::graph::Spent>().report(tokens, usd);
}

/// An update that carries the run's usage and fallback counts so far (every main-graph step
/// writes them, so the state always tells what the run cost).
pub(super) fn metered(ctx: &NodeContext) -> AgentUpdate {
    AgentUpdate {
        usage: Some(ctx.scope.local::<CostMeter>().snapshot()),
        fallbacks: Some(ctx.scope.local::<FallbackMeter>().snapshot()),
        ..AgentUpdate::default()
    }
}
