//! A small graph runtime: nodes read the state and return a `Command` (an update and where to go
//! next), channels' reducers merge updates, every superstep is a checkpoint, subgraphs run under
//! their own namespace. Knows nothing about research, HTTP or wire formats.

pub mod channels;
/// The events a run reports (defined by the stream layer, which encodes them).
pub use crate::stream::events;
pub mod interrupts;
pub mod messages;
mod runtime;
pub mod state;
mod typed;

pub use channels::{Channel, Channels, Reducer};
pub use events::{EventKind, EventSink, GraphEvent, MessageMeta, NullSink, Sink};
pub use interrupts::{Breakpoints, Interrupt, Pause, Resume, ResumeCommand};
pub use runtime::{
    Invocation, NodeContext, Outcome, RunError, RunScope, Spent, Start, invoke, update_state,
};
pub use typed::{Write, WriteOnly, channels_of, schema_of};

use crate::store::JsonMap;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The pseudo-node that ends a graph.
pub const END: &str = "__end__";
/// The pseudo-node a graph starts from (only in drawings and triggers).
pub const START: &str = "__start__";

/// What a node returns: the state update and the nodes to run next.
#[derive(Clone, Debug, Default)]
pub struct Command {
    pub update: JsonMap,
    /// Empty: follow the node's static edges.
    pub goto: Vec<String>,
}

impl Command {
    /// An update that follows the static edges.
    pub fn update(update: JsonMap) -> Self {
        Self {
            update,
            goto: Vec::new(),
        }
    }

    /// Sets the next node (`END` to finish).
    pub fn goto(mut self, node: impl Into<String>) -> Self {
        self.goto.push(node.into());
        self
    }
}

/// A node's failure. `kind` is what clients see as the error type (e.g. `ValueError`).
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum NodeError {
    #[error("{kind}: {message}")]
    Failed { kind: String, message: String },
    /// The run was cancelled while the node ran.
    #[error("cancelled")]
    Cancelled,
    /// The node asked a person (`NodeContext::interrupt`); it is re-run once answered.
    #[error("interrupted")]
    Interrupted(Interrupt),
}

impl NodeError {
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Failed {
            kind: kind.into(),
            message: message.into(),
        }
    }
}

/// A node's future.
pub type NodeFuture = Pin<Box<dyn Future<Output = Result<Command, NodeError>> + Send>>;
/// A node: state in, command out. The state is shared read-only with the other tasks of the
/// step, so starting a task does not copy it.
pub type NodeFn = Arc<dyn Fn(Arc<JsonMap>, NodeContext) -> NodeFuture + Send + Sync>;

/// JSON Schemas the assistants API reports for a graph.
#[derive(Clone, Debug, Default)]
pub struct Schemas {
    pub input: Value,
    pub output: Value,
    pub state: Value,
    pub config: Value,
}

/// A compiled graph.
pub struct Graph {
    pub id: String,
    pub channels: Channels,
    pub schemas: Schemas,
    nodes: Vec<(String, NodeFn)>,
    entry: Vec<String>,
    edges: HashMap<String, Vec<String>>,
    branches: HashMap<String, Vec<String>>,
    config_check: Option<ConfigCheck>,
    /// Whether state values fit the graph's state type (typed graphs only).
    state_check: Option<StateCheck>,
    /// Run once when a run of this graph starts, before its first step.
    prepare: Option<PrepareRun>,
    /// State keys copied to a run's metadata when the run ends with them set.
    run_marks: Vec<String>,
}

/// Readies what a run's nodes share (its parsed settings, say) in the run's scope, once,
/// when the run starts; the error fails the run before any step.
pub type PrepareRun = Arc<dyn Fn(&RunScope) -> Result<(), String> + Send + Sync>;

/// Reads state values as the graph's state type; the error says what does not fit.
pub type StateCheck = Arc<dyn Fn(&JsonMap) -> Result<(), String> + Send + Sync>;

/// Checks a run's config before the run is created; the error names the bad field.
pub type ConfigCheck = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

impl Graph {
    /// Validates a run's `config` for this graph (always fine when the graph has no check).
    pub fn check_config(&self, config: &Value) -> Result<(), String> {
        self.config_check
            .as_ref()
            .map_or(Ok(()), |check| check(config))
    }

    /// Starts a graph definition.
    pub fn builder(id: impl Into<String>) -> GraphBuilder {
        GraphBuilder {
            graph: Graph {
                id: id.into(),
                channels: Channels::default(),
                schemas: Schemas::default(),
                nodes: Vec::new(),
                entry: Vec::new(),
                edges: HashMap::new(),
                branches: HashMap::new(),
                config_check: None,
                state_check: None,
                prepare: None,
                run_marks: Vec::new(),
            },
            channels: Vec::new(),
        }
    }

    /// What a run's final values say about the run as a whole (a research run stopped early,
    /// say): the marked keys that are set, for the run's metadata, where a client listing runs
    /// sees them.
    pub fn run_marks(&self, values: &JsonMap) -> JsonMap {
        self.run_marks
            .iter()
            .filter_map(|key| {
                let value = values.get(key).filter(|v| !v.is_null())?;
                Some((key.clone(), value.clone()))
            })
            .collect()
    }

