//! Admission decisions for the webhook: what an Application request may change in its approval
//! and rollback annotations, and what the webhook records (`docs/decisions.md#approvals` and
//! `#rollback`). Plain data in, a verdict out; the webhook reads the named Revisions, calls
//! [`review_application`] and turns the verdict into an AdmissionReview response.
//!
//! The rules:
//! - **Approval**: `approved-revision` with `approve-digest` in the same request is checked
//!   against the Revision (it exists, belongs to this Application, its plan digest matches). When
//!   it holds, `approve-digest` is dropped (checked, never stored) and the audit record
//!   (`approved-by`, `approved-at`, `approved-digest`) is written from the requester, over any
//!   value the request carried.
//! - **Rollback**: a request whose `rollback-revision`, `rollback-target-revision` or
//!   `rollback-kind` changes is checked (the target exists, belongs to this Application, is of
//!   that commit and completed a healthy rollout) and recorded (`rollback-requested-by`,
//!   `rollback-requested-at`, `rollback-target-hash`).
//! - **Audit annotations are the webhook's**: a request that sets or changes one without the
//!   request that records it is denied. Removing them is allowed (it only withdraws), and an
//!   unrelated update keeps them as they are.

use std::collections::BTreeMap;

use kuvryn_sync_api::keys;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The approval audit annotations only the webhook writes.
pub const APPROVAL_AUDIT: [&str; 3] = [keys::APPROVED_BY, keys::APPROVED_AT, keys::APPROVED_DIGEST];
/// The rollback audit annotations only the webhook writes.
pub const ROLLBACK_AUDIT: [&str; 3] =
    [keys::ROLLBACK_REQUESTED_BY, keys::ROLLBACK_REQUESTED_AT, keys::ROLLBACK_TARGET_HASH];

/// What the webhook knows of a Revision named by a request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevisionFacts {
    /// `spec.applicationRef.name`.
    pub application: String,
    /// `spec.source.revision`: the commit.
    pub commit: String,
    /// `status.plan.digest`.
    pub plan_digest: Option<String>,
    /// `status.deployedDesiredStateHash`: set once a rollout of it completed Healthy.
    pub deployed_desired_state_hash: Option<String>,
}

/// An Application create or update, as the verdict needs it.
#[derive(Clone, Debug)]
pub struct ApplicationRequest<'a> {
    /// The Application's name.
    pub application: &'a str,
    /// Annotations before the request; `None` on create.
    pub old: Option<&'a BTreeMap<String, String>>,
    /// Annotations the request stores.
    pub new: &'a BTreeMap<String, String>,
    /// The requester, from the AdmissionReview's `userInfo.username`.
    pub username: &'a str,
    /// The time to record, RFC 3339.
    pub now: &'a str,
    /// The Application's `spec.sync` and `spec.strategy` as the request stores them.
    pub sync: &'a Value,
    pub strategy: &'a Value,
}

/// One change to the request's annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnnotationEdit {
    Set(&'static str, String),
    Remove(&'static str),
}

/// The webhook's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Admit, after these edits (none: admit as is).
    Allow(Vec<AnnotationEdit>),
    /// Refuse, saying what to do.
    Deny(String),
}

/// The Revisions a request names that [`review_application`] must see (those that exist).
pub fn revisions_to_read(request: &ApplicationRequest<'_>) -> Vec<String> {
    let mut names = Vec::new();
    if request.new.contains_key(keys::APPROVE_DIGEST)
        && let Some(name) = request.new.get(keys::APPROVED_REVISION)
    {
        names.push(name.clone());
    }
    if rollback_request_changed(request)
        && let Some(name) = request.new.get(keys::ROLLBACK_TARGET_REVISION)
        && !names.contains(name)
    {
        names.push(name.clone());
    }
    names
}

/// The verdict on an Application request; `revisions` holds those of [`revisions_to_read`]
/// that exist, by name.
pub fn review_application(
    request: &ApplicationRequest<'_>,
    revisions: &BTreeMap<String, RevisionFacts>,
) -> Verdict {
    let mut edits = match approval_edits(request, revisions) {
        Ok(edits) => edits,
        Err(message) => return Verdict::Deny(message),
    };
    match rollback_edits(request, revisions) {
        Ok(more) => edits.extend(more),
        Err(message) => return Verdict::Deny(message),
    }
    Verdict::Allow(edits)
}

