//! Plan, apply and prune for one Application, as its service account, under its field manager.
//!
//! - [`Engine::inventory`]: the Application's live objects, one labelled list per managed kind.
//! - [`Engine::observe`]: per desired object, a server-side dry-run apply without force,
//!   compared with the listed live object; a 409 names the conflicting fields, and under
//!   `conflictPolicy: adopt` a forced dry run follows so the plan can list what is taken. The
//!   result feeds `kuvryn_sync_core::plan::plan`.
//! - [`Engine::apply`]: server-side apply of each object in the order given (the caller passes
//!   `core::order` groups), forcing under adopt, and otherwise only where every conflicting field
//!   is held by a migrated manager (`core::plan::MIGRATED_MANAGERS`).
//! - [`Engine::delete`] prunes.
//!
//! With a [`DryRunMemo`], a dry run already known to change nothing is not sent again
//! ([`crate::memo`]); with a [`SharedInventory`], the inventory comes from the controller's
//! watches when they are known to be as good as a list ([`crate::shared_inventory`]).
//!
//! A 403 anywhere is [`EngineError::Forbidden`], naming the verb and the resource, except on the
//! inventory's lists, where it marks the kind unlisted.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt, stream};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kuvryn_sync_api::{FailureReason, ManagedKind, keys};
use kuvryn_sync_core::desired::{
    DesiredObject, GroupKind, ObjectKey, Scope, group_of, kinds_defined_by,
};
use kuvryn_sync_core::plan::trim::trim_live;
use kuvryn_sync_core::plan::{
    FieldConflict, Found, Observation, blocking_conflicts, changed_fields, imperative_managers,
    parse_conflict_message, real_conflicts,
};
use kuvryn_sync_core::prune::ManagedObject;
use serde_json::Value;

use crate::kinds::{Kinds, ServedKind};
use crate::memo::DryRunMemo;
use crate::shared_inventory::SharedInventory;

/// Requests one engine makes at once (observing, or applying objects of one kind). Bounded, so
/// one large Application cannot crowd out the others on the API server.
pub const CONCURRENCY: usize = 8;

/// Why the engine stopped; each maps to one failure reason.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("forbidden: the service account may not {verb} {resource}: {message}")]
    Forbidden { verb: &'static str, resource: String, message: String },
    #[error("{key}: kind is not served by the API server")]
    NotServed { key: ObjectKey },
    #[error("planning {key} failed: {message}")]
    Plan { key: ObjectKey, message: String },
    #[error("applying {key} failed: {message}")]
    Apply { key: ObjectKey, message: String },
    #[error("cannot list {kind} to find managed objects: {message}")]
    Inventory { kind: GroupKind, message: String },
    #[error("pruning {key} failed: {message}")]
    Prune { key: ObjectKey, message: String },
    #[error("discovery failed: {0}")]
    Discovery(#[source] kube::Error),
}

impl EngineError {
    /// The failure reason for status and Events.
    pub fn reason(&self) -> FailureReason {
        match self {
            EngineError::Forbidden { .. } => FailureReason::Forbidden,
            EngineError::NotServed { .. } | EngineError::Plan { .. } => FailureReason::PlanFailure,
            EngineError::Discovery(_) => FailureReason::PlanFailure,
            EngineError::Apply { .. } => FailureReason::ApplyFailure,
            EngineError::Inventory { .. } | EngineError::Prune { .. } => {
                FailureReason::PruneFailure
            }
        }
    }
}

impl EngineError {
    /// The object the error is about, when it names one.
    pub fn resource(&self) -> Option<&ObjectKey> {
        match self {
            EngineError::Apply { key, .. }
            | EngineError::Prune { key, .. }
            | EngineError::Plan { key, .. }
            | EngineError::NotServed { key } => Some(key),
            _ => None,
        }
    }
}

impl From<EngineError> for kuvryn_sync_core::failure::StepFailure {
    fn from(err: EngineError) -> Self {
        Self {
            reason: err.reason(),
            message: err.to_string(),
            resource: err.resource().cloned().map(Box::new),
        }
    }
}

/// What a dry-run apply found.
enum DryRun {
    /// The apply would go through; `adopted` lists fields it takes from other managers.
    Applied { result: Value, adopted: Vec<FieldConflict> },
    /// The apply (without force) was refused for these fields.
    Conflicts(Vec<FieldConflict>),
}

/// A live object carrying an Application's labels.
#[derive(Clone, Debug)]
pub struct LiveObject {
    pub managed: ManagedObject,
    /// The object as listed.
    pub object: Value,
}

/// An Application's live objects, found by its labels in its managed kinds.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    pub objects: Vec<LiveObject>,
    /// Kinds that were listed.
    pub listed: Vec<GroupKind>,
    /// Kinds the service account may not list: `PruneInventoryIncomplete`, never pruned.
    pub unlisted: Vec<GroupKind>,
}

