//! `ksync check`: is Kuvryn Sync installed and working in this cluster, and what may the current
//! user do with it. Each check prints one line, `ok`, `warn` or `FAIL`; exit 1 when any fails.
//!
//! - CRDs: every kind this build defines is served (discovery), at the version it defines.
//! - Controller: its leader Lease exists and was renewed within its duration ([`crate::install`]).
//! - Webhook: the Application mutating and the HealthCheck validating webhook configurations are
//!   registered, the Service they call exists, and the CA bundle's certificates are valid now
//!   (warn when one expires within 30 days).
//! - RBAC: a SelfSubjectAccessReview per verb the CLI's commands use; a denied verb is a `warn`
//!   (read-only users are normal), naming the commands it stops.

use anyhow::Result;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, PostParams};
use kube::discovery::pinned_kind;

use crate::Outcome;
use crate::cluster::Cluster;
use crate::install::{self, InstallArgs};
use crate::output::{self, Colour, Style};

/// The Application mutating webhook's name in the chart.
pub const APPLICATION_WEBHOOK: &str = "admit.applications.sync.kuvryn.io";
/// The HealthCheck validating webhook's name in the chart.
pub const HEALTHCHECK_WEBHOOK: &str = "validate.healthchecks.sync.kuvryn.io";
/// A certificate expiring sooner than this is a warning.
const EXPIRY_WARNING_SECONDS: i64 = 30 * 86400;

/// The access the CLI's commands need, as (verb, group, resource, subresource, commands).
pub const ACCESS: &[(&str, &str, &str, &str, &str)] = &[
    ("list", "sync.kuvryn.io", "applications", "", "status"),
    ("watch", "sync.kuvryn.io", "applications", "", "status -w, wait"),
    ("patch", "sync.kuvryn.io", "applications", "", "sync, rollback, suspend, resume"),
    ("list", "sync.kuvryn.io", "revisions", "", "plan, history"),
    ("list", "sync.kuvryn.io", "repositories", "", "get repositories"),
    ("patch", "sync.kuvryn.io", "repositories", "", "sync (automatic)"),
    ("list", "sync.kuvryn.io", "imagepolicies", "", "get imagepolicies"),
    ("list", "events.k8s.io", "events", "", "events"),
    ("get", "", "pods", "log", "logs"),
];

/// `ksync check` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub install: InstallArgs,
}

/// How one check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub area: String,
    pub state: State,
    pub detail: String,
}

fn check(area: &str, state: State, detail: impl Into<String>) -> Check {
    Check { area: area.to_owned(), state, detail: detail.into() }
}

/// The report and whether every check passed (warnings pass).
pub fn report(checks: &[Check], style: Style) -> (String, bool) {
    let width = checks.iter().map(|c| c.area.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let (word, colour) = match c.state {
            State::Ok => ("ok  ", Colour::Green),
            State::Warn => ("warn", Colour::Yellow),
            State::Fail => ("FAIL", Colour::Red),
        };
        out.push_str(&format!(
            "{:<width$}   {}   {}\n",
            c.area,
            style.paint(colour, word),
            c.detail
        ));
    }
    (out, checks.iter().all(|c| c.state != State::Fail))
}

/// The state of a certificate valid from `not_before` to `not_after` (seconds) at `now`.
pub fn certificate_state(not_before: i64, not_after: i64, now: i64) -> (State, String) {
    let until = k8s_openapi::jiff::Timestamp::from_second(not_after)
        .map_or_else(|_| not_after.to_string(), |t| t.to_string());
    if now < not_before {
        (State::Fail, format!("not valid yet (valid until {until})"))
    } else if now >= not_after {
        (State::Fail, format!("expired at {until}"))
    } else if not_after - now < EXPIRY_WARNING_SECONDS {
        (State::Warn, format!("expires soon, at {until}"))
    } else {
        (State::Ok, format!("valid until {until}"))
    }
}

