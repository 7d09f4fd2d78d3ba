//! HealthCheck rules: a rule's CEL expression compiled, checked and evaluated.
//!
//! The `cel` crate parses and evaluates CEL but has no type checker, so two checks are ours:
//! - **Variables**: a rule sees the live object as `object` and nothing else. The free variables
//!   are found by walking the syntax tree (a comprehension's own variables are bound inside it),
//!   because `cel`'s reference list also counts the names a macro binds.
//! - **Result type**: without types, only what the syntax proves can be refused at admission: a
//!   field access (`object.status.phase`), arithmetic, a literal that is not a bool, a list or a
//!   map. Anything else (a function call, an index) may still yield a non-bool at run time, so
//!   [`evaluate`] guards the result too: a non-bool result is an error, never a match.
//!
//! **Cost budget.** `cel` has no cost accounting either, so the budget is ours and explicit:
//! - *at admission* (static): at most [`MAX_NODES`] syntax nodes and at most
//!   [`MAX_COMPREHENSION_DEPTH`] nested comprehensions (`all`, `exists`, `map`, `filter`, ...);
//! - *before running* (estimated on the object at hand): every syntax node costs 1, and a
//!   comprehension costs its loop body once per element of the list or map it walks. The size of
//!   a range that is a field path of `object` (`object.data`, `object.spec.containers`) is read
//!   from the object itself; any other range (a bound variable, a computed list) is charged as the
//!   largest list *or map* anywhere in the object. So `object.data.all(k, object.data.exists(j,
//!   ...))` costs about keys², not a constant: the estimate grows with the maps and lists the
//!   rule walks. It must stay within [`MAX_RUNTIME_COST`], and the object at most
//!   [`MAX_OBJECT_BYTES`] when serialised;
//! - *while running*: every read of `object` is counted, and evaluation stops once the count
//!   passes the same [`MAX_RUNTIME_COST`], so a rule the estimate misjudged is cut off too (the
//!   count is deterministic: a rule does not pass or fail with the machine's load).
//!
//! A rule over the budget reports the object Progressing with `HealthCheckFailed`, as an
//! erroring rule does, so the rollout holds instead of passing. The static limits are checked by
//! [`compile`], which admission and evaluation share, so a rule refused at one is refused at the
//! other.
//!
//! Evaluation converts the object to CEL values here rather than through `cel::to_value`, so that
//! JSON integers are CEL `int` (Kubernetes' CEL does the same; `object.spec.replicas == 3` must
//! hold for `replicas: 3`).

use std::collections::BTreeSet;
use std::sync::Arc;

use std::collections::BTreeMap;

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};
use kuvryn_sync_api::{HealthCheckSpec, HealthRule, HealthRuleState, HealthState};

/// The one variable a rule may use.
pub const OBJECT_VARIABLE: &str = "object";
/// Longest expression accepted (the CRD schema says the same).
pub const MAX_EXPRESSION_LENGTH: usize = 4096;
/// Most syntax nodes in one expression (static budget).
pub const MAX_NODES: usize = 1000;
/// Most nested comprehensions in one expression (static budget).
pub const MAX_COMPREHENSION_DEPTH: usize = 2;
/// Largest evaluation cost, estimated before running (nodes, with each comprehension's body
/// charged once per element it walks) and counted while running (reads of `object`).
pub const MAX_RUNTIME_COST: u64 = 1_000_000;
/// Largest object, serialised, a rule is evaluated on (runtime budget).
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;
/// The condition reason of an object whose rule errored or exceeded its budget.
pub const HEALTH_CHECK_FAILED: &str = "HealthCheckFailed";

/// Why a rule's expression is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("the expression is empty; write a CEL expression over `object` that returns a bool")]
    Empty,
    #[error(
        "the expression is {length} characters long; at most {MAX_EXPRESSION_LENGTH} are allowed"
    )]
    TooLong { length: usize },
    #[error("the expression does not compile: {problem}")]
    Syntax { problem: String },
    #[error(
        "the expression uses {names}; a rule sees only `object` (the live object), e.g. \
         `object.status.phase == \"Healthy\"`"
    )]
    UnknownVariables { names: String },
    #[error(
        "the expression returns {what}, not a bool; compare it instead, e.g. \
         `object.status.phase == \"Healthy\"`"
    )]
    NotBool { what: &'static str },
    #[error(
        "the expression exceeds the cost budget: {found} (at most {MAX_NODES} nodes and \
         {MAX_COMPREHENSION_DEPTH} nested comprehensions); split it into simpler rules"
    )]
    OverBudget { found: String },
}

