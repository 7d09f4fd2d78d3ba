//! Deleting an Application (the finalizer's cleanup). `spec.deletionPolicy: Orphan` leaves every
//! managed object in place. `DeleteManagedResources` deletes the inventory — the objects carrying
//! the Application's labels, of the kinds in `status.managedKinds` — in reverse apply order, as
//! `status.serviceAccountName` (the identity last impersonated, so switching the service account
//! cannot leave objects nobody may delete), except high-risk kinds and `prune: disabled` objects
//! (ruling 11). What it keeps or may not delete is named in a `ManagedResourcesOrphaned` Event,
//! with a `Forbidden` Event when the service account was refused; the Application goes either
//! way. Which objects go is the prune decision with nothing desired
//! ([`plan_prune`](kuvryn_sync_core::prune::plan_prune)).

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kuvryn_sync_api::{Application, ApplicationStatus, DeletionPolicy, EventReason, FailureReason};
use kuvryn_sync_apply::engine::{Engine, EngineError};
use kuvryn_sync_core::desired::GroupKind;
use kuvryn_sync_core::field_manager;
use kuvryn_sync_core::prune::{MAX_NAMED, ManagedObject, plan_prune};
use kuvryn_sync_core::redact::Redactor;

use crate::context::{ApplicationContext, ReconcileError, publish};

/// Carry out `app`'s deletion policy; the finalizer is removed when this returns `Ok`.
pub async fn clean_up(
    app: &Application,
    namespace: &str,
    ctx: &ApplicationContext,
) -> Result<Action, ReconcileError> {
    let status = app.status.clone().unwrap_or_default();
    let identity = status.service_account_name.clone().filter(|n| !n.is_empty());
    let (DeletionPolicy::DeleteManagedResources, Some(identity)) =
        (app.spec.deletion_policy, identity)
    else {
        // Orphan, or nothing was ever applied.
        tracing::info!(application = %app.name_any(), %namespace, "deleted; managed objects left in place");
        return Ok(Action::await_change());
    };
    let events = match ctx.clients.for_service_account(namespace, &identity) {
        Ok(client) => delete_managed(app, namespace, &status, &client, ctx).await,
        Err(err) => vec![(EventReason::ManagedResourcesOrphaned, err.to_string())],
    };
    publish(app, &events, &Redactor::new(), ctx).await;
    Ok(Action::await_change())
}

/// Delete `app`'s inventory as `client` (its service account), except what the prune decision
/// keeps; the Events that say what was left in place, and why.
async fn delete_managed(
    app: &Application,
    namespace: &str,
    status: &ApplicationStatus,
    client: &kube::Client,
    ctx: &ApplicationContext,
) -> Vec<(EventReason, String)> {
    let manager = field_manager::for_application(namespace, &app.name_any());
    let engine = Engine {
        client,
        kinds: &ctx.kinds,
        field_manager: &manager,
        adopt: false,
        memo: Some(&ctx.dry_runs),
        shared: None,
    };
    let inventory = match engine
        .inventory(
            namespace,
            &app.name_any(),
            &app.spec.destination.namespace,
            &status.managed_kinds,
        )
        .await
    {
        Ok(inventory) => inventory,
        Err(err) => {
            let message = format!("cannot find the managed objects: {err}");
            return vec![(EventReason::ManagedResourcesOrphaned, message)];
        }
    };
    let kinds: BTreeSet<GroupKind> = inventory.listed.iter().cloned().collect();
    let decision = plan_prune(&BTreeSet::new(), &kinds, &inventory.managed());
    let mut left: Vec<String> =
        decision.keep.iter().map(|(object, reason)| format!("{} ({reason})", object.key)).collect();
    let refused = delete_each(&engine, &decision.delete, &mut left).await;
    for kind in &inventory.unlisted {
        left.push(format!("every {kind} (the service account may not list them)"));
    }
    tracing::info!(application = %app.name_any(), %namespace, deleted = decision.delete.len() - refused.len(),
        left = left.len(), "deleted with DeleteManagedResources");
    leftover_events(&refused, &left)
}

/// Delete `objects` one by one; those left are added to `left`. The refusals' messages.
async fn delete_each(
    engine: &Engine<'_>,
    objects: &[ManagedObject],
    left: &mut Vec<String>,
) -> Vec<String> {
    let mut refused = Vec::new();
    for object in objects {
        match engine.delete(std::slice::from_ref(object)).await {
            Ok(()) => {}
            Err(err @ EngineError::Forbidden { .. }) => {
                refused.push(err.to_string());
                left.push(describe(object));
            }
            Err(err) => left.push(format!("{} ({err})", object.key)),
        }
    }
    refused
}

/// `Forbidden` for the first refusal, and `ManagedResourcesOrphaned` naming what was left.
fn leftover_events(refused: &[String], left: &[String]) -> Vec<(EventReason, String)> {
    let mut events = Vec::new();
    if let Some(first) = refused.first() {
        events.push((EventReason::Failure(FailureReason::Forbidden), first.clone()));
    }
    if !left.is_empty() {
        let named: Vec<&str> = left.iter().take(MAX_NAMED).map(String::as_str).collect();
        let more = left.len().saturating_sub(MAX_NAMED);
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        events.push((
            EventReason::ManagedResourcesOrphaned,
            format!("left {} managed object(s) in place: {}{tail}", left.len(), named.join(", ")),
        ));
    }
    events
}

fn describe(object: &ManagedObject) -> String {
    format!("{} (forbidden)", object.key)
}
