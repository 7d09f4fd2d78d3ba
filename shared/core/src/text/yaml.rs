//! The one way Kuvryn Sync parses untrusted YAML: `.ksync.yaml`, manifests, values files,
//! kustomization files, SOPS files, chart indexes, chart CRDs and Helm output.
//!
//! Parsing is `serde-saphyr` with its budgets set from [`Limits`] (bytes, documents, depth,
//! nodes, anchors, alias replays), into [`serde_json::Value`] (Kubernetes objects are JSON).
//!
//! serde-saphyr's node budget counts the nodes the *parser* sees, not the ones an alias
//! produces when it is replayed, and its alias-replay limit counts events (end events included)
//! separately from it. So the values are built by our own small visitor, `Meter`, which counts
//! every node handed to it — scalars, sequences, mappings and keys, aliases included — and the
//! nesting depth, and stops at [`Limits::max_nodes`] / [`Limits::max_depth`] before the node is
//! stored. The document built can therefore never hold more than `max_nodes` nodes, whatever the
//! input's aliases expand to; serde-saphyr's own limits stay on as a backstop (parser events,
//! retained anchor copies, replay stack depth).
//!
//! Choices where YAML and JSON differ:
//! - Mapping keys that are scalars but not strings (`1: a`, `true: b`, `null: c`) become their
//!   value's spelling as a string (`"1"`, `"true"`, `"null"`), as Helm and kubectl (which turn
//!   YAML into JSON) do; a sequence or mapping used as a key is an error.
//! - Merge keys (`<<: *base`) are applied, as Helm and kubectl apply them.
//! - A repeated key keeps its last value (what decoding to JSON did before).
//! - Empty and null documents of a stream are skipped.
//!
//! Errors name the limit or the position and the kind of problem, never the input's content.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_saphyr::budget::BudgetBreach;

/// Budgets of one parse (one file or one stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of input (and of scalar text, retained anchor text).
    pub max_bytes: usize,
    /// Nodes built: scalars, sequences, mappings and mapping keys, alias expansions included.
    pub max_nodes: usize,
    /// Nesting of sequences and mappings.
    pub max_depth: usize,
    /// Documents in one stream.
    pub max_documents: usize,
}

impl Limits {
    /// The default budget of one file or rendered stream:
    /// - 16 MiB: large CRD bundles (a few MB) and Helm outputs fit several times over;
    /// - 1,000,000 nodes: a CRD bundle has about one node per 16 bytes (a 3.8 MB bundle of
    ///   3,000 CRDs is 240,000 nodes), so this fits a bundle of about 15 MB; an alias bomb stops
    ///   there, after building at most that many JSON nodes (about 75 MB measured);
    /// - depth 128: Kubernetes objects and CRD schemas nest well under 40;
    /// - 20,000 documents: bundles of thousands of objects in one file.
    pub const DEFAULT: Limits =
        Limits { max_bytes: 16 << 20, max_nodes: 1_000_000, max_depth: 128, max_documents: 20_000 };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Which budget a document exceeded, with the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exceeded {
    Bytes { limit: usize },
    Nodes { limit: usize },
    Depth { limit: usize },
    Documents { limit: usize },
    Anchors { limit: usize },
    MergeKeys { limit: usize },
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceeded::Bytes { limit } => write!(
                f,
                "more than {limit} bytes (scalars and anchored text included); split the file"
            ),
            Exceeded::Nodes { limit } => write!(
                f,
                "more than {limit} nodes (aliases included); split the file or expand fewer aliases"
            ),
            Exceeded::Depth { limit } => {
                write!(f, "nesting deeper than {limit} levels (aliases included)")
            }
            Exceeded::Documents { limit } => {
                write!(f, "more than {limit} documents in one file; split the file")
            }
            Exceeded::Anchors { limit } => write!(f, "more than {limit} anchors"),
            Exceeded::MergeKeys { limit } => write!(f, "more than {limit} merge keys (<<)"),
        }
    }
}

/// Why a YAML input was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    #[error("YAML budget exceeded: {0}")]
    Budget(Exceeded),
    #[error("invalid YAML at line {line}, column {column}: {problem}")]
    Syntax { line: usize, column: usize, problem: String },
}