/// A rule's denial at admission: which rule and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleDenial {
    /// Index of the rule in `spec.rules`.
    pub index: usize,
    pub error: RuleError,
}

impl std::fmt::Display for RuleDenial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "spec.rules[{}].expression: {}", self.index, self.error)
    }
}

/// A compiled rule expression.
#[derive(Debug)]
pub struct CompiledExpression {
    program: cel::Program,
}

/// Compile `expression` and check what can be checked without running it.
pub fn compile(expression: &str) -> Result<CompiledExpression, RuleError> {
    if expression.trim().is_empty() {
        return Err(RuleError::Empty);
    }
    let length = expression.chars().count();
    if length > MAX_EXPRESSION_LENGTH {
        return Err(RuleError::TooLong { length });
    }
    let program = cel::Program::compile(expression)
        .map_err(|errors| RuleError::Syntax { problem: first_line(&errors.to_string()) })?;
    let mut free = BTreeSet::new();
    free_variables(program.expression(), &mut Vec::new(), &mut free);
    free.remove(OBJECT_VARIABLE);
    if !free.is_empty() {
        let names = free.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        return Err(RuleError::UnknownVariables { names });
    }
    if let ResultKind::NotBool(what) = result_kind(program.expression()) {
        return Err(RuleError::NotBool { what });
    }
    let (nodes, depth) = shape(program.expression());
    if nodes > MAX_NODES || depth > MAX_COMPREHENSION_DEPTH {
        let found = format!("{nodes} nodes, {depth} nested comprehension(s)");
        return Err(RuleError::OverBudget { found });
    }
    Ok(CompiledExpression { program })
}

/// Every refused rule of a HealthCheck, in rule order.
pub fn validate(spec: &HealthCheckSpec) -> Vec<RuleDenial> {
    spec.rules
        .iter()
        .enumerate()
        .filter_map(|(index, rule): (usize, &HealthRule)| {
            compile(&rule.expression).err().map(|error| RuleDenial { index, error })
        })
        .collect()
}

/// Why evaluating a rule gave no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvaluationError {
    #[error("evaluating the expression failed: {problem}")]
    Failed { problem: String },
    #[error("the expression returned {what}, not a bool")]
    NotBool { what: String },
    #[error("the rule exceeds its cost budget on this object: {why}")]
    OverBudget { why: String },
}

/// Evaluate a compiled rule against a live object. Only a bool is an answer.
pub fn evaluate(
    compiled: &CompiledExpression,
    object: &serde_json::Value,
) -> Result<bool, EvaluationError> {
    let bytes = serde_json::to_vec(object).map_or(usize::MAX, |b| b.len());
    if bytes > MAX_OBJECT_BYTES {
        let why = format!("the object is {bytes} bytes, over {MAX_OBJECT_BYTES}");
        return Err(EvaluationError::OverBudget { why });
    }
    let sizes = CollectionSizes { object, largest: largest_collection(object) };
    let cost = estimated_cost(compiled.program.expression(), &sizes);
    if cost > MAX_RUNTIME_COST {
        let why = format!("estimated cost {cost}, over {MAX_RUNTIME_COST}");
        return Err(EvaluationError::OverBudget { why });
    }
    run_counted(compiled, object, MAX_RUNTIME_COST)
}

/// Run `compiled` on `object`, stopping once `object` has been read more than `budget` times.
fn run_counted(
    compiled: &CompiledExpression,
    object: &serde_json::Value,
    budget: u64,
) -> Result<bool, EvaluationError> {
    let reads = CountedObject::new(json_to_cel(object), budget);
    let mut context = cel::Context::default();
    context.set_variable_resolver(&reads);
    let result = compiled.program.execute(&context);
    if reads.exhausted() {
        let why = format!("more than {budget} reads of `object` while running");
        return Err(EvaluationError::OverBudget { why });
    }
    match result {
        Ok(cel::Value::Bool(answer)) => Ok(answer),
        Ok(other) => Err(EvaluationError::NotBool { what: format!("{:?}", other.type_of()) }),
        Err(err) => Err(EvaluationError::Failed { problem: first_line(&err.to_string()) }),
    }
}