/// The states of the certificates in a PEM `bundle`.
pub fn bundle_state(bundle: &[u8], now: i64) -> (State, String) {
    let mut worst = (State::Fail, "the CA bundle holds no certificate".to_owned());
    let mut found = Vec::new();
    for pem in x509_parser::pem::Pem::iter_from_buffer(bundle) {
        let Ok(pem) = pem else { return (State::Fail, "the CA bundle is not PEM".into()) };
        let Ok(cert) = pem.parse_x509() else {
            return (State::Fail, "the CA bundle holds a certificate that does not parse".into());
        };
        let validity = cert.validity();
        found.push(certificate_state(
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
            now,
        ));
    }
    if let Some(state) = found
        .iter()
        .find(|s| s.0 == State::Fail)
        .or_else(|| found.iter().find(|s| s.0 == State::Warn))
        .or(found.first())
    {
        worst = state.clone();
    }
    worst
}

/// Run `ksync check`.
pub async fn run(cluster: &Cluster, args: &CheckArgs) -> Result<Outcome> {
    let mut checks = crds(&cluster.client).await;
    checks.push(controller(&cluster.client, &args.install.install_namespace).await);
    checks.extend(webhooks(&cluster.client).await);
    checks.extend(access(&cluster.client, &cluster.namespace).await);
    let (text, passed) = report(&checks, Style::for_stdout());
    output::print(&text)?;
    Ok(if passed { Outcome::Done } else { Outcome::NotMet })
}

async fn crds(client: &kube::Client) -> Vec<Check> {
    let mut missing = Vec::new();
    let mut served = Vec::new();
    for crd in kuvryn_sync_api::crds() {
        let version = &crd.spec.versions[0].name;
        let gvk = kube::api::GroupVersionKind::gvk(&crd.spec.group, version, &crd.spec.names.kind);
        match pinned_kind(client, &gvk).await {
            Ok(_) => served.push(crd.spec.names.plural.clone()),
            Err(_) => {
                missing.push(format!("{}.{}/{version}", crd.spec.names.plural, crd.spec.group))
            }
        }
    }
    if missing.is_empty() {
        vec![check(
            "CRDs",
            State::Ok,
            format!("{} kinds served: {}", served.len(), served.join(", ")),
        )]
    } else {
        vec![check(
            "CRDs",
            State::Fail,
            format!(
                "not served: {}; install the chart's crds/ (`ksync crds | kubectl apply -f -`)",
                missing.join(", ")
            ),
        )]
    }
}

async fn controller(client: &kube::Client, namespace: &str) -> Check {
    match install::leader(client, namespace).await {
        Ok(Some(l)) if l.current => check(
            "controller",
            State::Ok,
            format!(
                "leader {} (version {}), Lease renewed {}s ago",
                l.holder.as_deref().unwrap_or("-"),
                l.version.as_deref().unwrap_or("unknown"),
                l.renewed_seconds_ago.unwrap_or_default()
            ),
        ),
        Ok(Some(l)) => check(
            "controller",
            State::Fail,
            format!(
                "the leader Lease in {namespace} was last renewed {} ago by {}: no controller is \
                 running; check the controller's Pods and logs",
                l.renewed_seconds_ago.map_or_else(|| "never".into(), |s| format!("{s}s")),
                l.holder.as_deref().unwrap_or("nobody")
            ),
        ),
        Ok(None) => check(
            "controller",
            State::Fail,
            format!(
                "no leader Lease in namespace {namespace}: the controller has never run there (wrong --install-namespace?)"
            ),
        ),
        Err(err) => {
            check("controller", State::Fail, format!("cannot read the leader Lease: {err}"))
        }
    }
}

