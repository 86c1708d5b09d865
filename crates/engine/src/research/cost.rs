//! Token usage and estimated cost of one run, per model, from the operator's price table.

use crate::llm::Usage;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What one model cost the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ModelUsage {
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Estimated from the operator's price table (0 when the model has no price).
    pub usd: f64,
    /// The model has a price.
    pub priced: bool,
}

/// A run's usage: per model, and the totals (the state's `usage`, and each `usage` event's
/// `run`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RunUsage {
    pub models: BTreeMap<String, ModelUsage>,
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub estimated_usd: f64,
    /// Every model used has a price (else `estimated_usd` is a lower bound).
    pub all_priced: bool,
}

/// USD per million tokens of one model.
#[derive(Clone, Copy, Debug, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

impl Price {
    /// What `usage` costs at this price.
    pub fn of(&self, usage: Usage) -> f64 {
        (usage.input_tokens as f64 * self.input + usage.output_tokens as f64 * self.output) / 1e6
    }
}

/// One finished model call's spend, as recorded for a redo of its step (`spend:` records).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpentEntry {
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None`: the model has no price.
    pub usd: Option<f64>,
}

/// What one run may spend (`[limits] run_max_tokens` and `run_max_usd`; `None`: no cap).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpendCap {
    pub tokens: Option<u64>,
    pub usd: Option<f64>,
}

/// The run's meter (one per run, shared by all its nodes through `RunScope::local`).
#[derive(Debug, Default)]
pub struct CostMeter {
    models: Mutex<BTreeMap<String, ModelUsage>>,
    cap: std::sync::OnceLock<SpendCap>,
    /// The cap was reported (once per run).
    announced: std::sync::atomic::AtomicBool,
}

impl CostMeter {
    /// Sets the run's cap (the first call wins; every node of the run asks).
    pub fn set_cap(&self, cap: SpendCap) {
        let _ = self.cap.set(cap);
    }

    /// Takes over what the state's `usage` says earlier attempts of this run spent (a run
    /// resumed after a crash or a deploy goes on counting from there), if this attempt has
    /// recorded nothing yet.
    pub fn resume_from(&self, usage: Option<&RunUsage>) {
        let Some(usage) = usage else { return };
        let mut mine = self.lock();
        if mine.is_empty() {
            mine.extend(usage.models.iter().map(|(k, v)| (k.clone(), *v)));
        }
    }

    /// Tokens (input plus output) and estimated USD spent so far.
    pub fn spent(&self) -> (u64, f64) {
        let models = self.lock();
        let tokens = models
            .values()
            .map(|u| u.input_tokens + u.output_tokens)
            .sum();
        (tokens, models.values().map(|u| u.usd).sum())
    }

    /// Why the run must stop spending, once it reached its cap.
    pub fn over_cap(&self) -> Option<String> {
        let cap = self.cap.get()?;
        let (tokens, usd) = self.spent();
        if let Some(most) = cap.tokens.filter(|m| tokens >= *m) {
            return Some(format!(
                "the run used {tokens} tokens, reaching its cap of {most} ([limits] run_max_tokens)"
            ));
        }
        if let Some(most) = cap.usd.filter(|m| usd >= *m) {
            return Some(format!(
                "the run spent an estimated ${usd:.4}, reaching its cap of ${most:.4} \
                 ([limits] run_max_usd)"
            ));
        }
        None
    }

    /// True the first time it is called after the cap was reached (to report it once).
    pub fn first_time_over(&self) -> bool {
        self.over_cap().is_some()
            && !self
                .announced
                .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ModelUsage>> {
        self.models
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds one call's usage; returns the run's totals so far.
    pub fn record(&self, model: &str, usage: Usage, price: Option<Price>) -> RunUsage {
        let mut models = match self.models.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let entry = models.entry(model.to_owned()).or_default();
        entry.calls += 1;
        entry.input_tokens += usage.input_tokens;
        entry.output_tokens += usage.output_tokens;
        if let Some(p) = price {
            entry.priced = true;
            let usd = p.of(usage);
            entry.usd += usd;
            crate::telemetry::metrics::model_cost(model, usd);
        }
        render(&models)
    }

    /// Adds a call an earlier attempt of the run made and recorded (its cost was reported to
    /// the metrics then).
    pub fn restore(&self, spent: &SpentEntry) {
        let mut models = self.lock();
        let entry = models.entry(spent.model.clone()).or_default();
        entry.calls += 1;
        entry.input_tokens += spent.input_tokens;
        entry.output_tokens += spent.output_tokens;
        if let Some(usd) = spent.usd {
            entry.priced = true;
            entry.usd += usd;
        }
    }

    /// The run's totals so far.
    pub fn snapshot(&self) -> RunUsage {
        render(&self.lock())
    }
}

/// Why the run must stop spending, once it reached its cap.
pub fn over_cap(ctx: &crate::graph::NodeContext) -> Option<String> {
    ctx.scope.local::<CostMeter>().over_cap()
}

fn render(models: &BTreeMap<String, ModelUsage>) -> RunUsage {
    let per_model = models
        .iter()
        .map(|(name, u)| {
            let shown = ModelUsage {
                usd: round(u.usd),
                ..*u
            };
            (name.clone(), shown)
        })
        .collect();
    let sum = |f: fn(&ModelUsage) -> u64| models.values().map(f).sum::<u64>();
    RunUsage {
        models: per_model,
        calls: sum(|u| u.calls),
        input_tokens: sum(|u| u.input_tokens),
        output_tokens: sum(|u| u.output_tokens),
        estimated_usd: round(models.values().map(|u| u.usd).sum()),
        all_priced: models.values().all(|u| u.priced),
    }
}

fn round(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_run_counts_on_and_stops_at_its_cap() {
        let first = CostMeter::default();
        let usage = Usage {
            input_tokens: 600,
            output_tokens: 100,
        };
        let p = Some(Price {
            input: 1.0,
            output: 1.0,
        });
        let state = first.record("m", usage, p);
        let resumed = CostMeter::default();
        resumed.resume_from(Some(&state));
        resumed.set_cap(SpendCap {
            tokens: Some(1000),
            usd: None,
        });
        assert_eq!(resumed.spent().0, 700);
        assert!(resumed.over_cap().is_none());
        resumed.record("m", usage, p);
        assert!(resumed.over_cap().unwrap().contains("1400 tokens"));
        assert!(resumed.first_time_over());
        assert!(!resumed.first_time_over(), "reported once");
        assert_eq!(resumed.snapshot().models["m"].calls, 2);
    }

    #[test]
    fn accumulates_tokens_and_prices_per_model() {
        let m = CostMeter::default();
        let p = Price {
            input: 2.0,
            output: 8.0,
        };
        m.record(
            "openai:gpt-4.1",
            Usage {
                input_tokens: 1_000_000,
                output_tokens: 0,
            },
            Some(p),
        );
        let v = m.record(
            "openai:gpt-4.1",
            Usage {
                input_tokens: 0,
                output_tokens: 500_000,
            },
            Some(p),
        );
        assert_eq!(v.models["openai:gpt-4.1"].calls, 2);
        assert_eq!(v.estimated_usd, 6.0);
        let v = m.record(
            "ollama:x",
            Usage {
                input_tokens: 10,
                output_tokens: 5,
            },
            None,
        );
        assert_eq!(v.input_tokens, 1_000_010);
        assert!(!v.all_priced);
    }
}
