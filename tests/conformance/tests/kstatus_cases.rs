//! Runs `kuvryn_sync_core::kstatus` on the kstatus test cases transcribed from cli-utils' Go tests
//! (`$KSYNC_CONFORMANCE_DATA/fixtures/kstatus/status_compute_cases.yaml`) and fails, listing every
//! case that differs, unless each object gets the status kstatus gives it, every expected
//! condition (type, status, reason) is reported and no absent condition type is.
//!
//! Every case runs twice: through `compute` (no clock) and through `compute_at` with the current
//! time, the time the Go tests substitute into their one timed case (a Pod created "now").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kuvryn_sync_conformance::fixture;
use kuvryn_sync_core::kstatus::{Computed, compute, compute_at};
use serde::Deserialize;
use serde_json::Value;

/// The fixture, relative to `fixtures/`.
const CASES: &str = "kstatus/status_compute_cases.yaml";

/// Cases from `status_compute_test.go` (`cases`) and from `core_test.go` (`core_test_cases`).
const STATUS_COMPUTE_CASES: usize = 53;
const CORE_CASES: usize = 4;

/// The placeholder the Go tests fill with `time.Now()` (RFC 3339) through `fmt.Sprintf`.
const NOW_PLACEHOLDER: &str = "%s";

#[derive(Debug, Deserialize)]
struct Fixture {
    cases: Vec<Case>,
    core_test_cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    test: String,
    case: String,
    object: Value,
    expected_status: String,
    /// Conditions that must be reported; empty asserts nothing.
    #[serde(default)]
    expected_conditions: Vec<ExpectedCondition>,
    /// Condition types that must not be reported.
    #[serde(default)]
    absent_condition_types: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct ExpectedCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: String,
}

fn load() -> Fixture {
    let path = fixture(CASES);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("{} must be readable: {err}", path.display()));
    kuvryn_sync_core::yaml::from_str(&text)
        .unwrap_or_else(|err| panic!("{} must parse as the kstatus cases: {err}", path.display()))
}

/// `object` with the `creationTimestamp` placeholder replaced by `now`, as the Go test does.
/// Panics when a placeholder is left anywhere else, so a new timed case cannot pass unnoticed.
fn at_time(mut object: Value, now: &str) -> Value {
    if let Some(created) = object.pointer_mut("/metadata/creationTimestamp")
        && *created == NOW_PLACEHOLDER
    {
        *created = Value::String(now.to_owned());
    }
    assert!(
        !object.to_string().contains(NOW_PLACEHOLDER),
        "an object still holds the placeholder {NOW_PLACEHOLDER:?} outside \
         metadata.creationTimestamp: {object}"
    );
    object
}

/// How `computed` differs from what the case expects; empty when it matches.
fn differences(case: &Case, computed: &Computed) -> Vec<String> {
    let mut found = Vec::new();
    if computed.status.as_str() != case.expected_status {
        found.push(format!(
            "status {} (message {:?}), expected {}",
            computed.status, computed.message, case.expected_status
        ));
    }
    for expected in &case.expected_conditions {
        let present = computed.conditions.iter().any(|c| {
            c.type_ == expected.type_ && c.status == expected.status && c.reason == expected.reason
        });
        if !present {
            found.push(format!(
                "no condition {}={} reason {}",
                expected.type_, expected.status, expected.reason
            ));
        }
    }
    for absent in &case.absent_condition_types {
        if let Some(c) = computed.conditions.iter().find(|c| &c.type_ == absent) {
            found
                .push(format!("unexpected condition {}={} reason {}", c.type_, c.status, c.reason));
        }
    }
    if !found.is_empty() {
        found.push(format!("reported conditions: {:?}", computed.conditions));
    }
    found
}

#[test]
fn compute_matches_every_cli_utils_case() {
    let fixture = load();
    assert_eq!(
        fixture.cases.len(),
        STATUS_COMPUTE_CASES,
        "{CASES} must hold the {STATUS_COMPUTE_CASES} status_compute_test.go cases"
    );
    assert_eq!(
        fixture.core_test_cases.len(),
        CORE_CASES,
        "{CASES} must hold the {CORE_CASES} core_test.go cases"
    );

    let now = Timestamp::now();
    let now_text = now.to_string();
    let now_time = Time(now);
    let mut mismatches = Vec::new();
    let all = fixture.cases.iter().chain(&fixture.core_test_cases);
    for case in all {
        let object = at_time(case.object.clone(), &now_text);
        let runs =
            [("compute", compute(&object)), ("compute_at(now)", compute_at(&object, &now_time))];
        for (how, computed) in runs {
            let found = differences(case, &computed);
            if !found.is_empty() {
                mismatches.push(format!(
                    "{}/{} [{how}]: {}",
                    case.test,
                    case.case,
                    found.join("; ")
                ));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} kstatus case run(s) differ from cli-utils:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