impl YamlError {
    /// `(line, column)` of a syntax error (`(0, 0)` when unknown or over budget).
    pub fn position(&self) -> (usize, usize) {
        match self {
            YamlError::Syntax { line, column, .. } => (*line, *column),
            YamlError::Budget(_) => (0, 0),
        }
    }

    /// The problem without the position: the syntax problem or the budget sentence.
    pub fn problem(&self) -> String {
        match self {
            YamlError::Syntax { problem, .. } => problem.clone(),
            budget => budget.to_string(),
        }
    }

    /// The budget exceeded, if that is the problem.
    pub fn exceeded(&self) -> Option<Exceeded> {
        match self {
            YamlError::Budget(exceeded) => Some(*exceeded),
            YamlError::Syntax { .. } => None,
        }
    }
}

/// Every non-empty document of a YAML stream, within [`Limits::DEFAULT`].
pub fn documents(text: &str) -> Result<Vec<Value>, YamlError> {
    documents_with(text, &Limits::DEFAULT)
}

/// Every non-empty document of a YAML stream, within `limits` (for the stream as a whole).
pub fn documents_with(text: &str, limits: &Limits) -> Result<Vec<Value>, YamlError> {
    parse_documents(text, limits)
}

/// Every non-empty document of a YAML stream as [`Node`]s, which keep the key order (SOPS needs
/// it: its MAC follows document order), within [`Limits::DEFAULT`].
pub fn ordered_documents(text: &str) -> Result<Vec<Node>, YamlError> {
    parse_documents(text, &Limits::DEFAULT)
}

fn parse_documents<T: Tree>(text: &str, limits: &Limits) -> Result<Vec<T>, YamlError> {
    check_bytes(text, limits)?;
    let meter = Meter::install(limits);
    let documents: Result<Vec<Metered<T>>, _> =
        serde_saphyr::from_str_multiple_with_options(text, options(limits));
    match documents {
        Ok(documents) => Ok(documents.into_iter().map(|d| d.0).collect()),
        Err(err) => Err(meter.error(&err, limits)),
    }
}

/// The one document of a YAML text (`Null` when it is empty), within [`Limits::DEFAULT`].
pub fn document(text: &str) -> Result<Value, YamlError> {
    document_with(text, &Limits::DEFAULT)
}

/// The one document of a YAML text (`Null` when it is empty), within `limits`; a second
/// document is an error.
pub fn document_with(text: &str, limits: &Limits) -> Result<Value, YamlError> {
    check_bytes(text, limits)?;
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    let meter = Meter::install(limits);
    let document =
        serde_saphyr::with_deserializer_from_str_with_options(text, options(limits), |de| {
            <Metered<Value> as serde::Deserialize>::deserialize(de)
        });
    match document {
        Ok(Metered(value)) => Ok(value),
        Err(err) => Err(meter.error(&err, limits)),
    }
}

/// Deserialize the one document of `text` into `T` (through JSON), within [`Limits::DEFAULT`].
/// A shape error (`T` does not match) is a [`YamlError::Syntax`] at line 0.
pub fn from_str<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    from_str_with(text, &Limits::DEFAULT)
}

/// Deserialize the one document of `text` into `T` (through JSON), within `limits`.
pub fn from_str_with<T: serde::de::DeserializeOwned>(
    text: &str,
    limits: &Limits,
) -> Result<T, YamlError> {
    let value = document_with(text, limits)?;
    serde_json::from_value(value).map_err(|err| YamlError::Syntax {
        line: 0,
        column: 0,
        problem: strip_quoted(&err.to_string()),
    })
}

/// `value` as a YAML document (serde-saphyr's serializer), for output: multi-line strings as
/// literal blocks, long lines never folded.
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX;
    serde_saphyr::to_string_with_options(value, options)
}

fn check_bytes(text: &str, limits: &Limits) -> Result<(), YamlError> {
    if text.len() > limits.max_bytes {
        return Err(YamlError::Budget(Exceeded::Bytes { limit: limits.max_bytes }));
    }
    Ok(())
}