impl Inventory {
    /// The live objects by key, for [`Engine::observe`].
    pub fn live(&self) -> BTreeMap<ObjectKey, Value> {
        self.objects.iter().map(|o| (o.managed.key.clone(), o.object.clone())).collect()
    }

    /// The objects, for `core::prune::plan_prune`.
    pub fn managed(&self) -> Vec<ManagedObject> {
        self.objects.iter().map(|o| o.managed.clone()).collect()
    }
}

/// The engine for one Application.
pub struct Engine<'a> {
    /// A client impersonating the Application's service account.
    pub client: &'a kube::Client,
    pub kinds: &'a Kinds,
    /// The Application's field manager (`core::field_manager::for_application`).
    pub field_manager: &'a str,
    /// Whether conflicts are forced (`conflictPolicy: adopt`).
    pub adopt: bool,
    /// Dry runs known to change nothing ([`crate::memo`]); `None` sends every dry run.
    pub memo: Option<&'a DryRunMemo>,
    /// The controller's watched inventory ([`crate::shared_inventory`]); `None` lists every kind.
    pub shared: Option<Shared<'a>>,
}

/// What the engine needs of the shared inventory: the cache, the service account it acts as
/// (`clients::service_account_user`) and the Application it acts for (namespace, name).
#[derive(Clone, Copy, Debug)]
pub struct Shared<'a> {
    pub inventory: &'a SharedInventory,
    pub identity: &'a str,
    pub application: (&'a str, &'a str),
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("field_manager", &self.field_manager)
            .field("adopt", &self.adopt)
            .finish()
    }
}

