//! Every name the API reference defines, as types: condition types and reasons, failure reasons,
//! Revision phases, sync and health states, Event reasons, and the label and annotation keys.
//!
//! String literals for these names live here and nowhere else; the rest of the code uses the
//! enums, whose `as_str()` is the exact spelling of `kuvryn-sync-api-reference.txt`. The test
//! `spec_coverage` reads the reference and fails when a name it defines is missing here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use strum::{AsRefStr, Display, EnumIter, EnumString, IntoStaticStr};

/// Declares a closed set of names: a serde/schemars enum whose variants serialize as their own
/// names, with `as_str()` and `FromStr`/`Display` from strum.
macro_rules! names {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
            JsonSchema, Display, EnumString, EnumIter, IntoStaticStr, AsRefStr,
        )]
        $vis enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// The exact spelling used on the wire and in the API reference.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }
    };
}

names! {
    /// `status.conditions[].type` of every kind.
    pub enum ConditionType {
        /// Repository, Application, ImagePolicy (and HealthCheck) readiness.
        Ready,
        /// Repository image write-back result.
        ImagesUpdated,
        /// Application with `spec.dependsOn`.
        DependenciesReady,
        /// Application with `spec.notifications`.
        NotificationsReady,
        /// Revision rollout progress.
        RolloutComplete,
        /// Revision replaced by a completed rollback.
        RolledBack,
    }
}

names! {
    /// Reasons of conditions that are not failures (failures use [`FailureReason`]).
    pub enum ConditionReason {
        /// Repository Ready=True.
        FetchSucceeded,
        /// Repository ImagesUpdated=True, nothing to commit.
        UpToDate,
        /// Repository ImagesUpdated=True, a change was committed.
        Committed,
        /// Repository ImagesUpdated=False.
        UpdateFailed,
        /// Repository ImagesUpdated when the manager runs without image write-back.
        Disabled,
        /// Application Ready=True.
        Healthy,
        /// Application Ready=False after a finished rollout's resources became Degraded.
        Degraded,
        /// Application Ready=False while a finished rollout's resources are Progressing again.
        Progressing,
        /// Application Ready=False while a completed rollback holds the desired revision.
        RolledBack,
        /// DependenciesReady=True.
        DependenciesHealthy,
        /// DependenciesReady=False.
        DependencyNotReady,
        /// DependenciesReady=False.
        DependencyCycle,
        /// NotificationsReady=True.
        SinksReady,
        /// NotificationsReady=False.
        SinkInvalid,
        /// Revision RolloutComplete=False while hooks and waves apply.
        RollingOut,
        /// Revision RolloutComplete=True once every group is Healthy.
        RolloutSucceeded,
        /// Revision RolledBack=True after `ksync rollback`.
        ManualRollback,
        /// Revision RolledBack=True after a failure policy rollback.
        RollbackCompleted,
        /// ImagePolicy Ready=True.
        Selected,
        /// ImagePolicy Ready=False.
        ScanFailed,
        /// HealthCheck Ready=True: every rule compiles and returns a bool.
        RulesValid,
        /// HealthCheck Ready=False.
        InvalidRule,
    }
}

names! {
    /// `Revision.status.failure.reason`, and the reason of a False Ready condition on an
    /// Application or Repository.
    pub enum FailureReason {
        SourceFailure,
        AuthenticationFailure,
        ServiceAccountRequired,
        ServiceAccountFailure,
        DecryptionFailure,
        RenderFailure,
        ValidationFailure,
        PlanFailure,
        ConflictFailure,
        ApplyFailure,
        PruneFailure,
        Forbidden,
        HealthFailure,
        HookFailed,
        TimeoutFailure,
        RetryBlocked,
        RolledBack,
    }
}

impl FailureReason {
    /// Whether retrying the same desired state can succeed without a change in Git or in the
    /// cluster's configuration (the default `retryable` of `status.failure`).
    pub fn retryable(self) -> bool {
        use FailureReason::*;
        match self {
            SourceFailure
            | AuthenticationFailure
            | ServiceAccountFailure
            | DecryptionFailure
            | PlanFailure
            | ConflictFailure
            | ApplyFailure
            | PruneFailure
            | Forbidden
            | HealthFailure
            | HookFailed
            | TimeoutFailure => true,
            ServiceAccountRequired
            | RenderFailure
            | ValidationFailure
            | RetryBlocked
            | RolledBack => false,
        }
    }
}

