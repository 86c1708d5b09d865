//! Graphs whose state is a Rust type. The runtime keeps JSON channels (LangGraph's model, and
//! the wire format); a typed graph declares them from one struct, so the channels, their
//! defaults, their reducers and the published state schema cannot drift apart, and its nodes
//! read that struct instead of looking keys up in a map.
//!
//! A field's reducer is its `x-reducer` schema keyword, set with
//! `#[schemars(extend("x-reducer" = "append_or_override"))]`; a field without one is
//! overwritten by each write. Its default is its value in `S::default()`. A list field's
//! `x-hidden-keys` names item keys kept in checkpoints but not sent to clients.

use super::{Channel, Command, GraphBuilder, NodeContext, NodeError, Reducer};
use crate::store::JsonMap;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;

/// The reducer a field's `x-reducer` keyword names.
fn reducer_named(name: &str) -> Option<Reducer> {
    match name {
        "override" => Some(Reducer::Override),
        "append" => Some(Reducer::Append),
        "append_or_override" => Some(Reducer::AppendOrOverride),
        "messages" => Some(Reducer::Messages),
        _ => None,
    }
}

/// The channels of the state type `S`, one per field, in field order.
pub fn channels_of<S: Serialize + Default + JsonSchema>() -> Vec<Channel> {
    let schema = schemars::schema_for!(S);
    let defaults = match serde_json::to_value(S::default()) {
        Ok(Value::Object(map)) => map,
        // A state type serializes to an object; anything else declares no channels (and the
        // unit tests of each state type catch it).
        _ => JsonMap::new(),
    };
    defaults
        .into_iter()
        .map(|(name, default)| {
            let property = schema.get("properties").and_then(|p| p.get(&name));
            let keyword = property
                .and_then(|p| p.get("x-reducer"))
                .and_then(Value::as_str);
            let hidden_keys = property
                .and_then(|p| p.get("x-hidden-keys"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            let reducer = match keyword {
                Some(k) => reducer_named(k)
                    .unwrap_or_else(|| panic!("state field {name}: unknown x-reducer {k}")),
                None => Reducer::Override,
            };
            Channel {
                name,
                reducer,
                default,
                hidden_keys,
            }
        })
        .collect()
}

/// The JSON Schema of a state type, as `/assistants/{id}/schemas` shows it.
pub fn schema_of<S: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(S)).unwrap_or(Value::Null)
}

/// Reads a node's state as `S`.
fn read<S: DeserializeOwned>(state: &JsonMap) -> Result<S, NodeError> {
    S::deserialize(state).map_err(|e| {
        NodeError::new(
            "InvalidStateError",
            format!("the thread's state does not fit this graph: {e}"),
        )
    })
}

impl GraphBuilder {
    /// Declares every channel of the state type `S` (see the module's comment). Writes from
    /// outside the graph's nodes (run input, `update_state`, a command's update) must then
    /// leave values that read as `S`.
    pub fn state<S: Serialize + DeserializeOwned + Default + JsonSchema>(mut self) -> Self {
        self.channels.extend(channels_of::<S>());
        self.graph.state_check = Some(Arc::new(|values: &JsonMap| {
            S::deserialize(values)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }));
        self
    }

    /// Adds a node that reads the state as `S`.
    pub fn typed_node<S, F, Fut>(self, name: &str, f: F) -> Self
    where
        S: DeserializeOwned + Send + 'static,
        F: Fn(S, NodeContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Command, NodeError>> + Send + 'static,
    {
        let f = Arc::new(f);
        self.node(name, move |state: Arc<JsonMap>, ctx| {
            let started = read::<S>(&state).map(|s| f(s, ctx));
            async move { started?.await }
        })
    }
}

fn to_input(input: &impl Serialize) -> Result<Value, NodeError> {
    serde_json::to_value(input).map_err(|e| NodeError::new("InvalidUpdateError", e.to_string()))
}

impl NodeContext {
    /// `subgraph` with a typed input and a typed final state.
    pub async fn typed_subgraph<O: DeserializeOwned>(
        &self,
        graph: &super::Graph,
        input: &impl Serialize,
    ) -> Result<O, NodeError> {
        let out = self.subgraph(graph, to_input(input)?).await?;
        read(&out)
    }

