//! State channels: each key of a graph's state has a reducer that decides how a node's write
//! combines with the current value.

use super::messages;
use crate::store::JsonMap;
use serde_json::{Value, json};

/// How writes to one channel combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reducer {
    /// The last write wins.
    Override,
    /// Lists are concatenated (a non-list write is appended as one item).
    Append,
    /// Appends, unless the write is `{"type": "override", "value": v}`, which replaces.
    AppendOrOverride,
    /// LangChain's `add_messages`: coercion, ids, replace by id, removal.
    Messages,
}

/// One key of the state.
#[derive(Clone, Debug)]
pub struct Channel {
    pub name: String,
    pub reducer: Reducer,
    /// The value before any write (`null` is left out of the state).
    pub default: Value,
}

/// A write that could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("unknown state key '{0}'")]
    UnknownKey(String),
    #[error("state key '{key}': {source}")]
    Message {
        key: String,
        #[source]
        source: messages::MessageError,
    },
}

impl Channel {
    /// Normalises a write before it is stored and applied, so replaying a stored write gives the
    /// same state (message ids are assigned here, once).
    pub fn prepare(&self, write: Value) -> Result<Value, ChannelError> {
        match self.reducer {
            Reducer::Messages => {
                messages::coerce_list(write).map_err(|source| ChannelError::Message {
                    key: self.name.clone(),
                    source,
                })
            }
            _ => Ok(write),
        }
    }

    /// Combines a prepared write with the current value.
    pub fn apply(&self, current: Option<Value>, write: &Value) -> Value {
        let current = current.unwrap_or_else(|| self.default.clone());
        match self.reducer {
            Reducer::Override => write.clone(),
            Reducer::Append => append(current, write),
            Reducer::AppendOrOverride => match override_value(write) {
                Some(v) => v.clone(),
                None => append(current, write),
            },
            Reducer::Messages => messages::merge(current, write),
        }
    }
}

fn override_value(write: &Value) -> Option<&Value> {
    let map = write.as_object()?;
    (map.get("type")? == "override").then(|| map.get("value"))?
}

fn append(current: Value, write: &Value) -> Value {
    let mut list = match current {
        Value::Array(list) => list,
        Value::Null => Vec::new(),
        other => vec![other],
    };
    match write {
        Value::Array(items) => list.extend(items.iter().cloned()),
        item => list.push(item.clone()),
    }
    Value::Array(list)
}

/// The channels of one graph, in declaration order.
#[derive(Clone, Debug, Default)]
pub struct Channels(Vec<Channel>);

impl Channels {
    pub fn new(channels: Vec<Channel>) -> Self {
        Self(channels)
    }

    pub fn get(&self, name: &str) -> Option<&Channel> {
        self.0.iter().find(|c| c.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Channel> {
        self.0.iter()
    }

    /// The state before any write: every channel with a non-null default.
    pub fn initial_state(&self) -> JsonMap {
        self.0
            .iter()
            .filter(|c| !c.default.is_null())
            .map(|c| (c.name.clone(), c.default.clone()))
            .collect()
    }

    /// Prepares a node's update (a JSON object) as an ordered list of writes.
    pub fn prepare_update(&self, update: JsonMap) -> Result<Vec<(String, Value)>, ChannelError> {
        update
            .into_iter()
            .map(|(key, value)| {
                let channel = self
                    .get(&key)
                    .ok_or_else(|| ChannelError::UnknownKey(key.clone()))?;
                Ok((key, channel.prepare(value)?))
            })
            .collect()
    }

    /// Applies prepared writes to `state` in order. Unknown keys were rejected by `prepare_update`
    /// and are skipped here, so replaying old checkpoints never fails.
    pub fn apply(&self, state: &mut JsonMap, writes: &[(String, Value)]) {
        for (key, value) in writes {
            if let Some(channel) = self.get(key) {
                let next = channel.apply(state.remove(key), value);
                state.insert(key.clone(), next);
            }
        }
    }
}

/// Encodes writes for storage as `[[key, value], …]`.
pub fn writes_to_json(writes: &[(String, Value)]) -> Value {
    Value::Array(writes.iter().map(|(k, v)| json!([k, v])).collect())
}

/// Decodes stored writes; malformed entries are skipped.
pub fn writes_from_json(value: &Value) -> Vec<(String, Value)> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|pair| {
                    let key = pair.get(0)?.as_str()?.to_owned();
                    Some((key, pair.get(1)?.clone()))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(reducer: Reducer) -> Channel {
        Channel {
            name: "k".into(),
            reducer,
            default: json!([]),
        }
    }

    #[test]
    fn reducers_combine_as_documented() {
        assert_eq!(
            ch(Reducer::Override).apply(Some(json!(1)), &json!(2)),
            json!(2)
        );
        assert_eq!(ch(Reducer::Append).apply(None, &json!(["a"])), json!(["a"]));
        assert_eq!(
            ch(Reducer::Append).apply(Some(json!(["a"])), &json!("b")),
            json!(["a", "b"])
        );
        let c = ch(Reducer::AppendOrOverride);
        assert_eq!(
            c.apply(Some(json!(["a"])), &json!(["b"])),
            json!(["a", "b"])
        );
        assert_eq!(
            c.apply(
                Some(json!(["a"])),
                &json!({"type": "override", "value": []})
            ),
            json!([])
        );
    }

    #[test]
    fn writes_round_trip_through_json() {
        let writes = vec![
            ("a".to_owned(), json!(1)),
            ("b".to_owned(), json!({"x": [1]})),
        ];
        assert_eq!(writes_from_json(&writes_to_json(&writes)), writes);
    }
}