async fn webhooks(client: &kube::Client) -> Vec<Check> {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut found: Vec<(String, WebhookClientConfig)> = Vec::new();
    let mut checks = Vec::new();
    match mutating.list(&ListParams::default()).await {
        Ok(list) => found.extend(
            list.items
                .into_iter()
                .flat_map(|c| c.webhooks.unwrap_or_default())
                .filter(|w| w.name == APPLICATION_WEBHOOK)
                .map(|w| (w.name, w.client_config)),
        ),
        Err(err) => checks.push(check(
            "webhook",
            State::Fail,
            format!("cannot list MutatingWebhookConfigurations: {err}"),
        )),
    }
    match validating.list(&ListParams::default()).await {
        Ok(list) => found.extend(
            list.items
                .into_iter()
                .flat_map(|c| c.webhooks.unwrap_or_default())
                .filter(|w| w.name == HEALTHCHECK_WEBHOOK)
                .map(|w| (w.name, w.client_config)),
        ),
        Err(err) => checks.push(check(
            "webhook",
            State::Fail,
            format!("cannot list ValidatingWebhookConfigurations: {err}"),
        )),
    }
    for wanted in [APPLICATION_WEBHOOK, HEALTHCHECK_WEBHOOK] {
        if !found.iter().any(|(name, _)| name == wanted) {
            checks.push(check("webhook", State::Fail, format!("{wanted} is not registered: approvals and rollbacks are not recorded; install the chart's webhook")));
        }
    }
    for (name, config) in found {
        let (state, cert) = match &config.ca_bundle {
            Some(bundle) => bundle_state(&bundle.0, now),
            None => (State::Warn, "no caBundle: the API server must trust the serving certificate by its system roots".to_owned()),
        };
        let target = match (&config.service, &config.url) {
            (Some(s), _) => {
                let services: Api<Service> = Api::namespaced(client.clone(), &s.namespace);
                match services.get_opt(&s.name).await {
                    Ok(Some(_)) => format!("Service {}/{}", s.namespace, s.name),
                    _ => {
                        checks.push(check(
                            "webhook",
                            State::Fail,
                            format!("{name}: Service {}/{} not found", s.namespace, s.name),
                        ));
                        continue;
                    }
                }
            }
            (None, Some(url)) => url.clone(),
            (None, None) => "no target".to_owned(),
        };
        checks.push(check("webhook", state, format!("{name} -> {target}; certificate {cert}")));
    }
    checks
}

async fn access(client: &kube::Client, namespace: &str) -> Vec<Check> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut allowed = Vec::new();
    let mut checks = Vec::new();
    for (verb, group, resource, subresource, commands) in ACCESS {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(namespace.to_owned()),
                    verb: Some((*verb).to_owned()),
                    group: Some((*group).to_owned()),
                    resource: Some((*resource).to_owned()),
                    subresource: (!subresource.is_empty()).then(|| (*subresource).to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let what = if subresource.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{subresource}")
        };
        match reviews.create(&PostParams::default(), &review).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => allowed.push(what),
            Ok(_) => checks.push(check(
                "rbac",
                State::Warn,
                format!("may not {what} in {namespace}: `ksync {commands}` will be refused"),
            )),
            Err(err) => checks.push(check(
                "rbac",
                State::Fail,
                format!("cannot ask whether you may {what}: {err}"),
            )),
        }
    }
    checks.insert(
        0,
        check(
            "rbac",
            State::Ok,
            format!(
                "in {namespace} you may {}",
                if allowed.is_empty() {
                    "nothing the CLI needs".to_owned()
                } else {
                    allowed.join(", ")
                }
            ),
        ),
    );
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificates_are_failed_expired_or_early_warned_within_30_days_and_ok_otherwise() {
        let day = 86400;
        assert_eq!(certificate_state(0, 100 * day, 50 * day).0, State::Ok);
        assert_eq!(certificate_state(0, 100 * day, 80 * day).0, State::Warn);
        assert_eq!(certificate_state(0, 100 * day, 100 * day).0, State::Fail);
        assert_eq!(certificate_state(10 * day, 100 * day, day).0, State::Fail);
    }

    #[test]
    fn a_generated_bundle_is_valid_and_garbage_fails() {
        let request = kuvryn_sync_certs::CertRequest {
            dns_names: vec!["x".into()],
            ip_addresses: vec![],
            validity_days: 365,
        };
        let certs = kuvryn_sync_certs::generate(&request).expect("certs");
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        assert_eq!(bundle_state(certs.ca_cert_pem.as_bytes(), now).0, State::Ok);
        assert_eq!(bundle_state(certs.ca_cert_pem.as_bytes(), now + 400 * 86400).0, State::Fail);
        assert_eq!(bundle_state(b"junk", now).0, State::Fail);
    }

    #[test]
    fn the_report_fails_only_on_a_failure() {
        let style = Style { colour: false };
        let (text, ok) = report(
            &[check("CRDs", State::Ok, "5 kinds"), check("rbac", State::Warn, "may not patch")],
            style,
        );
        assert!(ok);
        assert_eq!(text, "CRDs   ok     5 kinds\nrbac   warn   may not patch\n");
        assert!(!report(&[check("webhook", State::Fail, "x")], style).1);
    }
}