    pub(crate) fn node(&self, name: &str) -> Option<&NodeFn> {
        self.nodes.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// The nodes that run first.
    pub fn entry(&self) -> &[String] {
        &self.entry
    }

    /// Where a node goes after it returns a command without `goto`.
    pub(crate) fn successors(&self, node: &str) -> Vec<String> {
        self.edges.get(node).cloned().unwrap_or_default()
    }

    /// Node names in declaration order.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.nodes.iter().map(|(n, _)| n.as_str())
    }

    /// The drawing `/assistants/{id}/graph` returns.
    pub fn drawing(&self) -> Value {
        let mut nodes = vec![json!({"id": START, "type": "runnable", "data": {"name": START}})];
        nodes.extend(
            self.node_names()
                .map(|n| json!({"id": n, "type": "runnable", "data": {"name": n}})),
        );
        nodes.push(json!({"id": END}));
        let mut edges: Vec<Value> = self
            .entry
            .iter()
            .map(|n| json!({"source": START, "target": n}))
            .collect();
        for name in self.node_names() {
            for target in self.edges.get(name).into_iter().flatten() {
                edges.push(json!({"source": name, "target": target}));
            }
            for target in self.branches.get(name).into_iter().flatten() {
                edges.push(json!({"source": name, "target": target, "conditional": true}));
            }
            // A node with no way out ends the graph.
            if !self.edges.contains_key(name) && !self.branches.contains_key(name) {
                edges.push(json!({"source": name, "target": END}));
            }
        }
        json!({"nodes": nodes, "edges": edges})
    }
}

/// Builds a `Graph`.
pub struct GraphBuilder {
    graph: Graph,
    channels: Vec<Channel>,
}

impl GraphBuilder {
    /// Declares a state key.
    pub fn channel(mut self, name: &str, reducer: Reducer, default: Value) -> Self {
        self.channels.push(Channel {
            name: name.to_owned(),
            reducer,
            default,
            hidden_keys: Vec::new(),
        });
        self
    }

    /// Adds a node.
    pub fn node<F, Fut>(mut self, name: &str, f: F) -> Self
    where
        F: Fn(Arc<JsonMap>, NodeContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Command, NodeError>> + Send + 'static,
    {
        let f: NodeFn = Arc::new(move |state, ctx| Box::pin(f(state, ctx)));
        self.graph.nodes.push((name.to_owned(), f));
        self
    }

    /// Adds an entry node (an edge from `START`).
    pub fn start(mut self, node: &str) -> Self {
        self.graph.entry.push(node.to_owned());
        self
    }

    /// A static edge, taken when the node's command has no `goto`.
    pub fn edge(mut self, from: &str, to: &str) -> Self {
        self.graph
            .edges
            .entry(from.to_owned())
            .or_default()
            .push(to.to_owned());
        self
    }

    /// Declares where a node's `goto` may lead (for the drawing only).
    pub fn may_goto(mut self, from: &str, targets: &[&str]) -> Self {
        let list = self.graph.branches.entry(from.to_owned()).or_default();
        list.extend(targets.iter().map(|t| (*t).to_owned()));
        self
    }

    /// Validates run configs before runs are created (a bad value is a 422, not a failed run).
    /// Sets what is done once when a run of this graph starts (see `PrepareRun`).
    pub fn prepare(mut self, prepare: PrepareRun) -> Self {
        self.graph.prepare = Some(prepare);
        self
    }

    /// Marks a state key whose value, when a run ends with it set, goes on the run's metadata.
    pub fn run_mark(mut self, key: &str) -> Self {
        self.graph.run_marks.push(key.to_owned());
        self
    }

    pub fn config_check(mut self, check: ConfigCheck) -> Self {
        self.graph.config_check = Some(check);
        self
    }

    pub fn schemas(mut self, schemas: Schemas) -> Self {
        self.graph.schemas = schemas;
        self
    }

    /// Finishes the graph. Panics on a definition error, which is a programming bug caught at
    /// start-up, never on a request path.
    pub fn build(mut self) -> Graph {
        self.graph.channels = Channels::new(self.channels);
        assert!(
            !self.graph.entry.is_empty(),
            "graph {} has no entry node",
            self.graph.id
        );
        let known = |n: &str| n == END || self.graph.node(n).is_some();
        for target in self
            .graph
            .entry
            .iter()
            .chain(self.graph.edges.values().flatten())
        {
            assert!(
                known(target),
                "graph {}: unknown node {target}",
                self.graph.id
            );
        }
        self.graph
    }
}

/// The graphs this process serves, by graph id.
#[derive(Clone, Default)]
pub struct Registry {
    graphs: Vec<Arc<Graph>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, graph: Graph) {
        self.graphs.retain(|g| g.id != graph.id);
        self.graphs.push(Arc::new(graph));
    }

    pub fn get(&self, id: &str) -> Option<Arc<Graph>> {
        self.graphs.iter().find(|g| g.id == id).cloned()
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.graphs.iter().map(|g| g.id.as_str())
    }
}
