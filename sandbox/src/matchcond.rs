//! Admission webhook `matchConditions`: CEL expressions over `object`, `oldObject` and
//! `request` (<https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#matching-requests-matchconditions>),
//! evaluated with the `cel` crate kube's own CEL support is built on. `authorizer` is not
//! offered: an expression using it fails to evaluate, and the webhook's failurePolicy decides.

use serde_json::Value;

/// Parse an expression; `Err` is the parser's message.
pub fn compile(expr: &str) -> Result<cel::Program, String> {
    cel::Program::compile(expr).map_err(|e| e.to_string())
}

/// How a webhook's conditions came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every condition is true (or there are none): call the webhook.
    Match,
    /// This condition is false: skip the webhook.
    NoMatch(String),
    /// This condition could not be evaluated (the message says why).
    Error(String, String),
}

/// The variables the expressions see.
#[derive(Debug, Clone, Copy)]
pub struct Vars<'a> {
    /// `object`: the object as the webhook's version sees it (null for DELETE).
    pub object: &'a Value,
    /// `oldObject`: the stored object (null for CREATE).
    pub old_object: &'a Value,
    /// `request`: the AdmissionRequest.
    pub request: &'a Value,
}

/// Evaluate the `matchConditions` list of a webhook, in order: the first false one makes it not
/// match; an error is reported unless a later condition is false (kube-apiserver's rule: a
/// false condition wins over an error).
pub fn evaluate(conditions: &Value, vars: Vars<'_>) -> Outcome {
    let mut first_error = None;
    for mc in conditions.as_array().into_iter().flatten() {
        let name = mc["name"].as_str().unwrap_or_default().to_string();
        let expr = mc["expression"].as_str().unwrap_or_default();
        match evaluate_one(expr, vars) {
            Ok(true) => {}
            Ok(false) => return Outcome::NoMatch(name),
            Err(e) => {
                first_error.get_or_insert((name, e));
            }
        }
    }
    match first_error {
        Some((name, e)) => Outcome::Error(name, e),
        None => Outcome::Match,
    }
}

fn evaluate_one(expr: &str, vars: Vars<'_>) -> Result<bool, String> {
    let program = compile(expr)?;
    let mut ctx = cel::Context::default();
    for (name, v) in
        [("object", vars.object), ("oldObject", vars.old_object), ("request", vars.request)]
    {
        ctx.add_variable(name, v).map_err(|e| e.to_string())?;
    }
    match program.execute(&ctx).map_err(|e| e.to_string())? {
        cel::Value::Bool(b) => Ok(b),
        other => Err(format!("cel expression must evaluate to a bool, got {:?}", other.type_of())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conds(list: &[(&str, &str)]) -> Value {
        Value::Array(list.iter().map(|(n, e)| json!({"name": n, "expression": e})).collect())
    }

    #[test]
    fn conditions_table() {
        let object = json!({"metadata": {"name": "a", "labels": {"team": "x"}}});
        let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
        let vars = Vars { object: &object, old_object: &Value::Null, request: &request };
        let cases: Vec<(Value, Outcome)> = vec![
            (conds(&[]), Outcome::Match),
            (conds(&[("op", "request.operation == 'CREATE'")]), Outcome::Match),
            (
                conds(&[("team", "object.metadata.labels.team == 'y'")]),
                Outcome::NoMatch("team".into()),
            ),
            (
                conds(&[
                    ("old", "oldObject == null"),
                    ("user", "request.userInfo.username != 'alice'"),
                ]),
                Outcome::NoMatch("user".into()),
            ),
            (
                conds(&[("boom", "object.spec.replicas > 1"), ("no", "false")]),
                Outcome::NoMatch("no".into()),
            ),
        ];
        for (c, want) in cases {
            assert_eq!(evaluate(&c, vars), want, "{c}");
        }
        assert!(
            matches!(evaluate(&conds(&[("boom", "object.spec.replicas > 1")]), vars), Outcome::Error(n, _) if n == "boom")
        );
        assert!(matches!(evaluate(&conds(&[("str", "'x'")]), vars), Outcome::Error(..)));
        assert!(compile("object.metadata.(").is_err());
    }
}