/// `object` for the interpreter, counting every read. Once the budget is spent every read
/// answers null, which makes the next field access, comparison or loop step fail, so the
/// interpreter unwinds at once; [`evaluate`] then reports the budget, not that failure.
struct CountedObject {
    object: cel::Value,
    reads: std::sync::atomic::AtomicU64,
    budget: u64,
}

impl CountedObject {
    fn new(object: cel::Value, budget: u64) -> Self {
        Self { object, reads: std::sync::atomic::AtomicU64::new(0), budget }
    }

    fn exhausted(&self) -> bool {
        self.reads.load(std::sync::atomic::Ordering::Relaxed) > self.budget
    }
}

impl cel::context::VariableResolver for CountedObject {
    fn resolve(&self, variable: &str) -> Option<cel::Value> {
        if variable != OBJECT_VARIABLE {
            return None;
        }
        let before = self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(if before >= self.budget { cel::Value::Null } else { self.object.clone() })
    }
}

/// Every HealthCheck's rules, compiled once, by the kind they apply to; HealthChecks for the same
/// kind in name order.
#[derive(Debug, Default)]
pub struct RuleSet {
    by_kind: BTreeMap<(String, String), Vec<CheckRules>>,
}

#[derive(Debug)]
struct CheckRules {
    name: String,
    rules: Vec<CompiledRule>,
}

#[derive(Debug)]
struct CompiledRule {
    expression: Result<CompiledExpression, RuleError>,
    state: HealthState,
    message: Option<String>,
}

/// What the rules say about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleOutcome {
    /// No HealthCheck covers the kind, or no rule matched: the status conventions decide.
    NoMatch,
    /// The first true rule's state and message.
    Matched { state: HealthState, message: String },
    /// A rule errored, was invalid or exceeded its budget before any rule matched: the object is
    /// Progressing with [`HEALTH_CHECK_FAILED`] (it does not fall through to later rules).
    Failed { message: String },
}

/// A refused rule of a HealthCheck that applies to some kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidRule {
    pub health_check: String,
    pub denial: RuleDenial,
}

impl RuleSet {
    /// Compile `checks` (name, spec); the order given does not matter.
    pub fn new<'a>(checks: impl IntoIterator<Item = (&'a str, &'a HealthCheckSpec)>) -> Self {
        let mut by_kind: BTreeMap<(String, String), Vec<CheckRules>> = BTreeMap::new();
        for (name, spec) in checks {
            let rules = spec
                .rules
                .iter()
                .map(|rule| CompiledRule {
                    expression: compile(&rule.expression),
                    state: match rule.state {
                        HealthRuleState::Healthy => HealthState::Healthy,
                        HealthRuleState::Progressing => HealthState::Progressing,
                        HealthRuleState::Degraded => HealthState::Degraded,
                    },
                    message: rule.message.clone(),
                })
                .collect();
            by_kind
                .entry((spec.group.clone(), spec.kind.clone()))
                .or_default()
                .push(CheckRules { name: name.to_owned(), rules });
        }
        for checks in by_kind.values_mut() {
            checks.sort_by(|a, b| a.name.cmp(&b.name));
        }
        RuleSet { by_kind }
    }

    /// Whether any HealthCheck covers `group`/`kind`.
    pub fn covers(&self, group: &str, kind: &str) -> bool {
        self.by_kind.contains_key(&(group.to_owned(), kind.to_owned()))
    }

    /// The refused rules of the HealthChecks for `group`/`kind`.
    pub fn invalid_rules(&self, group: &str, kind: &str) -> Vec<InvalidRule> {
        let Some(checks) = self.by_kind.get(&(group.to_owned(), kind.to_owned())) else {
            return Vec::new();
        };
        checks
            .iter()
            .flat_map(|check| {
                check.rules.iter().enumerate().filter_map(|(index, rule)| {
                    rule.expression.as_ref().err().map(|error| InvalidRule {
                        health_check: check.name.clone(),
                        denial: RuleDenial { index, error: error.clone() },
                    })
                })
            })
            .collect()
    }

    /// Evaluate the rules for the object's kind in order; the first true one decides.
    pub fn evaluate(&self, object: &serde_json::Value) -> RuleOutcome {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let kind = object["kind"].as_str().unwrap_or_default();
        let Some(checks) = self.by_kind.get(&(group.to_owned(), kind.to_owned())) else {
            return RuleOutcome::NoMatch;
        };
        for check in checks {
            for (index, rule) in check.rules.iter().enumerate() {
                let place = format!("HealthCheck {} rule {index}", check.name);
                let answer = match &rule.expression {
                    Ok(compiled) => evaluate(compiled, object).map_err(|e| e.to_string()),
                    Err(error) => Err(format!("is invalid: {error}")),
                };
                match answer {
                    Ok(true) => {
                        let message =
                            rule.message.clone().unwrap_or_else(|| format!("{place} matched"));
                        return RuleOutcome::Matched { state: rule.state, message };
                    }
                    Ok(false) => {}
                    Err(problem) => {
                        let message = format!("{HEALTH_CHECK_FAILED}: {place} {problem}");
                        return RuleOutcome::Failed { message };
                    }
                }
            }
        }
        RuleOutcome::NoMatch
    }
}