/// serde-saphyr's options: its budgets as backstops of ours, no snippets of the input in
/// errors, last repeated key wins, merge keys applied.
fn options(limits: &Limits) -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_reader_input_bytes = Some(limits.max_bytes);
    budget.max_total_scalar_bytes = limits.max_bytes;
    budget.max_recorded_anchor_bytes = limits.max_bytes;
    budget.max_nodes = limits.max_nodes;
    // Every node is at most two events (start and end), plus two per document and the stream's.
    budget.max_events = limits
        .max_nodes
        .saturating_mul(2)
        .saturating_add(limits.max_documents.saturating_mul(2))
        .saturating_add(2);
    budget.max_depth = limits.max_depth;
    budget.max_documents = limits.max_documents;
    budget.max_aliases = limits.max_nodes;
    budget.max_anchors = limits.max_nodes;
    // Anchored events kept for replay (an anchor inside an anchor keeps its replays too): what
    // anchors cost before they are used. A quarter of the nodes bounds a bomb's memory (see the
    // module's figures); the floor keeps small limits usable.
    budget.max_recorded_anchor_events = (limits.max_nodes / 4).max(100_000);
    // The ratio heuristic refuses ordinary files that reuse one anchor many times; the node
    // count bounds what aliases cost instead.
    budget.enforce_alias_anchor_ratio = false;

    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    options.alias_limits.max_total_replayed_events =
        limits.max_nodes.saturating_mul(2).saturating_add(2);
    options.alias_limits.max_replay_stack_depth = limits.max_depth;
    options.with_snippet = false;
    options.emit_comments = false;
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    options.merge_keys = serde_saphyr::MergeKeyPolicy::Merge;
    // YAML 1.2 booleans only: `y`, `yes`, `on` stay strings, as before.
    options.strict_booleans = true;
    options
}

/// The counters of the parse running on this thread. serde-saphyr builds each document of a
/// stream with `T::deserialize`, which takes no seed, so [`Metered`] finds them here.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    /// Off outside a parse of this module ([`Node`]'s own `Deserialize`, for JSON).
    active: bool,
    nodes_left: usize,
    depth: usize,
    max_nodes: usize,
    max_depth: usize,
    stopped: Option<Exceeded>,
}

thread_local! {
    static COUNTERS: Cell<Counters> = Cell::new(Counters::default());
}

/// The running parse's counters, installed for as long as it lives.
struct Meter {
    previous: Counters,
}

impl Meter {
    fn install(limits: &Limits) -> Self {
        let counters = Counters {
            active: true,
            nodes_left: limits.max_nodes,
            depth: 0,
            max_nodes: limits.max_nodes,
            max_depth: limits.max_depth,
            stopped: None,
        };
        Self { previous: COUNTERS.replace(counters) }
    }

    /// Our error for serde-saphyr's: a budget (ours first), or the position and the problem.
    fn error(&self, err: &serde_saphyr::Error, limits: &Limits) -> YamlError {
        if let Some(exceeded) = COUNTERS.get().stopped {
            return YamlError::Budget(exceeded);
        }
        if let Some(exceeded) = saphyr_budget(err, limits) {
            return YamlError::Budget(exceeded);
        }
        let err = err.without_snippet();
        let (line, column) = err.location().map_or((0, 0), |l| {
            (usize::try_from(l.line()).unwrap_or(0), usize::try_from(l.column()).unwrap_or(0))
        });
        let text = err.to_string();
        let problem = text.split(" at line ").next().unwrap_or(&text);
        YamlError::Syntax { line, column, problem: strip_quoted(problem) }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        COUNTERS.set(self.previous);
    }
}

fn stop<E: serde::de::Error>(exceeded: Exceeded) -> E {
    COUNTERS.with(|c| {
        let mut counters = c.get();
        counters.stopped = Some(exceeded);
        c.set(counters);
    });
    E::custom(YamlError::Budget(exceeded))
}

/// Count one node.
fn take_node<E: serde::de::Error>() -> Result<(), E> {
    let mut counters = COUNTERS.get();
    if !counters.active {
        return Ok(());
    }
    if counters.nodes_left == 0 {
        return Err(stop(Exceeded::Nodes { limit: counters.max_nodes }));
    }
    counters.nodes_left -= 1;
    COUNTERS.set(counters);
    Ok(())
}

/// Enter a sequence or mapping.
fn enter<E: serde::de::Error>() -> Result<(), E> {
    let mut counters = COUNTERS.get();
    if !counters.active {
        return Ok(());
    }
    if counters.depth >= counters.max_depth {
        return Err(stop(Exceeded::Depth { limit: counters.max_depth }));
    }
    counters.depth += 1;
    COUNTERS.set(counters);
    Ok(())
}

