//! Stream modes a client may ask for, parsed from every encoding the SDKs send.

/// One requested stream mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamMode {
    Values,
    Updates,
    /// Legacy: `messages/metadata`, `messages/partial`, `messages/complete`.
    Messages,
    /// `[message, metadata]` tuples under the event name `messages`.
    MessagesTuple,
    Custom,
    Tasks,
    Checkpoints,
    Debug,
}

impl StreamMode {
    fn parse(text: &str) -> Result<Self, String> {
        Ok(match text {
            "values" => Self::Values,
            "updates" => Self::Updates,
            "messages" => Self::Messages,
            "messages-tuple" => Self::MessagesTuple,
            "custom" => Self::Custom,
            "tasks" => Self::Tasks,
            "checkpoints" => Self::Checkpoints,
            "debug" => Self::Debug,
            // Accepted and silent would be worse: the client would wait for events that never
            // come.
            "events" => {
                return Err(
                    "stream_mode 'events' (LangChain callback events) is not supported \
                            by this server; use values, updates, messages-tuple, custom, tasks, \
                            checkpoints or debug"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "Invalid stream_mode '{other}': expected one of values, updates, messages, \
                     messages-tuple, custom, tasks, checkpoints, debug"
                ));
            }
        })
    }

    /// The wire name stored in run kwargs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Values => "values",
            Self::Updates => "updates",
            Self::Messages => "messages",
            Self::MessagesTuple => "messages-tuple",
            Self::Custom => "custom",
            Self::Tasks => "tasks",
            Self::Checkpoints => "checkpoints",
            Self::Debug => "debug",
        }
    }
}

/// The modes of one run (never empty: nothing requested means `values`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamModes(Vec<StreamMode>);

impl StreamModes {
    /// From query-string values: repeated keys, a JSON array, comma lists or empty values.
    pub fn from_query(values: &[String]) -> Result<Option<Self>, String> {
        let mut names = Vec::new();
        for raw in values {
            let raw = raw.trim();
            if raw.starts_with('[') {
                let list: Vec<String> = serde_json::from_str(raw)
                    .map_err(|_| format!("stream_mode: invalid JSON list '{raw}'"))?;
                names.extend(list);
            } else {
                names.extend(raw.split(',').map(|s| s.trim().to_owned()));
            }
        }
        names.retain(|n| !n.is_empty());
        if names.is_empty() {
            return Ok(None);
        }
        Self::from_names(names.iter().map(String::as_str)).map(Some)
    }

    fn from_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<Self, String> {
        let mut modes = Vec::new();
        for name in names {
            let mode = StreamMode::parse(name)?;
            if !modes.contains(&mode) {
                modes.push(mode);
            }
        }
        if modes.is_empty() {
            modes.push(StreamMode::Values);
        }
        Ok(Self(modes))
    }

    /// These modes (a server-made run's); none is `values`.
    pub fn of(modes: &[StreamMode]) -> Self {
        let mut unique: Vec<StreamMode> = Vec::with_capacity(modes.len());
        for mode in modes {
            if !unique.contains(mode) {
                unique.push(*mode);
            }
        }
        if unique.is_empty() {
            unique.push(StreamMode::Values);
        }
        Self(unique)
    }

    /// Just `values`, the default.
    pub fn values_only() -> Self {
        Self(vec![StreamMode::Values])
    }

    pub fn contains(&self, mode: StreamMode) -> bool {
        self.0.contains(&mode)
    }

    /// Wire names, for run kwargs.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(StreamMode::as_str).collect()
    }
}

impl Default for StreamModes {
    fn default() -> Self {
        Self::values_only()
    }
}

/// Stored with the run as the list of wire names.
impl serde::Serialize for StreamModes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.names().serialize(s)
    }
}

/// A request's `stream_mode` (a name or a list of names) and the stored list alike.
impl<'de> serde::Deserialize<'de> for StreamModes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ModesVisitor)
    }
}

struct ModesVisitor;

impl<'de> serde::de::Visitor<'de> for ModesVisitor {
    type Value = StreamModes;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a stream mode or a list of them")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<StreamModes, E> {
        StreamModes::from_names(std::iter::once(name)).map_err(E::custom)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<StreamModes, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element::<String>()? {
            names.push(name);
        }
        StreamModes::from_names(names.iter().map(String::as_str)).map_err(serde::de::Error::custom)
    }
}

impl StreamModes {
    /// Whether a stored frame named `event` belongs to one of these modes (join-stream filter).
    pub fn matches_event(&self, event: &str) -> bool {
        let base = event.split('|').next().unwrap_or(event);
        let base = base.split('/').next().unwrap_or(base);
        base == "metadata"
            || base == "error"
            || self.0.iter().any(|m| match m {
                StreamMode::Messages | StreamMode::MessagesTuple => base == "messages",
                other => other.as_str() == base,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_every_sdk_encoding() {
        let m = serde_json::from_value::<StreamModes>(json!("updates")).unwrap();
        assert_eq!(m.names(), ["updates"]);
        assert_eq!(StreamModes::default().names(), ["values"]);
        let q = |v: &[&str]| {
            StreamModes::from_query(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(
            q(&["values", "updates"]).unwrap().unwrap().names(),
            ["values", "updates"]
        );
        assert_eq!(
            q(&["[\"values\",\"custom\"]"]).unwrap().unwrap().names(),
            ["values", "custom"]
        );
        assert_eq!(
            q(&["values,debug"]).unwrap().unwrap().names(),
            ["values", "debug"]
        );
        assert_eq!(q(&[""]).unwrap(), None);
        assert!(q(&["bogus"]).is_err());
        assert!(serde_json::from_value::<StreamModes>(json!(["values", "lifecycle"])).is_err());
        let events = serde_json::from_value::<StreamModes>(json!(["values", "events"]))
            .unwrap_err()
            .to_string();
        assert!(
            events.contains("'events'") && events.contains("not supported"),
            "{events}"
        );
    }

    #[test]
    fn join_filter_matches_suffixed_and_legacy_names() {
        let m = serde_json::from_value::<StreamModes>(json!(["messages"])).unwrap();
        assert!(m.matches_event("messages/partial"));
        assert!(m.matches_event("messages|child:1"));
        assert!(m.matches_event("metadata"));
        assert!(!m.matches_event("values"));
    }
}
