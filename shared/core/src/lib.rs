//! Kuvryn Sync's decisions as pure functions: plain data in, plain data out. No clock, no
//! network, no Kubernetes client, no async runtime (a test in `tests/tests/layering.rs` fails
//! when this crate depends on one). The I/O crates (`kuvryn-sync-source`, `kuvryn-sync-runtime`)
//! and the binaries gather the inputs, call these functions and perform what they decide.
//!
//! The modules are grouped by the data path, in the order a commit travels: where it comes from
//! (`source`), what it renders to (`render`), what applying it would change (`plan`), how the
//! live objects are doing (`health`), how a rollout steps through hooks and waves (`hooks`), what
//! an Application's reconcile decides (`reconcile`), image automation (`images`), and the text
//! they all share (`text`). Each module is also reachable by its own name (`kuvryn_sync_core::plan`,
//! `kuvryn_sync_core::redact`), as before the grouping.
//!
//! | group | module | decides |
//! |---|---|---|
//! | source | [`url`] | which Git URLs are accepted, and the credential scope of each |
//! | source | [`credentials`] | Git credentials from a labelled Secret |
//! | source | [`credential_scope`] | which URLs a credential Secret's declared `url` covers |
//! | source | [`checkout`] | how much of a commit's tree a checkout may write (files, bytes, depth) |
//! | source | [`repository`] | a Repository reconcile's status, Events and writes |
//! | source | [`discovery`] | `.ksync.yaml` parsing and which Applications to create, update or delete |
//! | source | [`receiver`] | who may call a push or image hook, what the call says, and what it asks for |
//! | source | [`oci_name`] | whether an OCI chart name (with its registry path) follows the distribution name grammar |
//! | render | [`desired`] | normalising and validating rendered objects, and `desiredStateHash` |
//! | render | [`helm_values`] | Helm values assembly, release names, chart registry credentials |
//! | plan | [`plan`] | a plan's actions, changed fields, conflicts, summary and digest |
//! | plan | [`order`] | the order objects are applied (stages, waves, kinds) and deleted in |
//! | plan | [`prune`] | which managed objects a sync prunes, and which it keeps and why |
//! | plan | [`inventory`] | `status.managedKinds` before and after a sync, and the identity a sync acts as |
//! | plan | [`field_manager`] | an Application's server-side apply field manager |
//! | health | [`health`] | a live object's health: the hook rule, HealthCheck rules, then kstatus (controller and CLI) |
//! | health | [`kstatus`] | a live object's health by the Kubernetes status conventions (cli-utils kstatus) |
//! | health | [`health_rules`] | whether a HealthCheck rule compiles and returns a bool, and its answer |
//! | health | [`diagnosis`] | the root causes of unhealthy managed resources (`status.diagnosis`) |
//! | hooks | [`advance`] | the next step of a rollout's apply (a group applied, waited for, failed, or done), from the live state |
//! | reconcile | [`application`] | an Application sync: its Revision, status, Events and step |
//! | reconcile | [`rollout`] | an attempt's health, its deadline, the backoff between attempts, approvals |
//! | reconcile | [`rollback`] | which commit a rollback request or hold deploys, where a failure rolls back to |
//! | reconcile | [`history`] | which Revisions `spec.history.limit` deletes |
//! | reconcile | [`dependencies`] | whether `spec.dependsOn` holds an Application back, and dependency cycles |
//! | reconcile | [`conditions`] | setting a condition without flapping `lastTransitionTime` |
//! | reconcile | [`shards`] | which controller shard an object belongs to, shard names, which shard Leases a replica claims |
//! | images | [`image_policy`] | which tag an ImagePolicy selects, its scan status and Events, registry logins |
//! | images | [`image_update`] | byte-preserving edits of YAML fields marked for an ImagePolicy |
//! | images | [`image_writeback`] | a Repository's `ImagesUpdated` condition and Events, `spec.imageUpdate.path` |
//! | text | [`redact`] | what is secret in any user-visible string, and masking it |
//! | text | [`duration`] | the one duration grammar (`90s`, `5m`, `1h30m`, `500ms`) |
//! | text | [`yaml`] |  |
//! | webhook and notifications | [`admission`] | what an Application request may change in its approval and rollback annotations, and what the webhook records |
//! | webhook and notifications | [`notify`] | which Events notify, sink payloads, HMAC signing, delivery retries, sink validity, `NotificationsReady` |

pub mod admission;
pub mod health;
pub mod hooks;
pub mod images;
pub mod notify;
pub mod plan;
pub mod reconcile;
pub mod render;
pub mod source;
pub mod text;

// Every module by its own name too, as before the grouping.
pub use health::{diagnosis, health_rules, kstatus};
pub use hooks::advance;
pub use images::{image_policy, image_update, image_writeback};
pub use plan::{field_manager, inventory, order, prune};
pub use reconcile::{
    application, conditions, dependencies, failure, history, rollback, rollout, shards,
};
pub use render::{desired, helm_values};
pub use source::{
    checkout, credential_scope, credentials, discovery, oci_name, receiver, repository, url,
};
pub use text::{duration, redact, yaml};