/// What the estimate knows of the object: sizes of the collections at field paths, and the
/// largest list or map anywhere (the charge for a range it cannot place).
struct CollectionSizes<'a> {
    object: &'a serde_json::Value,
    largest: u64,
}

impl CollectionSizes<'_> {
    /// Elements a comprehension over `range` walks at most.
    fn of_range(&self, range: &IdedExpr) -> u64 {
        let mut path = Vec::new();
        if !object_path(range, &mut path) {
            return self.largest;
        }
        let mut value = self.object;
        for field in path {
            match value.get(field) {
                Some(inner) => value = inner,
                None => return 0,
            }
        }
        collection_size(value)
    }
}

/// Whether `expr` is `object` or a chain of field selections from it; the fields go to `path`.
fn object_path<'e>(expr: &'e IdedExpr, path: &mut Vec<&'e str>) -> bool {
    match &expr.expr {
        Expr::Ident(name) => name == OBJECT_VARIABLE,
        Expr::Select(select) if !select.test => {
            let found = object_path(&select.operand, path);
            path.push(&select.field);
            found
        }
        _ => false,
    }
}

/// Cost of evaluating `expr` once: 1 per node, and a comprehension's condition and step once per
/// element of its range. Saturating.
fn estimated_cost(expr: &IdedExpr, sizes: &CollectionSizes<'_>) -> u64 {
    if let Expr::Comprehension(c) = &expr.expr {
        let per_element =
            estimated_cost(&c.loop_cond, sizes).saturating_add(estimated_cost(&c.loop_step, sizes));
        return [&c.iter_range, &c.accu_init, &c.result]
            .into_iter()
            .map(|part| estimated_cost(part, sizes))
            .fold(1, u64::saturating_add)
            .saturating_add(sizes.of_range(&c.iter_range).saturating_mul(per_element));
    }
    children(expr)
        .into_iter()
        .map(|child| estimated_cost(child, sizes))
        .fold(1, u64::saturating_add)
}

fn collection_size(value: &serde_json::Value) -> u64 {
    match value {
        serde_json::Value::Array(items) => items.len() as u64,
        serde_json::Value::Object(map) => map.len() as u64,
        _ => 0,
    }
}

/// The largest list or map anywhere in `value`, by element count.
fn largest_collection(value: &serde_json::Value) -> u64 {
    let inner = match value {
        serde_json::Value::Array(items) => items.iter().map(largest_collection).max(),
        serde_json::Value::Object(map) => map.values().map(largest_collection).max(),
        _ => None,
    };
    inner.unwrap_or(0).max(collection_size(value))
}

/// (syntax nodes, deepest comprehension nesting).
fn shape(expr: &IdedExpr) -> (usize, usize) {
    let own_depth = usize::from(matches!(expr.expr, Expr::Comprehension(_)));
    children(expr)
        .into_iter()
        .map(shape)
        .fold((1, own_depth), |(nodes, depth), (n, d)| (nodes + n, depth.max(d + own_depth)))
}