impl Engine<'_> {
    /// Observe each object as Revision `revision` would apply it, given the live objects the
    /// [`inventory`](Self::inventory) found (the Application's own, by its labels); up to
    /// [`CONCURRENCY`] objects at once, results in the order of `objects`.
    ///
    /// One request per object, the dry run: a dry-run create comes back without a
    /// `resourceVersion` (nothing was stored), so an object missing from `live` is `Absent`
    /// unless the dry run says it exists — one made by hand or by another tool — and only then
    /// is it read.
    pub fn observe<'a>(
        &'a self,
        objects: &'a [DesiredObject],
        revision: &'a str,
        live: &'a BTreeMap<ObjectKey, Value>,
    ) -> BoxFuture<'a, Result<Vec<Observation>, EngineError>> {
        // Boxed, so the stream's closures do not leak into callers' futures, where the compiler
        // cannot prove them `Send` for every lifetime (a controller's reconcile must be).
        let defined_here = kinds_defined_by(objects);
        stream::iter(objects)
            .map(move |object| {
                let new_kind = defined_here.contains(&object.key.group_kind);
                self.observe_one(object, revision, live.get(&object.key), new_kind)
            })
            .buffered(CONCURRENCY)
            .try_collect()
            .boxed()
    }

    async fn observe_one(
        &self,
        object: &DesiredObject,
        revision: &str,
        listed: Option<&Value>,
        defined_here: bool,
    ) -> Result<Observation, EngineError> {
        // An object the Application applied before is compared under the Revision that applied
        // it: a new Revision alone is no change, and objects nothing else changed in are left
        // alone (their annotation keeps naming the Revision that last applied them).
        let applied_by = listed
            .and_then(|live| live["metadata"]["annotations"][keys::REVISION].as_str())
            .unwrap_or(revision);
        let body = object.for_revision(applied_by);
        let api_version = body["apiVersion"].as_str().unwrap_or_default().to_owned();
        let api = match self.api_for(&object.key, &api_version).await {
            Ok(api) => api,
            // A custom resource whose CustomResourceDefinition this same desired state brings:
            // nothing of the kind can exist yet, and the apply comes after the CRD's.
            Err(EngineError::NotServed { .. }) if defined_here => {
                return Ok(Observation {
                    key: object.key.clone(),
                    api_version,
                    wave: object.wave,
                    found: Found::Absent,
                });
            }
            Err(err) => return Err(err),
        };
        if let Some(live) = listed.filter(|live| self.known_unchanged(&object.key, live, &body)) {
            let found =
                Found::Present { live: live.clone(), dry_run: live.clone(), adopted: vec![] };
            return Ok(Observation {
                key: object.key.clone(),
                api_version,
                wave: object.wave,
                found,
            });
        }
        let found = match self.dry_run(&api, object, &body, listed).await? {
            DryRun::Conflicts(conflicts) => Found::Conflicts(conflicts),
            DryRun::Applied { result, adopted } => {
                let live = match listed {
                    Some(live) => Some(live.clone()),
                    None if exists(&result) => self.read_live(&api, &object.key).await?,
                    None => None,
                };
                match live {
                    None => Found::Absent,
                    Some(live) => {
                        if adopted.is_empty() && changed_fields(&live, &result).is_empty() {
                            self.remember(&object.key, &live, &body);
                        }
                        Found::Present { live, dry_run: result, adopted }
                    }
                }
            }
        };
        Ok(Observation { key: object.key.clone(), api_version, wave: object.wave, found })
    }

    /// Whether the [`DryRunMemo`] knows that applying `body` leaves `live` as it is.
    fn known_unchanged(&self, key: &ObjectKey, live: &Value, body: &Value) -> bool {
        self.memo.is_some_and(|memo| memo.unchanged(self.field_manager, key, live, body))
    }

    fn remember(&self, key: &ObjectKey, live: &Value, body: &Value) {
        if let Some(memo) = self.memo {
            memo.record(self.field_manager, key, live, body);
        }
    }

    /// [`imperative_managers`] of the live object.
    async fn imperative_writers(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
    ) -> Result<std::collections::BTreeSet<String>, EngineError> {
        let live = self.read_live(api, key).await?;
        Ok(live.as_ref().map(imperative_managers).unwrap_or_default())
    }

    /// The live object of `object`, read as the service account; `None` when it does not exist.
    pub async fn live(&self, object: &DesiredObject) -> Result<Option<Value>, EngineError> {
        let api_version = object.object["apiVersion"].as_str().unwrap_or_default();
        let api = self.api_for(&object.key, api_version).await?;
        self.read_live(&api, &object.key).await
    }

    async fn read_live(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
    ) -> Result<Option<Value>, EngineError> {
        let live = api.get_opt(&key.name).await.map_err(|err| {
            classify(err, "get", key, |message| EngineError::Plan { key: key.clone(), message })
        })?;
        Ok(live.as_ref().map(to_value))
    }

    async fn dry_run(
        &self,
        api: &Api<DynamicObject>,
        object: &DesiredObject,
        body: &Value,
        listed: Option<&Value>,
    ) -> Result<DryRun, EngineError> {
        let plan_error = |message| EngineError::Plan { key: object.key.clone(), message };
        let params = PatchParams::apply(self.field_manager).dry_run();
        let result = match api.patch(&object.key.name, &params, &Patch::Apply(body)).await {
            Ok(result) => Ok((result, Vec::new())),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let conflicts = parse_conflict_message(&status.message);
                let imperative = match listed {
                    Some(live) => imperative_managers(live),
                    None => self.imperative_writers(api, &object.key).await?,
                };
                let blocking = blocking_conflicts(&conflicts, &imperative);
                if !self.adopt && !blocking.is_empty() {
                    return Ok(DryRun::Conflicts(blocking));
                }
                let real = real_conflicts(&conflicts);
                // Under adopt, or when every field is only migrated from before server-side
                // apply or a client-side kubectl apply, or was edited imperatively (drift):
                // take them over.
                let forced = params.clone().force();
                api.patch(&object.key.name, &forced, &Patch::Apply(body))
                    .await
                    .map(|result| (result, real))
            }
            Err(err) => Err(err),
        };
        let (result, adopted) =
            result.map_err(|err| classify(err, "patch", &object.key, plan_error))?;
        Ok(DryRun::Applied { result: to_value(&result), adopted })
    }

    /// Server-side apply `objects` for Revision `revision`, in the order given: consecutive
    /// objects of one kind go up to [`CONCURRENCY`] at once, kinds one after the other (a CRD
    /// before its custom resources, a Namespace before what lives in it).
    pub fn apply<'a>(
        &'a self,
        objects: &'a [&'a DesiredObject],
        revision: &'a str,
    ) -> BoxFuture<'a, Result<(), EngineError>> {
        async move {
            for batch in objects.chunk_by(|a, b| a.key.group_kind == b.key.group_kind) {
                let applies: Vec<_> =
                    batch.iter().map(|object| self.apply_one(object, revision)).collect();
                stream::iter(applies)
                    .buffer_unordered(CONCURRENCY)
                    .try_collect::<Vec<()>>()
                    .await?;
            }
            Ok(())
        }
        .boxed()
    }

    async fn apply_one(&self, object: &DesiredObject, revision: &str) -> Result<(), EngineError> {
        let mut params = PatchParams::apply(self.field_manager);
        if self.adopt {
            params = params.force();
        }
        let body = object.for_revision(revision);
        let api_version = body["apiVersion"].as_str().unwrap_or_default().to_owned();
        let api = self.api_for(&object.key, &api_version).await?;
        let applied = match api.patch(&object.key.name, &params, &Patch::Apply(&body)).await {
            // Fields held only by migrated managers or imperative writers are taken over, as
            // the plan said.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let conflicts = parse_conflict_message(&status.message);
                let imperative = self.imperative_writers(&api, &object.key).await?;
                if blocking_conflicts(&conflicts, &imperative).is_empty() {
                    let forced = params.clone().force();
                    api.patch(&object.key.name, &forced, &Patch::Apply(&body)).await
                } else {
                    Err(kube::Error::Api(status))
                }
            }
            other => other,
        };
        let applied = applied.map_err(|err| {
            classify(err, "patch", &object.key, |message| EngineError::Apply {
                key: object.key.clone(),
                message,
            })
        })?;
        self.remember(&object.key, &to_value(&applied), &body);
        if let Some(shared) = self.shared {
            let version = applied.metadata.resource_version.as_deref().unwrap_or_default();
            shared.inventory.wrote(shared.application, &object.key, version);
        }
        Ok(())
    }

    /// The live objects carrying Application `application_namespace/application`'s labels, of
    /// `kinds`. Namespaced kinds are listed in `destination` only, the one namespace an
    /// Application may write to; cluster-scoped kinds across the cluster. One list per kind, as
    /// the service account; a kind it may not list is reported in [`Inventory::unlisted`] (never
    /// prune what cannot be seen), a kind the API server no longer serves is skipped.
    pub async fn inventory(
        &self,
        application_namespace: &str,
        application: &str,
        destination: &str,
        kinds: &[ManagedKind],
    ) -> Result<Inventory, EngineError> {
        let selector = format!(
            "{}={application},{}={application_namespace}",
            keys::APPLICATION,
            keys::APPLICATION_NAMESPACE
        );
        let mut inventory = Inventory::default();
        for kind in kinds {
            let group_kind = GroupKind::new(group_of(&kind.api_version), &kind.kind);
            let Some(served) = self
                .kinds
                .resolve(self.client, &kind.api_version, &kind.kind)
                .await
                .map_err(EngineError::Discovery)?
            else {
                continue;
            };
            let listed_in = match served.scope {
                Scope::Namespaced => Some(destination),
                Scope::Cluster => None,
            };
            let watched = self.shared.and_then(|shared| {
                let application = (application_namespace, application);
                shared.inventory.objects(shared.identity, application, &group_kind, listed_in)
            });
            let objects = match watched {
                Some(objects) => objects,
                None => match self.list(&served, listed_in, &selector, &group_kind).await? {
                    Some(objects) => objects,
                    None => {
                        inventory.unlisted.push(group_kind);
                        continue;
                    }
                },
            };
            inventory.listed.push(group_kind.clone());
            inventory
                .objects
                .extend(objects.into_iter().map(|o| live_object(kind, &group_kind, o, self)));
        }
        Ok(inventory)
    }

    /// The objects of one kind carrying `selector`, listed as the service account in `namespace`
    /// (across the cluster when `None`); `None` when it may not list them. The answer is
    /// remembered in the shared inventory, which trusts the permission for a while.
    async fn list(
        &self,
        served: &ServedKind,
        namespace: Option<&str>,
        selector: &str,
        group_kind: &GroupKind,
    ) -> Result<Option<Vec<Value>>, EngineError> {
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => {
                Api::namespaced_with(self.client.clone(), namespace, &served.resource)
            }
            None => Api::all_with(self.client.clone(), &served.resource),
        };
        let listed = match api.list(&ListParams::default().labels(selector)).await {
            Ok(list) => Some(list.items.iter().map(to_value).collect()),
            Err(kube::Error::Api(status)) if status.code == 403 => None,
            Err(err) => {
                return Err(EngineError::Inventory {
                    kind: group_kind.clone(),
                    message: err.to_string(),
                });
            }
        };
        if let Some(shared) = self.shared {
            let allowed = listed.is_some();
            shared.inventory.listed(shared.identity, group_kind, namespace.unwrap_or(""), allowed);
        }
        Ok(listed)
    }

    /// Delete `objects`, in the order given; one already gone is fine.
    pub async fn delete(&self, objects: &[ManagedObject]) -> Result<(), EngineError> {
        for object in objects {
            if let Some(memo) = self.memo {
                memo.forget(self.field_manager, &object.key);
            }
            let api = self.api_for(&object.key, &object.api_version).await?;
            match api.delete(&object.key.name, &DeleteParams::background()).await {
                Ok(_) => {
                    if let Some(shared) = self.shared {
                        shared.inventory.deleted(shared.application, &object.key);
                    }
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => {
                    return Err(classify(err, "delete", &object.key, |message| {
                        EngineError::Prune { key: object.key.clone(), message }
                    }));
                }
            }
        }
        Ok(())
    }

    async fn api_for(
        &self,
        key: &ObjectKey,
        api_version: &str,
    ) -> Result<Api<DynamicObject>, EngineError> {
        let served: ServedKind = self
            .kinds
            .resolve(self.client, api_version, &key.group_kind.kind)
            .await
            .map_err(EngineError::Discovery)?
            .ok_or_else(|| EngineError::NotServed { key: key.clone() })?;
        Ok(match &key.namespace {
            Some(namespace) => {
                Api::namespaced_with(self.client.clone(), namespace, &served.resource)
            }
            None => Api::all_with(self.client.clone(), &served.resource),
        })
    }
}