    /// `subgraph_keyed` with a typed input and a typed final state.
    pub async fn typed_subgraph_keyed<O: DeserializeOwned>(
        &self,
        name: &str,
        key: &str,
        graph: &super::Graph,
        input: &impl Serialize,
    ) -> Result<O, NodeError> {
        let out = self
            .subgraph_keyed(name, key, graph, to_input(input)?)
            .await?;
        read(&out)
    }
}

impl super::Graph {
    /// Checks that `writes`, applied to `state`, leave values of the graph's state type. Only
    /// the written channels are read (the state type fills the others with defaults), so a
    /// long thread's history is not copied for a small update.
    pub fn check_writes(&self, state: &JsonMap, writes: &[(String, Value)]) -> Result<(), String> {
        let Some(check) = &self.state_check else {
            return Ok(());
        };
        let mut touched: JsonMap = writes
            .iter()
            .filter_map(|(key, _)| state.get(key).map(|v| (key.clone(), v.clone())))
            .collect();
        self.channels.apply(&mut touched, writes);
        // One key at a time, so the error names the key.
        for (key, value) in touched {
            let one = JsonMap::from_iter([(key.clone(), value)]);
            check(&one).map_err(|e| format!("{key}: {e}"))?;
        }
        Ok(())
    }
}

impl Command {
    /// A typed update: each field that serializes (leave out the ones not written, with
    /// `skip_serializing_if`) is one channel write.
    pub fn write(update: impl Serialize) -> Result<Self, NodeError> {
        match serde_json::to_value(update) {
            Ok(Value::Object(map)) => Ok(Self::update(map)),
            Ok(other) => Err(NodeError::new(
                "InvalidUpdateError",
                format!("a state update must be an object, not {other}"),
            )),
            Err(e) => Err(NodeError::new("InvalidUpdateError", e.to_string())),
        }
    }
}

/// A channel the graph's nodes write but never read (a subgraph's sources, say, which only its
/// parent reads from the final state): it is a channel like any other, but not read into the
/// state struct, because copying a growing list into every step's struct costs CPU and memory
/// for nothing. It reads as absent and declares `T`'s default and schema.
pub struct WriteOnly<T>(std::marker::PhantomData<T>);

impl<T> Default for WriteOnly<T> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T> std::fmt::Debug for WriteOnly<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WriteOnly")
    }
}

impl<T: Default + Serialize> Serialize for WriteOnly<T> {
    fn serialize<Ser: serde::Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        T::default().serialize(s)
    }
}

impl<'de, T> serde::Deserialize<'de> for WriteOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Self::default())
    }
}

impl<T: JsonSchema> JsonSchema for WriteOnly<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// A write to an `append_or_override` channel: added to what it holds, or replacing it.
#[derive(Debug)]
pub enum Write<T> {
    Add(T),
    Replace(T),
}

impl<T: Serialize> Serialize for Write<T> {
    fn serialize<Ser: serde::Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::Add(value) => value.serialize(s),
            Self::Replace(value) => {
                let mut map = s.serialize_map(Some(2))?;
                map.serialize_entry("type", "override")?;
                map.serialize_entry("value", value)?;
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Default, Serialize, Deserialize, JsonSchema)]
    struct Example {
        #[schemars(extend("x-reducer" = "messages"))]
        messages: Vec<Value>,
        #[schemars(extend("x-reducer" = "append_or_override"))]
        notes: Vec<String>,
        brief: Option<String>,
        rounds: u32,
    }

    #[test]
    fn channels_come_from_the_fields() {
        let channels: Vec<(String, Reducer, Value)> = channels_of::<Example>()
            .into_iter()
            .map(|c| (c.name, c.reducer, c.default))
            .collect();
        assert_eq!(
            channels,
            vec![
                ("messages".into(), Reducer::Messages, json!([])),
                ("notes".into(), Reducer::AppendOrOverride, json!([])),
                ("brief".into(), Reducer::Override, Value::Null),
                ("rounds".into(), Reducer::Override, json!(0)),
            ]
        );
        assert_eq!(
            schema_of::<Example>()["properties"]["notes"]["x-reducer"],
            "append_or_override"
        );
    }

    #[test]
    fn writes_replace_or_add() {
        assert_eq!(json!(Write::Add(vec![1])), json!([1]));
        assert_eq!(
            json!(Write::Replace(vec![1])),
            json!({"type": "override", "value": [1]})
        );
    }

    #[test]
    fn a_state_that_does_not_fit_is_a_clear_error() {
        let mut state = JsonMap::new();
        state.insert("rounds".into(), json!("three"));
        let Err(NodeError::Failed { kind, message }) = read::<Example>(&state) else {
            panic!("read a bad state");
        };
        assert_eq!(kind, "InvalidStateError");
        assert!(
            message.contains("rounds") || message.contains("invalid type"),
            "{message}"
        );
    }
}
