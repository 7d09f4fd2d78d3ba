//! Reads the API reference (`$KSYNC_CONFORMANCE_DATA/spec/kuvryn-sync-api-reference.txt`) and
//! fails when a name it defines is missing from `shared::api`: every condition type and reason of
//! the Conditions table, every failure reason, every Event reason and type, and every label and
//! annotation key.

use std::collections::BTreeSet;

use kuvryn_sync_api::{
    ConditionReason, ConditionType, EventReason, FailureReason, HealthState, SyncState, keys,
};
use kuvryn_sync_conformance::api_reference as reference;
use regex::Regex;
use strum::IntoEnumIterator;

/// The rows of the tab-separated table that follows the line `heading`, without its header row.
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|line| line.trim() != heading).skip(1);
    let rows: Vec<Vec<String>> = lines
        .by_ref()
        .skip_while(|line| !line.contains('\t'))
        .skip(1) // header row
        .take_while(|line| line.contains('\t'))
        .map(|line| line.split('\t').map(|cell| cell.trim().to_owned()).collect())
        .collect();
    assert!(!rows.is_empty(), "table under {heading:?} not found in the reference");
    rows
}

/// Capitalised words of a Meaning cell that are names (CamelCase identifiers and the single-word
/// reasons the Conditions table uses), minus ordinary English words.
fn names_in(text: &str) -> BTreeSet<String> {
    const ENGLISH: &[&str] = &[
        "True",
        "False",
        "Kuvryn",
        "Sync",
        "Kubernetes",
        "Rollback",
        "See",
        "Image",
        "Git",
        "Application",
        "Applications",
        "Revision",
        "Ready",
        "It",
        "Its",
        "Present",
        "Secret",
    ];
    let word = Regex::new(r"\b[A-Z][A-Za-z]+\b").expect("regex");
    word.find_iter(text)
        .map(|m| m.as_str().to_owned())
        .filter(|w| !ENGLISH.contains(&w.as_str()))
        .collect()
}

fn known_reasons() -> BTreeSet<String> {
    ConditionReason::iter()
        .map(|r| r.as_str().to_owned())
        .chain(FailureReason::iter().map(|r| r.as_str().to_owned()))
        // "completed Synced and Healthy" names states.
        .chain(SyncState::iter().map(|s| s.as_str().to_owned()))
        .chain(HealthState::iter().map(|s| s.as_str().to_owned()))
        .collect()
}

#[test]
fn every_condition_type_and_reason_is_in_the_code() {
    let text = reference();
    let types: BTreeSet<String> = ConditionType::iter().map(|t| t.as_str().to_owned()).collect();
    let reasons = known_reasons();
    let mut missing = Vec::new();
    for row in table(&text, "Conditions") {
        let (object, condition, meaning) = (&row[0], &row[1], &row[2]);
        if !types.contains(condition) {
            missing.push(format!("condition type {condition} ({object})"));
        }
        for name in names_in(meaning) {
            if !reasons.contains(&name) && !types.contains(&name) {
                missing.push(format!("reason {name} of {object} {condition}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names in the Conditions table missing from the code: {missing:#?}"
    );
}

#[test]
fn every_failure_reason_is_in_the_code() {
    let text = reference();
    let code: BTreeSet<String> = FailureReason::iter().map(|r| r.as_str().to_owned()).collect();
    let spec: BTreeSet<String> = table(&text, "Failure reasons")
        .iter()
        .flat_map(|row| row[0].split(',').map(|r| r.trim().to_owned()).collect::<Vec<_>>())
        .collect();
    assert!(spec.len() >= 17, "expected at least 17 failure reasons, parsed {spec:?}");
    let missing: Vec<_> = spec.difference(&code).collect();
    assert!(missing.is_empty(), "failure reasons missing from FailureReason: {missing:?}");
    let extra: Vec<_> = code.difference(&spec).collect();
    assert!(extra.is_empty(), "FailureReason has reasons the reference does not: {extra:?}");
}

#[test]
fn every_event_reason_and_type_is_in_the_code() {
    let text = reference();
    let code: Vec<EventReason> = EventReason::all();
    let mut missing = Vec::new();
    let mut rows = 0;
    for row in table(&text, "Events") {
        let (reasons, event_type) = (&row[1], &row[2]);
        // "a failure reason" / "the Ready condition's failure reason": EventReason::Failure(_).
        if reasons.contains("failure reason") {
            assert!(FailureReason::iter().all(|r| code.contains(&EventReason::Failure(r))));
            continue;
        }
        for reason in reasons.split(',').map(str::trim) {
            rows += 1;
            let matching: Vec<_> = code.iter().filter(|r| r.as_str() == reason).collect();
            if matching.is_empty() {
                missing.push(reason.to_owned());
                continue;
            }
            for event in matching {
                let actual = event.event_type().as_str();
                let ok = match event_type.as_str() {
                    "both" => true,
                    expected => actual == expected,
                };
                assert!(ok, "Event {reason} must be {event_type}, code says {actual}");
            }
        }
    }
    assert!(rows >= 24, "parsed only {rows} Event reasons");
    assert!(missing.is_empty(), "Event reasons missing from EventReason: {missing:?}");
}

#[test]
fn every_label_and_annotation_key_is_in_the_code() {
    let text = reference();
    let mut missing = Vec::new();
    let rows = table(&text, "Labels and annotations");
    assert!(rows.len() >= 24, "parsed only {} keys", rows.len());
    for row in rows {
        // Keys may carry their value: `sync.kuvryn.io/prune: disabled`, `...: "true"`.
        let (key, value) = match row[0].split_once(": ") {
            Some((key, value)) => (key.to_owned(), Some(value.trim_matches('"').to_owned())),
            None => (row[0].clone(), None),
        };
        if !keys::ALL.contains(&key.as_str()) {
            missing.push(key.clone());
        }
        if let Some(value) = value {
            assert!(
                [keys::TRUE, keys::PRUNE_DISABLED].contains(&value.as_str()),
                "value {value:?} of {key} missing from keys"
            );
        }
    }
    assert!(missing.is_empty(), "label/annotation keys missing from api::keys: {missing:?}");
}

#[test]
fn the_table_parser_sees_a_name_that_is_missing() {
    // The checks above are only as good as the parser: a made-up row slipped into the reference's
    // own Failure reasons table must come out of it, and must be missing from the code.
    let text = reference();
    let header = "Reason\tMeaning\n";
    let at = text.find(header).expect("the Failure reasons table has a Reason/Meaning header")
        + header.len();
    let planted = format!("{}MadeUpFailure\ty\n{}", &text[..at], &text[at..]);
    let spec: Vec<String> =
        table(&planted, "Failure reasons").into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(spec.first().map(String::as_str), Some("MadeUpFailure"), "{spec:?}");
    assert_eq!(spec.len(), table(&text, "Failure reasons").len() + 1);
    assert!(FailureReason::iter().all(|r| r.as_str() != "MadeUpFailure"));
    assert!(names_in("True with Healthy; False with MadeUpReason").contains("MadeUpReason"));
}