fn leave() {
    let mut counters = COUNTERS.get();
    counters.depth = counters.depth.saturating_sub(1);
    COUNTERS.set(counters);
}

/// serde-saphyr's budget errors as ours.
fn saphyr_budget(err: &serde_saphyr::Error, limits: &Limits) -> Option<Exceeded> {
    use serde_saphyr::Error as E;
    let nodes = Exceeded::Nodes { limit: limits.max_nodes };
    let bytes = Exceeded::Bytes { limit: limits.max_bytes };
    let depth = Exceeded::Depth { limit: limits.max_depth };
    let mut err = err;
    while let E::AliasError { error, .. } | E::WithSnippet { error, .. } = err {
        err = error;
    }
    match err {
        E::AliasReplayLimitExceeded { .. } | E::AliasExpansionLimitExceeded { .. } => Some(nodes),
        E::AliasReplayStackDepthExceeded { .. } => Some(depth),
        E::Budget { breach, .. } => Some(match breach {
            BudgetBreach::Depth { .. } => depth,
            BudgetBreach::Documents { .. } => Exceeded::Documents { limit: limits.max_documents },
            BudgetBreach::ScalarBytes { .. }
            | BudgetBreach::InputBytes { .. }
            | BudgetBreach::RecordedAnchorBytes { .. } => bytes,
            BudgetBreach::Anchors { .. } => Exceeded::Anchors { limit: limits.max_nodes },
            BudgetBreach::MergeKeys { .. } => {
                Exceeded::MergeKeys { limit: serde_saphyr::Budget::default().max_merge_keys }
            }
            _ => nodes,
        }),
        _ => None,
    }
}

/// Drop anything between backquotes, double or single quotes: parser messages may quote the
/// input.
fn strip_quoted(text: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (None, '`' | '"' | '\'') => {
                quote = Some(c);
                out.push('…');
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c) => out.push(c),
        }
    }
    out
}

/// A tree the visitor builds: JSON values, or [`Node`]s that keep the key order.
trait Tree: Sized {
    fn null() -> Self;
    fn bool(v: bool) -> Self;
    fn number(v: Number) -> Self;
    fn string(v: String) -> Self;
    fn sequence(items: Vec<Self>) -> Self;
    /// An empty mapping, filled by [`Tree::insert`]: a repeated key keeps its last value.
    fn mapping() -> Self;
    fn insert(&mut self, key: String, value: Self);
}

impl Tree for Value {
    fn null() -> Self {
        Value::Null
    }
    fn bool(v: bool) -> Self {
        Value::Bool(v)
    }
    fn number(v: Number) -> Self {
        Value::Number(v)
    }
    fn string(v: String) -> Self {
        Value::String(v)
    }
    fn sequence(items: Vec<Self>) -> Self {
        Value::Array(items)
    }
    fn mapping() -> Self {
        Value::Object(Map::new())
    }
    fn insert(&mut self, key: String, value: Self) {
        if let Value::Object(map) = self {
            map.insert(key, value);
        }
    }
}

/// One document, built node by node against the running parse's counters.
struct Metered<T>(T);

impl<'de, T: Tree> serde::Deserialize<'de> for Metered<T> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        NodeSeed(std::marker::PhantomData).deserialize(de).map(Metered)
    }
}

/// One node (a value).
struct NodeSeed<T>(std::marker::PhantomData<T>);

impl<'de, T: Tree> DeserializeSeed<'de> for NodeSeed<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        take_node()?;
        de.deserialize_any(NodeVisitor(self.0))
    }
}

struct NodeVisitor<T>(std::marker::PhantomData<T>);