/// `sha256:<hex>` over the chosen Revision's deployed desired state and the Application's
/// `spec.sync` and `spec.strategy`: a rollback approves only while these are unchanged.
pub fn rollback_target_hash(
    deployed_desired_state_hash: &str,
    sync: &Value,
    strategy: &Value,
) -> String {
    let fingerprint = serde_json::json!({
        "deployedDesiredStateHash": deployed_desired_state_hash,
        "sync": sync,
        "strategy": strategy,
    });
    let mut text = String::new();
    crate::desired::canonical_json(&fingerprint, &mut text);
    let hex: String = Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `spec.sync` and `spec.strategy` as the typed API reads them (defaults filled in, unknown
/// fields dropped), so the webhook and the controller fingerprint the same text for
/// [`rollback_target_hash`]. A value the types cannot read is fingerprinted as it is.
pub fn canonical_sync_and_strategy(spec: &Value) -> (Value, Value) {
    let raw =
        |key: &str| spec.get(key).cloned().unwrap_or_else(|| Value::Object(Default::default()));
    let sync = raw("sync");
    let sync = serde_json::from_value::<kuvryn_sync_api::SyncPolicy>(sync.clone())
        .ok()
        .and_then(|typed| serde_json::to_value(typed).ok())
        .unwrap_or(sync);
    let strategy = raw("strategy");
    let strategy = serde_json::from_value::<kuvryn_sync_api::Strategy>(strategy.clone())
        .ok()
        .and_then(|typed| serde_json::to_value(typed).ok())
        .unwrap_or(strategy);
    (sync, strategy)
}

fn approval_edits(
    request: &ApplicationRequest<'_>,
    revisions: &BTreeMap<String, RevisionFacts>,
) -> Result<Vec<AnnotationEdit>, String> {
    let app = request.application;
    let Some(digest) = request.new.get(keys::APPROVE_DIGEST) else {
        refuse_hand_set(
            request,
            &APPROVAL_AUDIT,
            "approve with `ksync sync APP`, or annotate \
            sync.kuvryn.io/approved-revision and sync.kuvryn.io/approve-digest together",
        )?;
        if request.new.contains_key(keys::APPROVED_REVISION)
            && changed(request, keys::APPROVED_REVISION)
        {
            return Err(format!(
                "{} changed without {}: an approval names the plan digest it approves; run \
                 `ksync sync {app}`, or add {}=<the Revision's status.plan.digest> to the same \
                 request",
                keys::APPROVED_REVISION,
                keys::APPROVE_DIGEST,
                keys::APPROVE_DIGEST
            ));
        }
        return Ok(Vec::new());
    };
    let Some(name) = request.new.get(keys::APPROVED_REVISION) else {
        return Err(format!(
            "{} needs {} naming the Revision it approves (see `kubectl get revisions`)",
            keys::APPROVE_DIGEST,
            keys::APPROVED_REVISION
        ));
    };
    let revision = owned_revision(revisions, name, app, keys::APPROVED_REVISION)?;
    match revision.plan_digest.as_deref() {
        None => Err(format!(
            "Revision {name} has no plan yet; approve it once it is AwaitingApproval \
             (`ksync sync {app}` shows the plan)"
        )),
        Some(plan) if plan != digest => Err(format!(
            "{}={digest} does not match Revision {name}'s plan digest {plan}: the plan is not \
             the one you reviewed; review it again with `ksync sync {app}` and approve its digest",
            keys::APPROVE_DIGEST
        )),
        Some(_) => Ok(vec![
            AnnotationEdit::Remove(keys::APPROVE_DIGEST),
            AnnotationEdit::Set(keys::APPROVED_BY, request.username.to_owned()),
            AnnotationEdit::Set(keys::APPROVED_AT, request.now.to_owned()),
            AnnotationEdit::Set(keys::APPROVED_DIGEST, digest.clone()),
        ]),
    }
}

fn rollback_edits(
    request: &ApplicationRequest<'_>,
    revisions: &BTreeMap<String, RevisionFacts>,
) -> Result<Vec<AnnotationEdit>, String> {
    let app = request.application;
    if !rollback_request_changed(request) {
        refuse_hand_set(request, &ROLLBACK_AUDIT, "request a rollback with `ksync rollback APP`")?;
        return Ok(Vec::new());
    }
    let commit = request.new.get(keys::ROLLBACK_REVISION).map(String::as_str).unwrap_or_default();
    if let Some(kind) = request.new.get(keys::ROLLBACK_KIND)
        && kind != keys::ROLLBACK_KIND_MANUAL
        && kind != keys::ROLLBACK_KIND_AUTOMATIC
    {
        return Err(format!(
            "{}={kind:?} is not valid: use {} or {}",
            keys::ROLLBACK_KIND,
            keys::ROLLBACK_KIND_MANUAL,
            keys::ROLLBACK_KIND_AUTOMATIC
        ));
    }
    let mut edits = vec![
        AnnotationEdit::Set(keys::ROLLBACK_REQUESTED_BY, request.username.to_owned()),
        AnnotationEdit::Set(keys::ROLLBACK_REQUESTED_AT, request.now.to_owned()),
    ];
    let Some(name) = request.new.get(keys::ROLLBACK_TARGET_REVISION) else {
        // No Revision chosen: nothing to fingerprint, so nothing is approved by this request.
        edits.push(AnnotationEdit::Remove(keys::ROLLBACK_TARGET_HASH));
        return Ok(edits);
    };
    let revision = owned_revision(revisions, name, app, keys::ROLLBACK_TARGET_REVISION)?;
    if revision.commit != commit {
        return Err(format!(
            "Revision {name} is of commit {}, not {}={commit}; set both to the same \
             commit (`ksync rollback {app} --to {name}` does)",
            short(&revision.commit),
            keys::ROLLBACK_REVISION
        ));
    }
    let Some(deployed) = revision.deployed_desired_state_hash.as_deref() else {
        return Err(format!(
            "Revision {name} never completed a healthy rollout, so there is nothing to roll back \
             to; choose a Revision that did (`kubectl get revisions` shows their phase)"
        ));
    };
    let hash = rollback_target_hash(deployed, request.sync, request.strategy);
    edits.push(AnnotationEdit::Set(keys::ROLLBACK_TARGET_HASH, hash));
    Ok(edits)
}

/// A rollback request is new or different: its commit, chosen Revision or kind changed, and
/// it is still requested.
fn rollback_request_changed(request: &ApplicationRequest<'_>) -> bool {
    request.new.contains_key(keys::ROLLBACK_REVISION)
        && [keys::ROLLBACK_REVISION, keys::ROLLBACK_TARGET_REVISION, keys::ROLLBACK_KIND]
            .iter()
            .any(|key| changed(request, key))
}

fn changed(request: &ApplicationRequest<'_>, key: &str) -> bool {
    request.new.get(key) != request.old.and_then(|old| old.get(key))
}

/// Deny a request that sets or changes one of `audit` by hand (removing is allowed).
fn refuse_hand_set(
    request: &ApplicationRequest<'_>,
    audit: &[&str],
    how: &str,
) -> Result<(), String> {
    match audit.iter().find(|key| request.new.contains_key(**key) && changed(request, key)) {
        Some(key) => Err(format!(
            "{key} is recorded by the Kuvryn Sync webhook and cannot be set or changed by hand; {how}"
        )),
        None => Ok(()),
    }
}

fn owned_revision<'r>(
    revisions: &'r BTreeMap<String, RevisionFacts>,
    name: &str,
    application: &str,
    annotation: &str,
) -> Result<&'r RevisionFacts, String> {
    let Some(revision) = revisions.get(name) else {
        return Err(format!(
            "{annotation}={name}: no Revision {name} exists in this namespace (`kubectl get \
             revisions -l {}={application}` lists this Application's)",
            keys::APPLICATION
        ));
    };
    if revision.application != application {
        return Err(format!(
            "{annotation}={name}: Revision {name} belongs to Application {}, not {application}",
            revision.application
        ));
    }
    Ok(revision)
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
