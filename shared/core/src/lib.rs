//! Kuvryn Sync's decisions as pure functions: plain data in, plain data out. No clock, no
//! network, no Kubernetes client, no async runtime (a test in `tests/tests/layering.rs` fails
//! when this crate depends on one). The I/O crates (`kuvryn-sync-source`, `kuvryn-sync-runtime`)
//! and the binaries gather the inputs, call these functions and perform what they decide.
//!
//! | module | decides |
//! |---|---|
//! | [`health`] | a live object's health: the hook rule, HealthCheck rules, then kstatus (controller and CLI) |
//! | [`health_rules`] | whether a HealthCheck rule compiles and returns a bool, and its answer |
//! | [`diagnosis`] | the root causes of unhealthy managed resources (`status.diagnosis`) |
//! | [`kstatus`] | a live object's health by the Kubernetes status conventions (cli-utils kstatus) |
//! | [`dependencies`] | whether `spec.dependsOn` holds an Application back, and dependency cycles |
//! | [`history`] | which Revisions `spec.history.limit` deletes |
//! | [`conditions`] | setting a condition without flapping `lastTransitionTime` |
//! | [`redact`] | what is secret in any user-visible string, and masking it |
//! | [`duration`] | the one duration grammar (`90s`, `5m`, `1h30m`, `500ms`) |
//! | [`url`] | which Git URLs are accepted, and the credential scope of each |
//! | [`credentials`] | Git credentials from a labelled Secret |
//! | [`credential_scope`] | which URLs a credential Secret's declared `url` covers |
//! | [`oci_name`] | whether an OCI chart name (with its registry path) follows the distribution name grammar |
//! | [`checkout`] | how much of a commit's tree a checkout may write (files, bytes, depth) |
//! | [`discovery`] | `.ksync.yaml` parsing and which Applications to create, update or delete |
//! | [`desired`] | normalising and validating rendered objects, and `desiredStateHash` |
//! | [`order`] | the order objects are applied (stages, waves, kinds) and deleted in |
//! | [`advance`] | the next step of a rollout's apply (a group applied, waited for, failed, or done), from the live state |
//! | [`plan`] | a plan's actions, changed fields, conflicts, summary and digest |
//! | [`prune`] | which managed objects a sync prunes, and which it keeps and why |
//! | [`inventory`] | `status.managedKinds` before and after a sync, and the identity a sync acts as |
//! | [`field_manager`] | an Application's server-side apply field manager |
//! | [`helm_values`] | Helm values assembly, release names, chart registry credentials |
//! | [`image_policy`] | which tag an ImagePolicy selects, its scan status and Events, registry logins |
//! | [`image_update`] | byte-preserving edits of YAML fields marked for an ImagePolicy |
//! | [`image_writeback`] | a Repository's `ImagesUpdated` condition and Events, `spec.imageUpdate.path` |
//! | [`receiver`] | who may call a push or image hook, what the call says, and what it asks for |
//! | [`repository`] | a Repository reconcile's status, Events and writes |
//! | [`rollback`] | which commit a rollback request or hold deploys, where a failure rolls back to |
//! | [`rollout`] | an attempt's health, its deadline, the backoff between attempts, approvals |
//! | [`admission`] | what an Application request may change in its approval and rollback annotations, and what the webhook records |
//! | [`application`] | an Application sync: its Revision, status, Events and step |
//! | [`notify`] | which Events notify, sink payloads, HMAC signing, delivery retries, sink validity, `NotificationsReady` |
//! | [`shards`] | which controller shard an object belongs to, shard names, which shard Leases a replica claims |

pub mod admission;
pub mod advance;
pub mod application;
pub mod checkout;
pub mod conditions;
pub mod credential_scope;
pub mod credentials;
pub mod dependencies;
pub mod desired;
pub mod diagnosis;
pub mod discovery;
pub mod duration;
pub mod field_manager;
pub mod health;
pub mod health_rules;
pub mod helm_values;
pub mod history;
pub mod image_policy;
pub mod image_update;
pub mod image_writeback;
pub mod inventory;
pub mod kstatus;
pub mod notify;
pub mod oci_name;
pub mod order;
pub mod plan;
pub mod prune;
pub mod receiver;
pub mod redact;
pub mod repository;
pub mod rollback;
pub mod rollout;
pub mod shards;
pub mod url;
pub mod yaml;
