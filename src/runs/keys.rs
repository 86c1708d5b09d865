//! Provider keys a run brought (`configurable.apiKeys`): held in this process's memory for the
//! run's lifetime, never stored, and handed to the run's nodes in its config.

use crate::ids::RunId;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// One run's keys: key name (`OPENAI_API_KEY`) to key.
#[derive(Clone, Debug, Default)]
pub struct RunKeys(BTreeMap<String, SecretString>);

impl RunKeys {
    pub fn new(keys: impl IntoIterator<Item = (String, String)>) -> Self {
        Self(keys.into_iter().map(|(k, v)| (k, v.into())).collect())
    }

    /// Hands the keys to the run's nodes: they read them from `configurable.apiKeys`, where
    /// ODR's runs carry them.
    pub fn put_into(&self, config: &mut Value) {
        let keys = self
            .0
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.expose_secret().to_owned())))
            .collect();
        if let Some(configurable) = config
            .get_mut("configurable")
            .and_then(Value::as_object_mut)
        {
            configurable.insert("apiKeys".into(), Value::Object(keys));
        }
    }
}

/// The keys of the runs this process accepted and has not finished.
#[derive(Default)]
pub struct KeyVault(Mutex<HashMap<RunId, RunKeys>>);

impl KeyVault {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, RunKeys>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a run's keys until the run ends here (call before inserting the run: a worker
    /// may claim it at once).
    pub fn hold(&self, run_id: RunId, keys: RunKeys) {
        self.lock().insert(run_id, keys);
    }

    /// Forgets a run's keys (its insert failed, or it ended).
    pub fn drop_keys(&self, run_id: RunId) {
        self.lock().remove(&run_id);
    }

    pub fn get(&self, run_id: RunId) -> Option<RunKeys> {
        self.lock().get(&run_id).cloned()
    }
}