names! {
    /// `Revision.status.phase`.
    pub enum RevisionPhase {
        Pending,
        Planning,
        AwaitingApproval,
        Applying,
        Observing,
        Healthy,
        Failed,
        RollingBack,
        RolledBack,
        Cancelled,
    }
}

impl RevisionPhase {
    /// A phase the Revision never leaves on its own.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RevisionPhase::Healthy
                | RevisionPhase::Failed
                | RevisionPhase::RolledBack
                | RevisionPhase::Cancelled
        )
    }
}

names! {
    /// `Application.status.sync.state`.
    #[derive(Default)]
    pub enum SyncState {
        #[default]
        Unknown,
        Synced,
        OutOfSync,
        Drifted,
        Planning,
        AwaitingApproval,
        Applying,
        Pruning,
    }
}

names! {
    /// `Application.status.health.state` (and `status.state`), ordered from best to worst as
    /// aggregation needs it.
    #[derive(Default)]
    pub enum HealthState {
        Healthy,
        Suspended,
        Progressing,
        #[default]
        Unknown,
        Degraded,
    }
}

names! {
    /// `Repository.status.state`.
    #[derive(Default)]
    pub enum RepositoryState {
        #[default]
        Unknown,
        Ready,
        Failed,
    }
}

names! {
    /// Lifecycle events an Application may subscribe a NotificationSink to.
    pub enum NotificationEvent {
        AwaitingApproval,
        Healthy,
        Failed,
        RolledBack,
    }
}

/// Kubernetes Event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Reason of an Event Kuvryn Sync records on its own objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    PlanCreated,
    ApprovalRequired,
    ApprovalStale,
    DeploymentStarted,
    DeploymentHealthy,
    Diagnosed,
    HealthDegraded,
    /// A rollback began; `automatic` decides the type (docs/decisions.md#ruling-3).
    RollbackStarted {
        automatic: bool,
    },
    RollbackCompleted,
    RollbackAbandoned,
    RollbackHoldLifted,
    RollbackApproved,
    RollbackTargetChanged,
    /// A Revision failed or retries stopped; on a Repository, the Ready failure reason.
    Failure(FailureReason),
    PruneInventoryIncomplete,
    PruneSkipped,
    ManagedResourcesOrphaned,
    InvalidHealthCheck,
    NotificationFailed,
    NotificationDropped,
    RepositoryReady,
    ImagesUpdated,
    ImageUpdateFailed,
    ImageSelected,
}

impl EventReason {
    /// Every reason with a fixed spelling, for tests and documentation.
    pub fn all() -> Vec<EventReason> {
        use EventReason::*;
        let mut all = vec![
            PlanCreated,
            ApprovalRequired,
            ApprovalStale,
            DeploymentStarted,
            DeploymentHealthy,
            Diagnosed,
            HealthDegraded,
            RollbackStarted { automatic: true },
            RollbackStarted { automatic: false },
            RollbackCompleted,
            RollbackAbandoned,
            RollbackHoldLifted,
            RollbackApproved,
            RollbackTargetChanged,
            PruneInventoryIncomplete,
            PruneSkipped,
            ManagedResourcesOrphaned,
            InvalidHealthCheck,
            NotificationFailed,
            NotificationDropped,
            RepositoryReady,
            ImagesUpdated,
            ImageUpdateFailed,
            ImageSelected,
        ];
        all.extend(<FailureReason as strum::IntoEnumIterator>::iter().map(Failure));
        all
    }

