//! `ksync diff APP --path DIR [--exit-code]`: what the cluster would change if the Application's
//! source were the working copy in DIR, for pull-request checks.
//!
//! The steps are the controller's, through the same library functions: render DIR with the
//! Application's render settings (`kuvryn_sync_render::application::render_application`; for a
//! chart, the one in DIR with `valuesFiles` and inline `values`: a pulled chart and `valuesFrom`
//! are refused, naming the field; DIR's parent folders stand for the repository when DIR ends
//! with `spec.source.path`, see [`repository_root`]), learn scopes from discovery, normalise
//! for the destination (`core::desired::normalise`), list the live inventory and observe each
//! object with a server-side dry run, all as the Application's service account (impersonation,
//! `apply::clients::ImpersonatedClients`, under the Application's field manager), then
//! `core::plan::plan` with the prune selection. The plan is printed as `ksync plan` prints a
//! Revision's: field paths only, never values, and redacted. Nothing is written.
//!
//! Exit codes with `--exit-code`: 0 when the plan changes nothing, 1 when it creates, updates or
//! deletes something (and on a failure, as everywhere). Without it, 0 whenever the diff ran.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kuvryn_sync_api::{ConflictPolicy, ValuesFrom};
use kuvryn_sync_apply::clients::ImpersonatedClients;
use kuvryn_sync_apply::engine::Engine;
use kuvryn_sync_apply::kinds::Kinds;
use kuvryn_sync_core::desired::{GroupKind, ObjectKey, Rendered, Target, group_of, normalise};
use kuvryn_sync_core::prune::{PrunePlan, plan_prune};
use kuvryn_sync_core::redact::redact_shapes;
use kuvryn_sync_core::{field_manager, inventory};

use crate::Outcome;
use crate::cluster::Cluster;
use crate::output::{self, OutputArgs, Style};
use crate::render::{self, LocalSource};
use kuvryn_sync_render::application::values_from_failure;

/// `ksync diff` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct DiffArgs {
    /// The Application whose destination, service account and render settings are used.
    pub app: String,
    /// The working copy of the Application's `spec.source.path`: the folder to render.
    #[arg(long, value_name = "DIR")]
    pub path: PathBuf,
    /// Exit 1 when the plan changes anything, 0 when it changes nothing.
    #[arg(long)]
    pub exit_code: bool,
    /// Service account to plan as when the Application names none and has not resolved one yet
    /// (default: `spec.serviceAccountName`, else the one in `status.serviceAccountName`).
    #[arg(long, value_name = "NAME")]
    pub service_account: Option<String>,
    /// `libhelm_c.so` for helm Applications (default: $KSYNC_LIBHELM).
    #[arg(long, value_name = "FILE")]
    pub helm_library: Option<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Whether a plan changes anything.
pub fn differs(plan: &kuvryn_sync_api::PlanSummary) -> bool {
    plan.create + plan.update + plan.delete > 0
}