/// The direct sub-expressions of `expr`.
fn children(expr: &IdedExpr) -> Vec<&IdedExpr> {
    match &expr.expr {
        Expr::Select(select) => vec![&select.operand],
        Expr::Call(call) => call.target.iter().map(AsRef::as_ref).chain(call.args.iter()).collect(),
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => map.entries.iter().flat_map(|e| entry_children(&e.expr)).collect(),
        Expr::Struct(s) => s.entries.iter().flat_map(|e| entry_children(&e.expr)).collect(),
        Expr::Comprehension(c) => {
            vec![&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

fn entry_children(entry: &cel::common::ast::EntryExpr) -> Vec<&IdedExpr> {
    match entry {
        cel::common::ast::EntryExpr::StructField(field) => vec![&field.value],
        cel::common::ast::EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
    }
}

/// A JSON value as CEL sees it; integers that fit are `int`.
pub fn json_to_cel(value: &serde_json::Value) -> cel::Value {
    use serde_json::Value as J;
    match value {
        J::Null => cel::Value::Null,
        J::Bool(b) => cel::Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => cel::Value::String(Arc::new(s.clone())),
        J::Array(items) => cel::Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        J::Object(map) => {
            let entries: std::collections::HashMap<cel::objects::Key, cel::Value> = map
                .iter()
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), json_to_cel(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(entries) })
        }
    }
}

/// What the syntax alone says an expression yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResultKind {
    Bool,
    NotBool(&'static str),
    Unknown,
}

fn result_kind(expr: &IdedExpr) -> ResultKind {
    match &expr.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => ResultKind::Bool,
        Expr::Literal(LiteralValue::String(_)) => ResultKind::NotBool("a string"),
        Expr::Literal(LiteralValue::Null) => ResultKind::NotBool("null"),
        Expr::Literal(LiteralValue::Bytes(_)) => ResultKind::NotBool("bytes"),
        Expr::Literal(_) => ResultKind::NotBool("a number"),
        Expr::List(_) => ResultKind::NotBool("a list"),
        Expr::Map(_) | Expr::Struct(_) => ResultKind::NotBool("a map"),
        // `has(object.x)` is a test-only select and is a bool; a plain select is a field value.
        Expr::Select(select) if select.test => ResultKind::Bool,
        Expr::Select(_) => ResultKind::NotBool("a field's value"),
        Expr::Ident(_) => ResultKind::NotBool("a variable's value"),
        Expr::Call(call) => call_kind(&call.func_name, &call.args),
        Expr::Comprehension(_) | Expr::Unspecified => ResultKind::Unknown,
    }
}

fn call_kind(function: &str, args: &[IdedExpr]) -> ResultKind {
    match function {
        operators::EQUALS
        | operators::NOT_EQUALS
        | operators::LESS
        | operators::LESS_EQUALS
        | operators::GREATER
        | operators::GREATER_EQUALS
        | operators::LOGICAL_AND
        | operators::LOGICAL_OR
        | operators::LOGICAL_NOT
        | operators::NOT_STRICTLY_FALSE
        | operators::IN => ResultKind::Bool,
        operators::ADD
        | operators::SUBSTRACT
        | operators::MULTIPLY
        | operators::DIVIDE
        | operators::MODULO
        | operators::NEGATE => ResultKind::NotBool("the result of arithmetic"),
        operators::CONDITIONAL => {
            match (args.get(1).map(result_kind), args.get(2).map(result_kind)) {
                (Some(ResultKind::NotBool(what)), _) | (_, Some(ResultKind::NotBool(what))) => {
                    ResultKind::NotBool(what)
                }
                (Some(ResultKind::Bool), Some(ResultKind::Bool)) => ResultKind::Bool,
                _ => ResultKind::Unknown,
            }
        }
        "size" | "int" | "uint" | "double" => ResultKind::NotBool("a number"),
        "string" | "lowerAscii" | "upperAscii" | "trim" | "replace" => {
            ResultKind::NotBool("a string")
        }
        "startsWith" | "endsWith" | "contains" | "matches" | "exists" | "all" | "exists_one" => {
            ResultKind::Bool
        }
        _ => ResultKind::Unknown,
    }
}

/// Names used but not bound inside the expression.
fn free_variables(expr: &IdedExpr, bound: &mut Vec<String>, free: &mut BTreeSet<String>) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) {
                free.insert(name.clone());
            }
        }
        Expr::Select(select) => free_variables(&select.operand, bound, free),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_variables(target, bound, free);
            }
            for arg in &call.args {
                free_variables(arg, bound, free);
            }
        }
        Expr::List(list) => {
            for element in &list.elements {
                free_variables(element, bound, free);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                entry_variables(&entry.expr, bound, free);
            }
        }
        Expr::Struct(structure) => {
            for entry in &structure.entries {
                entry_variables(&entry.expr, bound, free);
            }
        }
        Expr::Comprehension(c) => {
            free_variables(&c.iter_range, bound, free);
            free_variables(&c.accu_init, bound, free);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for part in [&c.loop_cond, &c.loop_step, &c.result] {
                free_variables(part, bound, free);
            }
            bound.truncate(before);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entry_variables(
    entry: &cel::common::ast::EntryExpr,
    bound: &mut Vec<String>,
    free: &mut BTreeSet<String>,
) {
    match entry {
        cel::common::ast::EntryExpr::StructField(field) => {
            free_variables(&field.value, bound, free)
        }
        cel::common::ast::EntryExpr::MapEntry(entry) => {
            free_variables(&entry.key, bound, free);
            free_variables(&entry.value, bound, free);
        }
    }
}

fn first_line(text: &str) -> String {
    crate::redact::truncate(text.lines().next().unwrap_or_default().trim(), 300)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_admission_accepts_and_refuses() {
        let cases: &[(&str, Option<&str>)] = &[
            (r#"object.status.phase == "Healthy""#, None),
            ("true", None),
            ("has(object.status) && object.status.ready", None),
            ("object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')", None),
            ("object.spec.replicas > 2 || !has(object.spec.paused)", None),
            ("'a' in object.metadata.labels", None),
            ("object.status.phase.startsWith('Run')", None),
            ("has(object.x) ? object.x == 1 : false", None),
            // Unknown until run: guarded at run time.
            ("object.status.ready", Some("a field's value")),
            ("object.status.phase", Some("a field's value")),
            ("object.spec.replicas + 1", Some("the result of arithmetic")),
            ("'Healthy'", Some("a string")),
            ("1", Some("a number")),
            ("[true]", Some("a list")),
            ("{'a': true}", Some("a map")),
            ("size(object.items)", Some("a number")),
            ("has(object.x) ? 'yes' : false", Some("a string")),
            ("object", Some("a variable's value")),
        ];
        for (expression, refused) in cases {
            let got = compile(expression).err();
            match (refused, got) {
                (None, None) => {}
                (Some(what), Some(RuleError::NotBool { what: got })) => {
                    assert_eq!(*what, got, "{expression}");
                }
                (want, got) => panic!("{expression}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn only_object_is_in_scope_and_macro_variables_are_bound() {
        assert!(compile("object.items.all(i, i.ready == true)").is_ok());
        assert!(compile("object.items.map(i, i.n).exists(n, n > 1)").is_ok());
        let err = compile("self.status.phase == 'x' && oldObject.x == 1").expect_err("refused");
        assert_eq!(err, RuleError::UnknownVariables { names: "`oldObject`, `self`".into() });
        let err = compile("object.items.all(i, j > 1)").expect_err("refused");
        assert_eq!(err, RuleError::UnknownVariables { names: "`j`".into() });
    }

    #[test]
    fn syntax_errors_length_and_emptiness_are_named() {
        assert!(matches!(
            compile("object.status.phase ==").expect_err("refused"),
            RuleError::Syntax { .. }
        ));
        assert_eq!(compile("  ").expect_err("refused"), RuleError::Empty);
        let long = format!("object.a == '{}'", "x".repeat(MAX_EXPRESSION_LENGTH));
        assert!(matches!(compile(&long).expect_err("refused"), RuleError::TooLong { .. }));
    }

    #[test]
    fn validate_names_each_refused_rule_by_index() {
        let spec: HealthCheckSpec = serde_json::from_value(json!({
            "group": "argoproj.io", "kind": "Rollout",
            "rules": [
                {"expression": "object.status.phase == 'Degraded'", "state": "Degraded"},
                {"expression": "object.status.phase", "state": "Healthy"},
                {"expression": "true", "state": "Progressing"},
                {"expression": "object.(", "state": "Progressing"},
            ]
        }))
        .expect("valid");
        let denials = validate(&spec);
        assert_eq!(denials.iter().map(|d| d.index).collect::<Vec<_>>(), vec![1, 3]);
        assert!(
            denials[0].to_string().starts_with("spec.rules[1].expression: the expression returns")
        );
    }

    fn spec(kind: &str, rules: serde_json::Value) -> HealthCheckSpec {
        serde_json::from_value(json!({"group": "argoproj.io", "kind": kind, "rules": rules}))
            .expect("valid")
    }

    fn rollout(phase: &str) -> serde_json::Value {
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout", "status": {"phase": phase}})
    }

    #[test]
    fn health_checks_apply_in_name_order_and_the_first_true_rule_decides() {
        let b = spec(
            "Rollout",
            json!([
                {"expression": "object.status.phase == 'Degraded'", "state": "Degraded", "message": "b says degraded"},
            ]),
        );
        let a = spec(
            "Rollout",
            json!([
                {"expression": "object.status.phase == 'Healthy'", "state": "Healthy", "message": "a says healthy"},
                {"expression": "true", "state": "Progressing"},
            ]),
        );
        // Given in reverse name order: "a-..." still goes first.
        let rules = RuleSet::new([("b-check", &b), ("a-check", &a)]);
        let table = [
            (
                "Healthy",
                RuleOutcome::Matched {
                    state: HealthState::Healthy,
                    message: "a says healthy".into(),
                },
            ),
            // a's catch-all matches before b is consulted.
            (
                "Degraded",
                RuleOutcome::Matched {
                    state: HealthState::Progressing,
                    message: "HealthCheck a-check rule 1 matched".into(),
                },
            ),
        ];
        for (phase, want) in table {
            assert_eq!(rules.evaluate(&rollout(phase)), want, "{phase}");
        }
        let only_b = RuleSet::new([("b-check", &b)]);
        assert_eq!(
            only_b.evaluate(&rollout("Degraded")),
            RuleOutcome::Matched {
                state: HealthState::Degraded,
                message: "b says degraded".into()
            }
        );
        // No rule true, or another kind: the status conventions decide.
        assert_eq!(only_b.evaluate(&rollout("Healthy")), RuleOutcome::NoMatch);
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        assert_eq!(rules.evaluate(&deployment), RuleOutcome::NoMatch);
        assert!(rules.covers("argoproj.io", "Rollout") && !rules.covers("apps", "Deployment"));
    }

    #[test]
    fn a_rule_that_errors_or_is_invalid_fails_instead_of_falling_through() {
        let erroring = spec(
            "Rollout",
            json!([
                {"expression": "object.status.missing == 'x'", "state": "Degraded"},
                {"expression": "true", "state": "Healthy"},
            ]),
        );
        let outcome = RuleSet::new([("errs", &erroring)]).evaluate(&rollout("Healthy"));
        let RuleOutcome::Failed { message } = outcome else { panic!("{outcome:?}") };
        assert!(message.starts_with("HealthCheckFailed: HealthCheck errs rule 0"), "{message}");

        let invalid = spec(
            "Rollout",
            json!([
                {"expression": "object.status.phase", "state": "Degraded"},
                {"expression": "true", "state": "Healthy"},
            ]),
        );
        let rules = RuleSet::new([("bad", &invalid)]);
        assert!(matches!(rules.evaluate(&rollout("Healthy")), RuleOutcome::Failed { .. }));
        let invalid_rules = rules.invalid_rules("argoproj.io", "Rollout");
        assert_eq!(invalid_rules.len(), 1);
        assert_eq!(
            (invalid_rules[0].health_check.as_str(), invalid_rules[0].denial.index),
            ("bad", 0)
        );
    }

    #[test]
    fn the_cost_budget_is_enforced_statically_and_at_run_time() {
        // Static: three nested comprehensions are refused at admission.
        let deep = "object.a.all(x, object.b.all(y, object.c.all(z, x == y && y == z)))";
        assert!(matches!(compile(deep).expect_err("refused"), RuleError::OverBudget { .. }));
        let long = (0..300).map(|_| "object.a==1").collect::<Vec<_>>().join("||");
        assert!(long.len() <= MAX_EXPRESSION_LENGTH);
        assert!(matches!(compile(&long).expect_err("refused"), RuleError::OverBudget { .. }));
        // Run time: two nested comprehensions over a list of 2,000 items exceed the estimate
        // (nodes × 2001²), though the same rule over 10 items runs.
        let pairs = compile("object.items.all(x, object.items.exists(y, x == y))").expect("valid");
        let small = json!({"items": (0..10).collect::<Vec<_>>()});
        assert_eq!(evaluate(&pairs, &small), Ok(true));
        let large = json!({"items": (0..2000).collect::<Vec<_>>()});
        let over = evaluate(&pairs, &large);
        assert!(matches!(over, Err(EvaluationError::OverBudget { .. })), "{over:?}");
        // A map is walked as a list is: every key against every key of a 1,000-key map is
        // over the estimate (about 10⁶ loop steps), the same rule over 100 keys runs.
        let keys = compile("object.data.all(k, object.data.exists(j, k == j))").expect("valid");
        let map_of = |n: usize| json!({"data": (0..n).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()});
        assert_eq!(evaluate(&keys, &map_of(100)), Ok(true));
        let over = evaluate(&keys, &map_of(1000));
        assert!(
            matches!(&over, Err(EvaluationError::OverBudget { why }) if why.contains("estimated")),
            "{over:?}"
        );
        // The estimate reads a range's size at its own path: a large list elsewhere in the object
        // does not make a rule over a small one too costly.
        let ports = compile("object.spec.ports.all(p, object.spec.ports.exists(q, p == q))")
            .expect("valid");
        let unrelated =
            json!({"spec": {"ports": [1, 2, 3]}, "data": (0..5000).collect::<Vec<_>>()});
        assert_eq!(evaluate(&ports, &unrelated), Ok(true));
        // While running: a rule is stopped once it has read `object` more than the budget, and
        // the answer is the budget, whatever the rule would have made of the null it then reads.
        let reads =
            compile("object.a.all(x, object.a.size() >= 0 || object.b == null)").expect("valid");
        let object = json!({"a": vec![0; 200]});
        assert_eq!(run_counted(&reads, &object, 1_000), Ok(true));
        let cut = run_counted(&reads, &object, 100);
        assert!(
            matches!(&cut, Err(EvaluationError::OverBudget { why }) if why.contains("100 reads")),
            "{cut:?}"
        );
        // And the object size bound.
        let huge = json!({"blob": "x".repeat(MAX_OBJECT_BYTES + 1)});
        assert!(matches!(
            evaluate(&compile("true").expect("valid"), &huge),
            Err(EvaluationError::OverBudget { .. })
        ));
        // Through a RuleSet, over budget is HealthCheckFailed.
        let check = spec(
            "Rollout",
            json!([
                {"expression": "object.status.items.all(x, object.status.items.exists(y, x == y))", "state": "Healthy"},
            ]),
        );
        let object = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
            "status": {"items": (0..2000).collect::<Vec<_>>()}});
        let outcome = RuleSet::new([("costly", &check)]).evaluate(&object);
        let RuleOutcome::Failed { message } = outcome else { panic!("{outcome:?}") };
        assert!(message.contains("cost budget"), "{message}");
    }

    #[test]
    fn evaluation_answers_only_with_a_bool() {
        let object = json!({"spec": {"replicas": 3}, "status": {"phase": "Healthy", "n": "x"}});
        let rule = |e: &str| compile(e).expect("valid");
        assert_eq!(evaluate(&rule("object.spec.replicas == 3"), &object), Ok(true));
        assert_eq!(evaluate(&rule("object.status.phase == 'Degraded'"), &object), Ok(false));
        // Passes admission (an index's type is unknown) but is not a bool when run.
        let guarded = evaluate(&rule("object.status['phase']"), &object);
        assert!(matches!(guarded, Err(EvaluationError::NotBool { .. })), "{guarded:?}");
        let missing = evaluate(&rule("object.status.missing == 1"), &object);
        assert!(matches!(missing, Err(EvaluationError::Failed { .. })), "{missing:?}");
    }
}