    /// The Event's `reason` field.
    pub fn as_str(self) -> &'static str {
        use EventReason::*;
        match self {
            PlanCreated => "PlanCreated",
            ApprovalRequired => "ApprovalRequired",
            ApprovalStale => "ApprovalStale",
            DeploymentStarted => "DeploymentStarted",
            DeploymentHealthy => "DeploymentHealthy",
            Diagnosed => "Diagnosed",
            HealthDegraded => "HealthDegraded",
            RollbackStarted { .. } => "RollbackStarted",
            RollbackCompleted => "RollbackCompleted",
            RollbackAbandoned => "RollbackAbandoned",
            RollbackHoldLifted => "RollbackHoldLifted",
            RollbackApproved => "RollbackApproved",
            RollbackTargetChanged => "RollbackTargetChanged",
            Failure(reason) => reason.as_str(),
            PruneInventoryIncomplete => "PruneInventoryIncomplete",
            PruneSkipped => "PruneSkipped",
            ManagedResourcesOrphaned => "ManagedResourcesOrphaned",
            InvalidHealthCheck => "InvalidHealthCheck",
            NotificationFailed => "NotificationFailed",
            NotificationDropped => "NotificationDropped",
            RepositoryReady => "RepositoryReady",
            ImagesUpdated => "ImagesUpdated",
            ImageUpdateFailed => "ImageUpdateFailed",
            ImageSelected => "ImageSelected",
        }
    }

    /// The Event's type, as the reference's Events table gives it.
    pub fn event_type(self) -> EventType {
        use EventReason::*;
        match self {
            PlanCreated | ApprovalRequired | DeploymentStarted | DeploymentHealthy
            | RollbackCompleted | RollbackHoldLifted | RollbackApproved | RepositoryReady
            | ImagesUpdated | ImageSelected => EventType::Normal,
            RollbackStarted { automatic } => {
                if automatic {
                    EventType::Warning
                } else {
                    EventType::Normal
                }
            }
            ApprovalStale
            | Diagnosed
            | HealthDegraded
            | RollbackAbandoned
            | RollbackTargetChanged
            | Failure(_)
            | PruneInventoryIncomplete
            | PruneSkipped
            | ManagedResourcesOrphaned
            | InvalidHealthCheck
            | NotificationFailed
            | NotificationDropped
            | ImageUpdateFailed => EventType::Warning,
        }
    }
}

