//! The engines the reconcilers share, from the flags: the registry client, the render helpers'
//! sandbox, kustomize, the Helm engine and chart pulls.

use std::sync::Arc;

use anyhow::Context;
use kuvryn_sync_runtime::metrics::ControllerMetrics;

use crate::args::Args;
use crate::render;

/// The registry client every ImagePolicy scan shares: the system roots plus `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` (how the chart mounts a private registry CA) plus `--registry-ca-file`.
pub(crate) fn registry_client(
    args: &Args,
) -> anyhow::Result<Arc<kuvryn_sync_source::registry::RegistryClient>> {
    let options = kuvryn_sync_source::registry::RegistryOptions {
        extra_ca_file: args.registry_ca_file.clone(),
        ..Default::default()
    };
    let client = kuvryn_sync_source::registry::RegistryClient::new(options)
        .context("cannot set up the registry client for ImagePolicy scans")?;
    Ok(Arc::new(client))
}

/// The render helpers' sandbox, from the flags.
fn render_sandbox(args: &Args) -> kuvryn_sync_render::sandbox::Sandbox {
    kuvryn_sync_render::sandbox::Sandbox {
        isolation: args.render_network_isolation,
        limits: kuvryn_sync_render::sandbox::ResourceLimits {
            max_memory_bytes: args.render_max_memory,
            max_cpu_seconds: args.render_max_cpu_seconds,
            max_file_bytes: args.render_max_file_bytes,
            max_open_files: args.render_max_open_files,
        },
    }
}

/// Empty the render temporary directory (what a crash left: workspaces, decrypted files) and
/// make every render use it; check network isolation once (log when `auto` cannot have it,
/// refuse to start when `required` cannot).
pub(crate) fn prepare_render_sandbox(args: &Args) -> anyhow::Result<()> {
    use kuvryn_sync_render::sandbox::{self, IsolationSupport, NetworkIsolation};
    let temp = args.render_temp_dir.clone().unwrap_or_else(|| args.cache_dir.join("render-tmp"));
    let removed = sandbox::empty_temp_root(&temp)
        .with_context(|| format!("cannot empty --render-temp-dir {}", temp.display()))?;
    if removed > 0 {
        tracing::info!(removed, dir = %temp.display(), "removed render files left by an earlier run");
    }
    let _ = sandbox::use_temp_root(temp);
    let policy = args.render_network_isolation;
    if policy == NetworkIsolation::Required && args.allow_remote_bases {
        anyhow::bail!(
            "--render-network-isolation=required cannot be combined with --allow-remote-bases: \
             kustomize fetches remote bases over the network; drop one of the two flags"
        );
    }
    let program =
        kuvryn_sync_render::kustomize::KustomizeProgram::detect(args.kustomize_binary.clone());
    let probe_args: &[&str] = match program {
        kuvryn_sync_render::kustomize::KustomizeProgram::Kustomize(_) => &["version"],
        kuvryn_sync_render::kustomize::KustomizeProgram::Kubectl(_) => &["version", "--client"],
    };
    match render_sandbox(args).probe(program.path(), probe_args) {
        IsolationSupport::Isolated => {
            tracing::info!(%policy, "render helpers run in their own network namespace");
        }
        IsolationSupport::Disabled => {
            tracing::warn!("--render-network-isolation=off: render helpers can reach the network");
        }
        IsolationSupport::Unavailable(why) if policy == NetworkIsolation::Required => {
            anyhow::bail!(
                "--render-network-isolation=required, but a network namespace cannot be created \
                 here ({why}): give the controller an unprivileged user namespace or \
                 CAP_SYS_ADMIN, or use --render-network-isolation=auto"
            );
        }
        IsolationSupport::Unavailable(why) => {
            tracing::warn!(%why, "render helpers cannot be isolated from the network here; \
                kustomizations are still checked for remote references");
        }
    }
    Ok(())
}

/// The render engines, from the flags.
pub(crate) fn renderers(args: &Args, metrics: &ControllerMetrics) -> render::Renderers {
    let program =
        kuvryn_sync_render::kustomize::KustomizeProgram::detect(args.kustomize_binary.clone());
    let mut kustomize = kuvryn_sync_render::kustomize::Kustomize::new(program);
    kustomize.timeout = args.render_timeout;
    kustomize.allow_remote_bases = args.allow_remote_bases;
    kustomize.sandbox = render_sandbox(args);
    let ca_pem = args.registry_ca_file.as_ref().map(std::fs::read_to_string).transpose();
    let ca_pem = match ca_pem {
        Ok(pem) => pem,
        Err(err) => {
            tracing::warn!(%err, "cannot read --registry-ca-file; chart pulls trust the system CAs only");
            None
        }
    };
    render::Renderers {
        kustomize,
        helm: helm_renderer(args).map_err(|why| {
            tracing::info!(%why, "Helm rendering is unavailable");
            why
        }),
        charts: chart_puller(args, ca_pem),
        cache: Arc::new(kuvryn_sync_render::cache::RenderCache::new(args.render_cache_size)),
        metrics: metrics.clone(),
    }
}

/// The Helm engine in its helper process, or why it cannot run.
fn helm_renderer(args: &Args) -> Result<kuvryn_sync_helm::HelmRenderer, String> {
    let library = args
        .helm_library
        .clone()
        .or_else(|| {
            // An empty variable counts as unset, as for the other tool paths.
            std::env::var_os(kuvryn_sync_helm::LIBHELM_ENV)
                .filter(|path| !path.is_empty())
                .map(Into::into)
        })
        .ok_or_else(|| {
            "render.type helm needs the Helm engine: start the controller with --helm-library \
             (libhelm_c.so from the helm-python-sdk wheel)"
                .to_owned()
        })?;
    let helper = match &args.helm_helper {
        Some(helper) => helper.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find the Helm helper: {e}"))?
            .with_file_name(kuvryn_sync_helm::HELPER_BINARY),
    };
    let mut env =
        kuvryn_sync_helm::RenderEnv { timeout: args.render_timeout, ..Default::default() };
    if let Some(ca) = &args.registry_ca_file {
        env.ssl_cert_file = ca.clone();
    }
    let sandbox = render_sandbox(args);
    kuvryn_sync_helm::HelmRenderer::new(helper, library, env)
        .map(|renderer| renderer.with_command_hook(move |command| sandbox.apply(command)))
        .map_err(|e| e.to_string())
}

/// Chart pulls, cached on disk by digest, or why they cannot run.
fn chart_puller(
    args: &Args,
    ca_pem: Option<String>,
) -> Result<Arc<render::OffRuntime<kuvryn_sync_source::chart::ChartPuller>>, String> {
    let options = kuvryn_sync_source::chart::PullOptions {
        ca_certs_pem: ca_pem,
        timeout: args.git_timeout,
        ..Default::default()
    };
    let dir = args.cache_dir.join("charts");
    render::OffRuntime::make(move || kuvryn_sync_source::chart::ChartPuller::new(dir, options))
        .map(Arc::new)
        .map_err(|e| format!("chart pulls are unavailable: {e}"))
}
