//! Token usage and estimated cost of one run, per model, from the operator's price table.

use crate::llm::Usage;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Clone, Copy, Debug, Default)]
struct ModelUsage {
    calls: u64,
    input_tokens: u64,
    output_tokens: u64,
    usd: f64,
    priced: bool,
}

/// USD per million tokens of one model.
#[derive(Clone, Copy, Debug, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
}

/// The run's meter (one per run, shared by all its nodes through `RunScope::local`).
#[derive(Debug, Default)]
pub struct CostMeter {
    models: Mutex<BTreeMap<String, ModelUsage>>,
}

impl CostMeter {
    /// Adds one call's usage; returns the run's totals so far.
    pub fn record(&self, model: &str, usage: Usage, price: Option<Price>) -> Value {
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
            let usd =
                (usage.input_tokens as f64 * p.input + usage.output_tokens as f64 * p.output) / 1e6;
            entry.usd += usd;
            crate::telemetry::metrics::model_cost(model, usd);
        }
        render(&models)
    }

    /// The run's totals so far.
    pub fn snapshot(&self) -> Value {
        match self.models.lock() {
            Ok(g) => render(&g),
            Err(poisoned) => render(&poisoned.into_inner()),
        }
    }
}

fn render(models: &BTreeMap<String, ModelUsage>) -> Value {
    let per_model: serde_json::Map<String, Value> = models
        .iter()
        .map(|(name, u)| {
            let v = json!({"calls": u.calls, "input_tokens": u.input_tokens,
                           "output_tokens": u.output_tokens, "usd": round(u.usd), "priced": u.priced});
            (name.clone(), v)
        })
        .collect();
    let sum = |f: fn(&ModelUsage) -> u64| models.values().map(f).sum::<u64>();
    json!({
        "models": per_model,
        "calls": sum(|u| u.calls),
        "input_tokens": sum(|u| u.input_tokens),
        "output_tokens": sum(|u| u.output_tokens),
        "estimated_usd": round(models.values().map(|u| u.usd).sum()),
        "all_priced": models.values().all(|u| u.priced),
    })
}

fn round(usd: f64) -> f64 {
    (usd * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(v["models"]["openai:gpt-4.1"]["calls"], 2);
        assert_eq!(v["estimated_usd"], 6.0);
        let v = m.record(
            "ollama:x",
            Usage {
                input_tokens: 10,
                output_tokens: 5,
            },
            None,
        );
        assert_eq!(v["input_tokens"], 1_000_010);
        assert_eq!(v["all_priced"], false);
    }
}