/// Label and annotation keys, and the values the reference gives them.
pub mod keys {
    /// Label on managed objects and Revisions: owning Application name.
    pub const APPLICATION: &str = "sync.kuvryn.io/application";
    /// Label on managed objects: owning Application namespace.
    pub const APPLICATION_NAMESPACE: &str = "sync.kuvryn.io/application-namespace";
    /// Annotation on managed objects: the Revision object that last applied it.
    pub const REVISION: &str = "sync.kuvryn.io/revision";
    /// Annotation on managed objects set by users; see [`PRUNE_DISABLED`].
    pub const PRUNE: &str = "sync.kuvryn.io/prune";
    /// The [`PRUNE`] value that keeps an object from being pruned.
    pub const PRUNE_DISABLED: &str = "disabled";
    /// Annotation on desired objects: `pre-sync`, `post-sync` or `skip`.
    pub const HOOK: &str = "sync.kuvryn.io/hook";
    /// Annotation on desired objects: integer wave, default 0.
    pub const SYNC_WAVE: &str = "sync.kuvryn.io/sync-wave";
    /// Label on discovered Applications: the Repository that discovered it.
    pub const REPOSITORY: &str = "sync.kuvryn.io/repository";
    /// Annotation on discovered Applications: the `.ksync.yaml` path it came from.
    pub const DISCOVERED_FROM: &str = "sync.kuvryn.io/discovered-from";
    /// Application annotation: Revision approved for a manual sync.
    pub const APPROVED_REVISION: &str = "sync.kuvryn.io/approved-revision";
    /// Application annotation: plan digest the approval is for (checked, never stored).
    pub const APPROVE_DIGEST: &str = "sync.kuvryn.io/approve-digest";
    /// Application annotation set by the webhook: who approved.
    pub const APPROVED_BY: &str = "sync.kuvryn.io/approved-by";
    /// Application annotation set by the webhook: when the approval was recorded.
    pub const APPROVED_AT: &str = "sync.kuvryn.io/approved-at";
    /// Application annotation set by the webhook: plan digest the approval covers.
    pub const APPROVED_DIGEST: &str = "sync.kuvryn.io/approved-digest";
    /// Application annotation: source revision to roll back to.
    pub const ROLLBACK_REVISION: &str = "sync.kuvryn.io/rollback-revision";
    /// Application annotation: source revision rolled back from, held once complete.
    pub const ROLLBACK_FROM: &str = "sync.kuvryn.io/rollback-from";
    /// Application annotation: `manual` or `automatic`; missing means manual.
    pub const ROLLBACK_KIND: &str = "sync.kuvryn.io/rollback-kind";
    /// Application annotation: Revision object the rollback was requested to.
    pub const ROLLBACK_TARGET_REVISION: &str = "sync.kuvryn.io/rollback-target-revision";
    /// Application annotation set by the webhook: who requested the rollback.
    pub const ROLLBACK_REQUESTED_BY: &str = "sync.kuvryn.io/rollback-requested-by";
    /// Application annotation set by the webhook: when the rollback request was recorded.
    pub const ROLLBACK_REQUESTED_AT: &str = "sync.kuvryn.io/rollback-requested-at";
    /// Application annotation set by the webhook: fingerprint of the chosen Revision's state.
    pub const ROLLBACK_TARGET_HASH: &str = "sync.kuvryn.io/rollback-target-hash";
    /// Repository annotation: requests an immediate fetch.
    pub const RECONCILE_REQUESTED_AT: &str = "sync.kuvryn.io/reconcile-requested-at";
    /// Secret label allowing it as Git credentials (value [`TRUE`]).
    pub const GIT_CREDENTIALS: &str = "sync.kuvryn.io/git-credentials";
    /// Secret label allowing it as registry credentials (value [`TRUE`]).
    pub const REGISTRY_CREDENTIALS: &str = "sync.kuvryn.io/registry-credentials";
    /// Secret label allowing it as SOPS age keys (value [`TRUE`]).
    pub const DECRYPTION_KEY: &str = "sync.kuvryn.io/decryption-key";
    /// The value the Secret labels above must have.
    pub const TRUE: &str = "true";
    /// `rollback-kind` values.
    pub const ROLLBACK_KIND_MANUAL: &str = "manual";
    pub const ROLLBACK_KIND_AUTOMATIC: &str = "automatic";
    /// `hook` values.
    pub const HOOK_PRE_SYNC: &str = "pre-sync";
    pub const HOOK_POST_SYNC: &str = "post-sync";
    pub const HOOK_SKIP: &str = "skip";
    /// Lease annotation (not in the reference): the leader controller's build version, written
    /// when it is elected; `ksync version` and `ksync check` read it.
    pub const CONTROLLER_VERSION: &str = "sync.kuvryn.io/controller-version";
    /// Label on Applications and Repositories (not in the reference), set by users: the
    /// controller shard that reconciles the object (controllers started with `--shard NAME`);
    /// copied by the controller onto the Application's Revisions.
    pub const SHARD: &str = "sync.kuvryn.io/shard";
    /// Label on the controller's own Leases in automatic sharding (`--shards N`, not in the
    /// reference): `shard` on the per-shard Leases, `replica` on each replica's presence Lease.
    pub const SHARD_LEASE: &str = "sync.kuvryn.io/shard-lease";

