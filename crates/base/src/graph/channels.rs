//! State channels: each key of a graph's state has a reducer that decides how a node's write
//! combines with the current value.

use super::messages;
use crate::store::JsonMap;
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
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
    /// Keys of this list's items that checkpoints keep but clients are not sent (`values`,
    /// `updates`, the state API, the thread's values, a run's result): bulky data only the
    /// graph reads, such as page texts. Empty for most channels.
    pub hidden_keys: Vec<String>,
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

    /// `state` as clients see it, serialized without copying it (see `Channel::hidden_keys`).
    pub fn for_clients<'a>(&'a self, state: &'a JsonMap) -> ForClients<'a> {
        ForClients {
            channels: self,
            state,
        }
    }

    /// Removes what clients are not shown from `state` (or from an update) in place.
    pub fn hide_in(&self, state: &mut JsonMap) {
        for (key, value) in state.iter_mut() {
            if let Some(channel) = self.get(key).filter(|c| !c.hidden_keys.is_empty()) {
                hide_items(value, &channel.hidden_keys);
            }
        }
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

/// Removes `keys` from the items of a list, or of the list an override write carries.
fn hide_items(value: &mut Value, keys: &[String]) {
    match value {
        Value::Array(items) => {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                item.retain(|k, _| !keys.contains(k));
            }
        }
        Value::Object(map) if map.get("type").is_some_and(|t| t == "override") => {
            if let Some(inner) = map.get_mut("value") {
                hide_items(inner, keys);
            }
        }
        _ => {}
    }
}

/// A state as clients see it (`Channels::for_clients`).
pub struct ForClients<'a> {
    channels: &'a Channels,
    state: &'a JsonMap,
}

impl Serialize for ForClients<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.state.len()))?;
        for (key, value) in self.state {
            match self.channels.get(key).filter(|c| !c.hidden_keys.is_empty()) {
                Some(channel) => map.serialize_entry(
                    key,
                    &Hiding {
                        value,
                        keys: &channel.hidden_keys,
                    },
                )?,
                None => map.serialize_entry(key, value)?,
            }
        }
        map.end()
    }
}

/// A channel's value with its items' hidden keys left out.
struct Hiding<'a> {
    value: &'a Value,
    keys: &'a [String],
}

impl Serialize for Hiding<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Array(items) = self.value else {
            return self.value.serialize(serializer);
        };
        let mut seq = serializer.serialize_seq(Some(items.len()))?;
        for item in items {
            match item {
                Value::Object(fields) => seq.serialize_element(&ShownFields {
                    fields,
                    hidden: self.keys,
                })?,
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}

/// One list item without its hidden keys.
struct ShownFields<'a> {
    fields: &'a JsonMap,
    hidden: &'a [String],
}

impl Serialize for ShownFields<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.fields {
            if !self.hidden.contains(key) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
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
            hidden_keys: Vec::new(),
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
    fn hidden_item_keys_stay_out_of_what_clients_see() {
        let mut sources = ch(Reducer::AppendOrOverride);
        sources.name = "sources".into();
        sources.hidden_keys = vec!["text".into()];
        let channels = Channels::new(vec![sources, ch(Reducer::Override)]);
        let state: JsonMap = json!({
            "sources": [{"url": "u", "text": "long page"}, "odd"],
            "k": [{"url": "v", "text": "kept: not a hiding channel"}],
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let shown = json!({
            "sources": [{"url": "u"}, "odd"],
            "k": [{"url": "v", "text": "kept: not a hiding channel"}],
        });
        assert_eq!(json!(channels.for_clients(&state)), shown);
        let mut copy = state.clone();
        channels.hide_in(&mut copy);
        assert_eq!(Value::Object(copy), shown);
        // An override write carries its list under "value".
        let mut update: JsonMap = json!({"sources": {"type": "override",
                                                      "value": [{"url": "u", "text": "t"}]}})
        .as_object()
        .cloned()
        .unwrap_or_default();
        channels.hide_in(&mut update);
        assert_eq!(
            Value::Object(update),
            json!({"sources": {"type": "override", "value": [{"url": "u"}]}})
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