/// Run `ksync diff`.
pub async fn run(cluster: &Cluster, args: &DiffArgs) -> Result<Outcome> {
    let app = cluster.application(&args.app).await?;
    let namespace = cluster.namespace.clone();
    let account = args
        .service_account
        .clone()
        .or_else(|| app.spec.service_account_name.clone())
        .or_else(|| app.status.as_ref().and_then(|s| s.service_account_name.clone()))
        .context(
            "the Application names no service account and has not resolved one yet: pass \
             --service-account NAME (the controller's --default-service-account)",
        )?;
    let root = std::fs::canonicalize(&args.path)
        .with_context(|| format!("--path {}: no such folder", args.path.display()))?;
    let rendered = render_working_copy(&app, &root, args)?;
    let client = ImpersonatedClients::new(cluster.config.clone(), 1)
        .for_service_account(&namespace, &account)
        .map_err(|e| anyhow::anyhow!("cannot act as service account {account}: {e}"))?;
    let kinds = Kinds::default();
    let objects: Vec<serde_json::Value> = rendered.iter().map(|r| r.object.clone()).collect();
    let scopes = kinds
        .scopes(&client, &objects)
        .await
        .with_context(|| format!("API discovery as service account {namespace}/{account}"))?;
    let target = Target {
        application: &args.app,
        application_namespace: &namespace,
        destination_namespace: &app.spec.destination.namespace,
    };
    let desired = match normalise(&rendered, |gk| scopes.get(gk).copied(), target) {
        Ok(desired) => desired,
        Err(refusal) => {
            eprintln!("desired state refused ({} errors):", refusal.errors.len());
            for error in &refusal.errors {
                eprintln!("  - {}", redact_shapes(&error.to_string()));
            }
            return Ok(Outcome::NotMet);
        }
    };
    let manager = field_manager::for_application(&namespace, &args.app);
    let engine = Engine {
        client: &client,
        kinds: &kinds,
        field_manager: &manager,
        adopt: app.spec.sync.conflict_policy == ConflictPolicy::Adopt,
        memo: None,
        shared: None,
    };
    let recorded = app.status.as_ref().map(|s| s.managed_kinds.clone()).unwrap_or_default();
    let mut managed: BTreeSet<_> = recorded.iter().cloned().collect();
    managed.extend(desired.objects.iter().map(inventory::managed_kind));
    let managed: Vec<_> = managed.into_iter().collect();
    let found = engine
        .inventory(&namespace, &args.app, &app.spec.destination.namespace, &managed)
        .await
        .map_err(|e| anyhow::anyhow!("listing the live objects as {account}: {e}"))?;
    let revision = kuvryn_sync_core::application::revision_name(&args.app, "0", &desired.hash);
    let observations = engine
        .observe(&desired.objects, &revision, &found.live())
        .await
        .map_err(|e| anyhow::anyhow!("server-side dry run as {account}: {e}"))?;
    let prune = if app.spec.sync.prune {
        let wanted: BTreeSet<ObjectKey> = desired.objects.iter().map(|o| o.key.clone()).collect();
        let unlisted: BTreeSet<&GroupKind> = found.unlisted.iter().collect();
        let kinds: BTreeSet<GroupKind> = recorded
            .iter()
            .map(|k| GroupKind::new(group_of(&k.api_version), &k.kind))
            .filter(|k| !unlisted.contains(k))
            .collect();
        plan_prune(&wanted, &kinds, &found.managed())
    } else {
        PrunePlan::default()
    };
    let plan = kuvryn_sync_core::plan::plan(&desired.hash, &observations, &prune).summary();
    match args.output.format {
        Some(format) => output::print(&output::structured(format, &plan)?)?,
        None => output::print(&format!(
            "Diff of {} against {} (as {namespace}/{account})\n{}",
            root.display(),
            args.app,
            crate::plan::plan_text(&plan, Style::for_stdout())
        ))?,
    }
    Ok(if args.exit_code && differs(&plan) { Outcome::NotMet } else { Outcome::Done })
}

/// Render DIR with the Application's render settings, through the controller's function.
fn render_working_copy(
    app: &kuvryn_sync_api::Application,
    dir: &Path,
    args: &DiffArgs,
) -> Result<Vec<Rendered>> {
    let (root, path) = repository_root(dir, &app.spec.source.path);
    let local = LocalSource {
        root: &root,
        path: &path,
        render: &app.spec.source.render,
        destination_namespace: &app.spec.destination.namespace,
        helm_library: args.helm_library.as_ref(),
    };
    render::render_local(&local, &|index: usize, source: &ValuesFrom| {
        Err(values_from_failure(
            index,
            source,
            "`ksync diff` renders the working copy with valuesFiles and inline values only and \
             does not read valuesFrom from the cluster; compare with the Revision's plan \
             (`ksync plan`) instead",
        ))
    })
}

/// The repository root and `spec.source.path` for the working copy DIR: when DIR ends with
/// `source_path` (`~/src/repo/apps/web` for `apps/web`), the folder above is the repository, so
/// `valuesFiles` and kustomize bases outside the path resolve as the controller resolves them;
/// otherwise DIR stands for the path itself.
pub fn repository_root(dir: &Path, source_path: &str) -> (PathBuf, String) {
    let parts: Vec<&str> =
        source_path.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
    let mut root = dir.to_path_buf();
    for part in parts.iter().rev() {
        let matches = root.file_name().is_some_and(|name| name == *part);
        if *part == ".." || !matches || !root.pop() {
            return (dir.to_path_buf(), String::new());
        }
    }
    (root, parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_is_the_folder_above_when_dir_ends_with_the_source_path() {
        let cases = [
            ("/src/repo/apps/web", "apps/web", "/src/repo", "apps/web"),
            ("/src/repo/apps/web", "./apps/web/", "/src/repo", "apps/web"),
            ("/src/repo/apps/web", "web", "/src/repo/apps", "web"),
            ("/src/repo", "", "/src/repo", ""),
            ("/src/repo", ".", "/src/repo", ""),
            ("/tmp/copy", "apps/web", "/tmp/copy", ""),
            ("/tmp/web", "apps/web", "/tmp/web", ""),
            ("/src/repo/apps/..", "apps/..", "/src/repo/apps/..", ""),
        ];
        for (dir, source_path, root, path) in cases {
            let found = repository_root(Path::new(dir), source_path);
            assert_eq!(found, (PathBuf::from(root), path.to_owned()), "{dir} {source_path}");
        }
    }

    #[test]
    fn a_plan_that_changes_nothing_does_not_differ() {
        let mut plan = kuvryn_sync_api::PlanSummary::default();
        assert!(!differs(&plan));
        plan.update = 1;
        assert!(differs(&plan));
    }
}