    /// Every label and annotation key the code sets or reads, with where it lives and what it
    /// means: the "Labels and annotations" section of `docs/api.md` is generated from it.
    pub const DOCUMENTED: &[(&str, &str)] = &[
        (
            APPLICATION,
            "Label on managed objects and Revisions: the owning Application's name. Set by the controller.",
        ),
        (
            APPLICATION_NAMESPACE,
            "Label on managed objects: the owning Application's namespace. Set by the controller.",
        ),
        (
            REVISION,
            "Annotation on managed objects: the Revision object that last applied it. Set by the controller.",
        ),
        (
            PRUNE,
            "Annotation on managed objects, set by users: `disabled` keeps the object from being pruned.",
        ),
        (
            HOOK,
            "Annotation on desired objects: `pre-sync`, `post-sync` or `skip`. Read by the controller.",
        ),
        (
            SYNC_WAVE,
            "Annotation on desired objects: integer apply wave, default 0. Read by the controller.",
        ),
        (
            REPOSITORY,
            "Label on discovered Applications: the Repository that discovered it. Set by the controller.",
        ),
        (
            DISCOVERED_FROM,
            "Annotation on discovered Applications: the `.ksync.yaml` path it came from. Set by the controller.",
        ),
        (
            APPROVED_REVISION,
            "Application annotation, set by users (`ksync sync`): the Revision approved for a manual sync.",
        ),
        (
            APPROVE_DIGEST,
            "Application annotation, set by users (`ksync sync`): the plan digest the approval is for; checked by the webhook, never stored.",
        ),
        (APPROVED_BY, "Application annotation set by the webhook: who approved."),
        (APPROVED_AT, "Application annotation set by the webhook: when the approval was recorded."),
        (
            APPROVED_DIGEST,
            "Application annotation set by the webhook: the plan digest the approval covers.",
        ),
        (
            ROLLBACK_REVISION,
            "Application annotation, set by users (`ksync rollback`) or the controller: the source revision to roll back to.",
        ),
        (
            ROLLBACK_FROM,
            "Application annotation: the source revision rolled back from, held once the rollback completes.",
        ),
        (ROLLBACK_KIND, "Application annotation: `manual` or `automatic`; missing means manual."),
        (
            ROLLBACK_TARGET_REVISION,
            "Application annotation, set by `ksync rollback`: the Revision object the rollback was requested to.",
        ),
        (
            ROLLBACK_REQUESTED_BY,
            "Application annotation set by the webhook: who requested the rollback.",
        ),
        (
            ROLLBACK_REQUESTED_AT,
            "Application annotation set by the webhook: when the rollback request was recorded.",
        ),
        (
            ROLLBACK_TARGET_HASH,
            "Application annotation set by the webhook: fingerprint of the chosen Revision's desired state.",
        ),
        (
            RECONCILE_REQUESTED_AT,
            "Repository annotation, set by users (`ksync sync`) and the push receivers: requests an immediate fetch.",
        ),
        (GIT_CREDENTIALS, "Secret label: `true` allows the Secret as Git credentials."),
        (REGISTRY_CREDENTIALS, "Secret label: `true` allows the Secret as registry credentials."),
        (DECRYPTION_KEY, "Secret label: `true` allows the Secret as SOPS age keys."),
        (
            CONTROLLER_VERSION,
            "Annotation on the controller's leader Lease: the leader's build version, written when it is elected; read by `ksync version` and `ksync check`.",
        ),
        (
            SHARD,
            "Label on Applications and Repositories, set by users: the controller shard (`--shard NAME`) that reconciles the object; unlabelled objects go to the controller started with `--shard-unlabelled` (or to an unsharded controller). Copied onto the Application's Revisions. See docs/sharding.md.",
        ),
        (
            SHARD_LEASE,
            "Label on the controller's Leases in automatic sharding (`--shards N`): `shard` on the per-shard Leases, `replica` on each replica's presence Lease. Set by the controller.",
        ),
    ];

    /// Every key above that the reference's "Labels and annotations" table defines.
    pub const ALL: &[&str] = &[
        APPLICATION,
        APPLICATION_NAMESPACE,
        REVISION,
        PRUNE,
        HOOK,
        SYNC_WAVE,
        REPOSITORY,
        DISCOVERED_FROM,
        APPROVED_REVISION,
        APPROVE_DIGEST,
        APPROVED_BY,
        APPROVED_AT,
        APPROVED_DIGEST,
        ROLLBACK_REVISION,
        ROLLBACK_FROM,
        ROLLBACK_KIND,
        ROLLBACK_TARGET_REVISION,
        ROLLBACK_REQUESTED_BY,
        ROLLBACK_REQUESTED_AT,
        ROLLBACK_TARGET_HASH,
        RECONCILE_REQUESTED_AT,
        GIT_CREDENTIALS,
        REGISTRY_CREDENTIALS,
        DECRYPTION_KEY,
    ];
}