/// A 403 becomes [`EngineError::Forbidden`]; anything else `other(message)`.
fn classify(
    err: kube::Error,
    verb: &'static str,
    key: &ObjectKey,
    other: impl FnOnce(String) -> EngineError,
) -> EngineError {
    match err {
        kube::Error::Api(status) if status.code == 403 => {
            EngineError::Forbidden { verb, resource: key.to_string(), message: status.message }
        }
        kube::Error::Api(status) => other(status.message),
        err => other(err.to_string()),
    }
}

/// Whether a dry-run result is of an object that exists: a dry-run create stores nothing, so it
/// comes back without a `resourceVersion`.
fn exists(dry_run: &Value) -> bool {
    dry_run["metadata"]["resourceVersion"].as_str().is_some_and(|rv| !rv.is_empty())
}

/// A listed (or watched) object of `kind` as the inventory holds it. A list's items carry no
/// kind of their own, so it is set.
/// A listed or watched object of `kind`, trimmed as the shared inventory keeps it
/// ([`trim_live`]), so a plan sees the same object whichever answered.
fn live_object(
    kind: &ManagedKind,
    group_kind: &GroupKind,
    mut object: Value,
    engine: &Engine<'_>,
) -> LiveObject {
    trim_live(&mut object, engine.field_manager);
    if let Some(fields) = object.as_object_mut() {
        fields.insert("apiVersion".to_owned(), Value::String(kind.api_version.clone()));
        fields.insert("kind".to_owned(), Value::String(kind.kind.clone()));
    }
    let metadata = &object["metadata"];
    let prune_disabled =
        metadata["annotations"][keys::PRUNE].as_str() == Some(keys::PRUNE_DISABLED);
    let managed = ManagedObject {
        key: ObjectKey {
            group_kind: group_kind.clone(),
            namespace: metadata["namespace"].as_str().map(str::to_owned),
            name: metadata["name"].as_str().unwrap_or_default().to_owned(),
        },
        api_version: kind.api_version.clone(),
        prune_disabled,
    };
    LiveObject { managed, object }
}

fn to_value(object: &DynamicObject) -> Value {
    serde_json::to_value(object).unwrap_or(Value::Null)
}