impl<'de, T: Tree> Visitor<'de> for NodeVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<T, E> {
        Ok(T::bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<T, E> {
        Ok(T::number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<T, E> {
        Ok(T::number(v.into()))
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<T, E> {
        match i64::try_from(v) {
            Ok(v) => Ok(T::number(v.into())),
            Err(_) => match u64::try_from(v) {
                Ok(v) => Ok(T::number(v.into())),
                Err(_) => Ok(float(v as f64)),
            },
        }
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<T, E> {
        match u64::try_from(v) {
            Ok(v) => Ok(T::number(v.into())),
            Err(_) => Ok(float(v as f64)),
        }
    }

    fn visit_f64<E>(self, v: f64) -> Result<T, E> {
        Ok(float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok(T::string(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<T, E> {
        Ok(T::string(v))
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<T, E> {
        Ok(T::sequence(v.iter().map(|b| T::number((*b).into())).collect()))
    }

    fn visit_unit<E>(self) -> Result<T, E> {
        Ok(T::null())
    }

    fn visit_none<E>(self) -> Result<T, E> {
        Ok(T::null())
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        de.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<T, D::Error> {
        de.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<T, A::Error> {
        enter()?;
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(NodeSeed(self.0))? {
            items.push(item);
        }
        leave();
        Ok(T::sequence(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        enter()?;
        let mut object = T::mapping();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value = map.next_value_seed(NodeSeed(self.0))?;
            object.insert(key, value);
        }
        leave();
        Ok(object)
    }
}

fn float<T: Tree>(v: f64) -> T {
    Number::from_f64(v).map_or_else(T::null, T::number)
}

/// A mapping key: a string, or a scalar's spelling as a string.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<String, D::Error> {
        take_node()?;
        de.deserialize_any(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a scalar mapping key (a sequence or mapping cannot be a key)")
    }

    fn visit_bool<E>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i128<E>(self, v: i128) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u128<E>(self, v: u128) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_unit<E>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }

    fn visit_none<E>(self) -> Result<String, E> {
        Ok("null".to_owned())
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<String, D::Error> {
        de.deserialize_any(self)
    }
}

/// A YAML (or JSON) value that keeps the order of mapping keys.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Sequence(Vec<Node>),
    Mapping(Mapping),
}

/// The entries of a mapping in document order; keys are unique.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mapping(Vec<(String, Node)>);

impl Mapping {
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Remove an entry, keeping the others' order.
    pub fn remove(&mut self, key: &str) -> Option<Node> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(at).1)
    }

    /// Set a key: in place when it is there, last otherwise.
    pub fn insert(&mut self, key: String, value: Node) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Node)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Node)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Node {
    /// The value at `key` of a mapping.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_mapping()?.get(key)
    }

    pub fn as_mapping(&self) -> Option<&Mapping> {
        match self {
            Node::Mapping(map) => Some(map),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }
}

impl From<i64> for Node {
    fn from(v: i64) -> Self {
        Node::Number(v.into())
    }
}

/// A non-finite float is `Null`, as in JSON.
impl From<f64> for Node {
    fn from(v: f64) -> Self {
        float(v)
    }
}

impl From<bool> for Node {
    fn from(v: bool) -> Self {
        Node::Bool(v)
    }
}

impl From<&str> for Node {
    fn from(v: &str) -> Self {
        Node::String(v.to_owned())
    }
}

impl From<String> for Node {
    fn from(v: String) -> Self {
        Node::String(v)
    }
}

impl Tree for Node {
    fn null() -> Self {
        Node::Null
    }
    fn bool(v: bool) -> Self {
        Node::Bool(v)
    }
    fn number(v: Number) -> Self {
        Node::Number(v)
    }
    fn string(v: String) -> Self {
        Node::String(v)
    }
    fn sequence(items: Vec<Self>) -> Self {
        Node::Sequence(items)
    }
    fn mapping() -> Self {
        Node::Mapping(Mapping::default())
    }
    fn insert(&mut self, key: String, value: Self) {
        if let Node::Mapping(map) = self {
            map.insert(key, value);
        }
    }
}

/// Unbudgeted (outside this module's parses): for JSON read with `serde_json`.
impl<'de> serde::Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        NodeSeed(std::marker::PhantomData).deserialize(de)
    }
}

impl serde::Serialize for Node {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Node::Null => s.serialize_unit(),
            Node::Bool(v) => s.serialize_bool(*v),
            Node::Number(n) => n.serialize(s),
            Node::String(v) => s.serialize_str(v),
            Node::Sequence(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Node::Mapping(map) => {
                let mut out = s.serialize_map(Some(map.len()))?;
                for (k, v) in map.iter() {
                    out.serialize_entry(k, v)?;
                }
                out.end()
            }
        }
    }
}

#[cfg(test)]
mod tests;
