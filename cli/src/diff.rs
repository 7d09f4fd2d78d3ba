//! `ksync diff APP --path DIR [--exit-code]`: what the cluster would change if the Application's
//! source were the working copy in DIR, for pull-request checks.
//!
//! The steps are the controller's, through the same library functions: render DIR with the
//! Application's render type (`render::source` for yaml and kustomize, `render::helm_chart` for a
//! local chart with `valuesFiles` and inline `values`), learn scopes from discovery, normalise
//! for the destination (`core::desired::normalise`), list the live inventory and observe each
//! object with a server-side dry run, all as the Application's service account (impersonation,
//! `apply::clients::ImpersonatedClients`, under the Application's field manager), then
//! `core::plan::plan` with the prune selection. The plan is printed as `ksync plan` prints a
//! Revision's: field paths only, never values, and redacted. Nothing is written.
//!
//! Exit codes with `--exit-code`: 0 when the plan changes nothing, 1 when it creates, updates or
//! deletes something (and on a failure, as everywhere). Without it, 0 whenever the diff ran.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kuvryn_sync_api::{ConflictPolicy, RenderType};
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
use crate::render::{self, LocalChart};

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

/// Render DIR with the Application's render settings.
fn render_working_copy(
    app: &kuvryn_sync_api::Application,
    root: &std::path::Path,
    args: &DiffArgs,
) -> Result<Vec<Rendered>> {
    let spec = &app.spec.source.render;
    match spec.render_type {
        RenderType::Yaml | RenderType::Kustomize => render::source(root, spec.render_type),
        RenderType::Helm => {
            let helm = spec.helm.clone().unwrap_or_default();
            if helm.chart.is_some() || !helm.values_from.is_empty() {
                bail!(
                    "diff renders a chart in the working copy with valuesFiles and values; \
                     Application {} uses spec.source.render.helm.chart or valuesFrom, which \
                     `ksync diff` does not read",
                    args.app
                );
            }
            let chart = LocalChart {
                values_files: &helm.values_files,
                inline_values: helm.values.as_ref(),
                release_name: &helm.release_name,
                namespace: &app.spec.destination.namespace,
            };
            render::helm_chart(root, &chart, args.helm_library.as_ref())
        }
    }
}
