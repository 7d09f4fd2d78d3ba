//! `spec.dependsOn`: whether an Application's dependencies let it be planned now, the
//! `DependenciesReady` condition that reports it, and which Applications to look at again when
//! one changes. Pure: the caller reads the Applications of the namespace and passes them in.
//!
//! Rules:
//! - A dependency is ready when it exists in the Application's namespace, its status is for its
//!   current spec (`status.observedGeneration` is not behind `metadata.generation`), its
//!   `status.health.state` is Healthy, its `Ready` condition is True, and its
//!   `status.deployedRevision` equals its `status.desiredRevision`: Healthy *at* its desired
//!   revision.
//! - A dependency held by a rollback is not at its desired revision (ruling 6): it has the
//!   `sync.kuvryn.io/rollback-from` annotation, or `Ready=False/RolledBack`. The message says it
//!   is held. A dependency that does not exist is not ready, and the message says so.
//! - Cycles follow `dependsOn` edges between the Applications of the namespace. An Application on
//!   a cycle gets [`Verdict::Cycle`], the shortest cycle through it, in order, starting and
//!   ending at its own name (`a -> b -> c -> a`; a self-dependency is `a -> a`). An Application
//!   that is not on a cycle but reaches one through a dependency is [`Verdict::NotReady`], and the
//!   message names that dependency and the cycle: nothing behind a cycle can ever settle, so a
//!   cycle anywhere downstream holds it back, whatever the dependency's own status says.
//! - Each dependency is reported with the first reason that applies, in this order: missing,
//!   cycle, held, status not current, health, `Ready`, revision. The message names the first
//!   [`MAX_NAMED`] unready dependencies, in `spec.dependsOn` order, counts the rest, and is at
//!   most [`MAX_MESSAGE`] characters. A name listed twice in `spec.dependsOn` counts once.
//! - `DependenciesReady` is present only with `spec.dependsOn`: `True/DependenciesHealthy`,
//!   `False/DependencyNotReady` or `False/DependencyCycle`; [`condition`] returns `None` without
//!   `spec.dependsOn`, and the caller removes the condition then.
//! - [`dependents`] are the Applications whose `spec.dependsOn` names the changed one directly;
//!   a change further down reaches them through the status writes of the ones in between.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use kuvryn_sync_api::{
    Application, ConditionReason, ConditionType, Diagnosis, HealthState, ResourceRef, keys,
};

use crate::conditions::{self, NewCondition, Status};
use crate::redact;

/// Longest `DependenciesReady` message we write.
pub const MAX_MESSAGE: usize = 1024;

/// Most dependencies a message names one by one; the rest are counted.
pub const MAX_NAMED: usize = 5;

/// Characters of a commit shown in messages (as `status.deployedRevisionShort`).
const SHORT_COMMIT: usize = 12;

/// Whether `spec.dependsOn` lets an Application be planned now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every dependency is Healthy at its desired revision (or there are none).
    Ready,
    /// At least one dependency is not ready; `message` names them and says why.
    NotReady { message: String },
    /// The Application is on a dependency cycle: the names in cycle order, the first and last
    /// being the Application itself.
    Cycle { cycle: Vec<String> },
}

impl Verdict {
    /// Whether the Application may be planned and applied.
    pub fn is_ready(&self) -> bool {
        matches!(self, Verdict::Ready)
    }
}

/// Decide whether `app` may be planned now, given the Applications of its namespace as read from
/// the API (`app` itself may be among them; the `app` passed in wins over a copy in the list, and
/// Applications of another namespace are ignored).
pub fn check(app: &Application, namespace_apps: &[Application]) -> Verdict {
    let graph = Graph::new(app, namespace_apps);
    let own = graph.deps(name_of(app));
    if own.is_empty() {
        return Verdict::Ready;
    }
    if let Some(cycle) = graph.cycle_through(name_of(app)) {
        return Verdict::Cycle { cycle };
    }
    let mut clean = BTreeSet::new();
    let unready: Vec<String> = own
        .iter()
        .filter_map(|&dep| graph.blocker(dep, &mut clean).map(|b| b.describe(dep)))
        .collect();
    if unready.is_empty() {
        return Verdict::Ready;
    }
    let message = format!(
        "waiting for {} of {}: {}",
        unready.len(),
        count(own.len(), "dependency", "dependencies"),
        named(&unready, "; ")
    );
    Verdict::NotReady { message: bound(&message) }
}

/// Why `app` waits, as root causes for `status.diagnosis`: for each dependency that holds it
/// back, that Application's own diagnosis with the dependency prepended to each chain, or, when it
/// has none, the dependency itself (`DependencyNotReady`, with what `check` says of it). At most
/// 10 entries, chains at most 10 long (the root kept).
pub fn diagnosis(app: &Application, namespace_apps: &[Application]) -> Vec<Diagnosis> {
    let graph = Graph::new(app, namespace_apps);
    let mut clean = BTreeSet::new();
    let mut out: Vec<Diagnosis> = Vec::new();
    for &dep in graph.deps(name_of(app)) {
        let Some(blocker) = graph.blocker(dep, &mut clean) else { continue };
        let reference = ResourceRef {
            api_version: format!("{}/{}", kuvryn_sync_api::GROUP, kuvryn_sync_api::VERSION),
            kind: "Application".to_owned(),
            namespace: app.metadata.namespace.clone().unwrap_or_default(),
            name: dep.to_owned(),
        };
        let theirs = graph
            .apps
            .get(dep)
            .and_then(|a| a.status.as_ref())
            .map(|s| s.diagnosis.clone())
            .unwrap_or_default();
        if theirs.is_empty() {
            out.push(Diagnosis {
                resource: reference.clone(),
                reason: ConditionReason::DependencyNotReady.as_str().to_owned(),
                message: bound(&blocker.describe(dep)),
                chain: vec![reference],
            });
            continue;
        }
        for mut cause in theirs {
            cause.chain.insert(0, reference.clone());
            if cause.chain.len() > MAX_CHAIN {
                let tail = cause.chain.split_off(cause.chain.len() - (MAX_CHAIN - 1));
                cause.chain.truncate(1);
                cause.chain.extend(tail);
            }
            out.push(cause);
        }
    }
    out.truncate(MAX_CAUSES);
    out
}

const MAX_CAUSES: usize = 10;
const MAX_CHAIN: usize = 10;

/// The `DependenciesReady` condition of `app` for `verdict`, or `None` when `spec.dependsOn` is
/// empty (the condition is absent then: remove it).
pub fn condition(app: &Application, verdict: &Verdict) -> Option<NewCondition<'static>> {
    let own = unique_names(app);
    if own.is_empty() {
        return None;
    }
    let (status, reason, message) = match verdict {
        Verdict::Ready => {
            let message = if own.len() == 1 {
                format!("dependency {} is Healthy at its desired revision", named(&own, ""))
            } else {
                format!(
                    "all {} dependencies are Healthy at their desired revision: {}",
                    own.len(),
                    named(&own, ", ")
                )
            };
            (Status::True, ConditionReason::DependenciesHealthy, message)
        }
        Verdict::NotReady { message } => {
            (Status::False, ConditionReason::DependencyNotReady, message.clone())
        }
        Verdict::Cycle { cycle } => (
            Status::False,
            ConditionReason::DependencyCycle,
            format!("dependency cycle: {}", cycle.join(" -> ")),
        ),
    };
    Some(NewCondition {
        type_: ConditionType::DependenciesReady,
        status,
        reason: reason.as_str(),
        message: bound(&message),
        observed_generation: app.metadata.generation,
    })
}

/// Names of the Applications of the namespace whose `spec.dependsOn` names `changed`, sorted:
/// the ones to reconcile when `changed` changes (or goes). `changed` itself is not listed, even
/// when it depends on itself.
pub fn dependents(changed: &Application, namespace_apps: &[Application]) -> Vec<String> {
    let name = name_of(changed);
    let found: BTreeSet<&str> = namespace_apps
        .iter()
        .filter(|a| same_namespace(changed, a) && name_of(a) != name)
        .filter(|a| a.spec.depends_on.iter().any(|d| d.name == name))
        .map(name_of)
        .collect();
    found.into_iter().map(str::to_owned).collect()
}

/// Why one dependency holds its dependent back.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Blocker {
    Missing,
    /// The dependency is on this cycle (starting and ending at it).
    OnCycle(Vec<String>),
    /// The dependency reaches this cycle without being on it.
    BehindCycle(Vec<String>),
    /// Held by a rollback, from this commit when the annotation names one.
    Held(Option<String>),
    /// Its status was computed for an older generation.
    Stale {
        generation: i64,
        observed: i64,
    },
    NoStatus,
    Health(HealthState),
    NoReadyCondition,
    ReadyNotTrue {
        status: String,
        reason: String,
    },
    NoDesiredRevision,
    NotDeployed {
        desired: String,
    },
    OldRevision {
        deployed: String,
        desired: String,
    },
}

impl Blocker {
    /// One clause of the message, naming the dependency.
    fn describe(&self, name: &str) -> String {
        match self {
            Blocker::Missing => format!("{name} does not exist"),
            Blocker::OnCycle(cycle) => {
                format!("{name} is on the dependency cycle {}", cycle.join(" -> "))
            }
            Blocker::BehindCycle(cycle) => {
                format!("{name} depends on the dependency cycle {}", cycle.join(" -> "))
            }
            Blocker::Held(Some(from)) => {
                format!("{name} is held by a rollback from {}", short(from))
            }
            Blocker::Held(None) => format!("{name} is held by a rollback"),
            Blocker::Stale { generation, observed } => format!(
                "{name} has not processed generation {generation} yet (status is for {observed})"
            ),
            Blocker::NoStatus => format!("{name} has no status yet"),
            Blocker::Health(state) => format!("{name} is {state}, not Healthy"),
            Blocker::NoReadyCondition => format!("{name} has no Ready condition yet"),
            Blocker::ReadyNotTrue { status, reason } => {
                format!("{name} is Ready={status} ({reason})")
            }
            Blocker::NoDesiredRevision => format!("{name} has no desired revision yet"),
            Blocker::NotDeployed { desired } => {
                format!("{name} has not deployed its desired revision {} yet", short(desired))
            }
            Blocker::OldRevision { deployed, desired } => format!(
                "{name} runs {}, not its desired revision {}",
                short(deployed),
                short(desired)
            ),
        }
    }
}

/// Why `dep`'s own status keeps it from being ready, if it does.
fn status_blocker(dep: &Application) -> Option<Blocker> {
    let from = dep.metadata.annotations.as_ref().and_then(|a| a.get(keys::ROLLBACK_FROM));
    let ready =
        dep.status.as_ref().and_then(|s| conditions::get(&s.conditions, ConditionType::Ready));
    let rolled_back = ready.is_some_and(|c| {
        c.status == Status::False.as_str() && c.reason == ConditionReason::RolledBack.as_str()
    });
    if from.is_some() || rolled_back {
        return Some(Blocker::Held(from.filter(|f| !f.is_empty()).cloned()));
    }
    let Some(status) = dep.status.as_ref() else {
        return Some(Blocker::NoStatus);
    };
    if let (Some(generation), Some(observed)) =
        (dep.metadata.generation, status.observed_generation)
        && observed < generation
    {
        return Some(Blocker::Stale { generation, observed });
    }
    if status.health.state != HealthState::Healthy {
        return Some(Blocker::Health(status.health.state));
    }
    match ready {
        None => return Some(Blocker::NoReadyCondition),
        Some(c) if c.status != Status::True.as_str() => {
            return Some(Blocker::ReadyNotTrue {
                status: c.status.clone(),
                reason: c.reason.clone(),
            });
        }
        Some(_) => {}
    }
    match (&status.deployed_revision, &status.desired_revision) {
        (_, None) => Some(Blocker::NoDesiredRevision),
        (None, Some(desired)) => Some(Blocker::NotDeployed { desired: desired.clone() }),
        (Some(deployed), Some(desired)) if deployed != desired => {
            Some(Blocker::OldRevision { deployed: deployed.clone(), desired: desired.clone() })
        }
        (Some(_), Some(_)) => None,
    }
}

/// The `dependsOn` edges between the Applications of one namespace.
struct Graph<'a> {
    apps: BTreeMap<&'a str, &'a Application>,
    /// Each Application's dependencies, in `spec.dependsOn` order, each name once.
    edges: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> Graph<'a> {
    fn new(app: &'a Application, namespace_apps: &'a [Application]) -> Graph<'a> {
        let mut apps = BTreeMap::new();
        for other in namespace_apps.iter().filter(|a| same_namespace(app, a)) {
            apps.entry(name_of(other)).or_insert(other);
        }
        apps.insert(name_of(app), app);
        let edges = apps.iter().map(|(name, a)| (*name, unique_deps(a))).collect();
        Graph { apps, edges }
    }

    fn deps(&self, name: &str) -> &[&'a str] {
        self.edges.get(name).map(Vec::as_slice).unwrap_or_default()
    }

    /// Why the dependency `name` is not ready, if it is not. `clean` remembers the Applications
    /// from which no cycle can be reached, across the calls of one check.
    fn blocker(&self, name: &'a str, clean: &mut BTreeSet<&'a str>) -> Option<Blocker> {
        let Some(dep) = self.apps.get(name) else {
            return Some(Blocker::Missing);
        };
        if let Some(reached) = self.cycle_from(name, clean) {
            return Some(match self.cycle_through(name) {
                Some(own) => Blocker::OnCycle(own),
                None => Blocker::BehindCycle(reached),
            });
        }
        status_blocker(dep)
    }

    /// The shortest cycle through `start` (breadth first, edges in `dependsOn` order), starting
    /// and ending at `start`.
    fn cycle_through(&self, start: &'a str) -> Option<Vec<String>> {
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut seen = BTreeSet::from([start]);
        let mut queue = VecDeque::from([start]);
        while let Some(node) = queue.pop_front() {
            for &next in self.deps(node) {
                if next == start {
                    let mut path = vec![node];
                    let mut at = node;
                    while let Some(&up) = parent.get(at) {
                        path.push(up);
                        at = up;
                    }
                    path.reverse();
                    path.push(start);
                    return Some(path.into_iter().map(str::to_owned).collect());
                }
                if seen.insert(next) {
                    parent.insert(next, node);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    /// Some cycle reachable from `start` (depth first), starting and ending at the first
    /// Application of it that the search met again; `None` marks everything searched clean.
    fn cycle_from(&self, start: &'a str, clean: &mut BTreeSet<&'a str>) -> Option<Vec<String>> {
        if clean.contains(start) {
            return None;
        }
        // Each entry: an Application on the current path and the index of its next edge.
        let mut path: Vec<(&'a str, usize)> = vec![(start, 0)];
        let mut on_path: BTreeMap<&'a str, usize> = BTreeMap::from([(start, 0)]);
        while let Some(top) = path.last_mut() {
            let (node, edge) = *top;
            top.1 += 1;
            let Some(&next) = self.deps(node).get(edge) else {
                on_path.remove(node);
                clean.insert(node);
                path.pop();
                continue;
            };
            if let Some(&at) = on_path.get(next) {
                let mut cycle: Vec<String> =
                    path[at..].iter().map(|(n, _)| (*n).to_owned()).collect();
                cycle.push(next.to_owned());
                return Some(cycle);
            }
            if !clean.contains(next) {
                on_path.insert(next, path.len());
                path.push((next, 0));
            }
        }
        None
    }
}

fn name_of(app: &Application) -> &str {
    app.metadata.name.as_deref().unwrap_or_default()
}

/// Whether two Applications share a namespace (an unknown namespace matches any).
fn same_namespace(a: &Application, b: &Application) -> bool {
    match (&a.metadata.namespace, &b.metadata.namespace) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// `spec.dependsOn` names in order, each once.
fn unique_deps(app: &Application) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    app.spec.depends_on.iter().map(|d| d.name.as_str()).filter(|n| seen.insert(*n)).collect()
}

fn unique_names(app: &Application) -> Vec<String> {
    unique_deps(app).into_iter().map(str::to_owned).collect()
}

/// The first [`MAX_NAMED`] items joined by `separator`, then how many more there are.
fn named(items: &[String], separator: &str) -> String {
    let mut text = items.iter().take(MAX_NAMED).cloned().collect::<Vec<_>>().join(separator);
    if items.len() > MAX_NAMED {
        text.push_str(&format!("{separator}and {} more", items.len() - MAX_NAMED));
    }
    text
}

fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn short(commit: &str) -> String {
    commit.chars().take(SHORT_COMMIT).collect()
}

/// Mask secret shapes (annotation values are user input) and cap the length.
fn bound(message: &str) -> String {
    redact::truncate(&redact::redact_shapes(message), MAX_MESSAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use kuvryn_sync_api::{ApplicationSpec, ApplicationStatus, FailureReason};

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";
    const NS: &str = "team";

    fn app(name: &str, deps: &[&str]) -> Application {
        let spec: ApplicationSpec = serde_json::from_value(serde_json::json!({
            "source": {"repositoryRef": {"name": "platform"}, "path": name, "render": {"type": "yaml"}},
            "destination": {"namespace": name},
            "dependsOn": deps.iter().map(|d| serde_json::json!({"name": d})).collect::<Vec<_>>(),
        }))
        .expect("spec");
        let mut app = Application::new(name, spec);
        app.metadata.namespace = Some(NS.into());
        app.metadata.generation = Some(2);
        app
    }

    fn set_ready(status: &mut ApplicationStatus, value: Status, reason: &'static str) {
        let now = Time(Timestamp::from_second(100).expect("timestamp"));
        let ready = NewCondition {
            type_: ConditionType::Ready,
            status: value,
            reason,
            message: String::new(),
            observed_generation: Some(2),
        };
        conditions::set(&mut status.conditions, ready, &now);
    }

    /// `app` Healthy at its desired revision `C1`, with `Ready=True`.
    fn healthy(name: &str, deps: &[&str]) -> Application {
        let mut a = app(name, deps);
        let mut status = ApplicationStatus {
            desired_revision: Some(C1.into()),
            deployed_revision: Some(C1.into()),
            observed_generation: Some(2),
            ..ApplicationStatus::default()
        };
        status.state = HealthState::Healthy;
        status.health.state = HealthState::Healthy;
        set_ready(&mut status, Status::True, ConditionReason::Healthy.as_str());
        a.status = Some(status);
        a
    }

    fn with(mut a: Application, change: impl FnOnce(&mut Application)) -> Application {
        change(&mut a);
        a
    }

    fn status(a: &mut Application) -> &mut ApplicationStatus {
        a.status.as_mut().expect("status")
    }

    fn held_by_annotation(a: &mut Application) {
        a.metadata.annotations = Some([(keys::ROLLBACK_FROM.to_owned(), C2.to_owned())].into());
    }

    fn held_by_condition(a: &mut Application) {
        let s = status(a);
        s.desired_revision = Some(C2.into());
        set_ready(s, Status::False, ConditionReason::RolledBack.as_str());
    }

    fn not_ready(message: &str) -> Verdict {
        Verdict::NotReady { message: message.to_owned() }
    }

    fn cycle(names: &[&str]) -> Verdict {
        Verdict::Cycle { cycle: names.iter().map(|n| (*n).to_owned()).collect() }
    }

    #[test]
    fn a_waiting_application_is_diagnosed_with_its_dependencies_root_causes() {
        let secret = ResourceRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: NS.into(),
            name: "db".into(),
        };
        let cause = Diagnosis {
            resource: secret.clone(),
            reason: "MissingSecret".into(),
            message: "Secret team/db does not exist".into(),
            chain: vec![secret.clone()],
        };
        let degraded = with(healthy("db", &[]), |a| {
            let s = status(a);
            s.state = HealthState::Degraded;
            s.health.state = HealthState::Degraded;
            set_ready(s, Status::False, ConditionReason::Degraded.as_str());
            s.diagnosis = vec![cause.clone()];
        });
        let web = app("web", &["db", "cache", "ok"]);
        let all = [web.clone(), degraded, healthy("ok", &[])];
        let found = diagnosis(&web, &all);
        let application = |name: &str| ResourceRef {
            api_version: "sync.kuvryn.io/v1alpha1".into(),
            kind: "Application".into(),
            namespace: NS.into(),
            name: name.into(),
        };
        // db's own cause, reached through db; cache does not exist; ok holds nothing back.
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].reason, "MissingSecret");
        assert_eq!(found[0].chain, vec![application("db"), secret]);
        assert_eq!(found[1].reason, "DependencyNotReady");
        assert_eq!(found[1].resource, application("cache"));
        assert_eq!(found[1].message, "cache does not exist");
        // Nothing holds a ready Application back.
        let ready = app("front", &["ok"]);
        assert!(diagnosis(&ready, &[ready.clone(), healthy("ok", &[])]).is_empty());
    }

    #[test]
    fn verdicts() {
        // (case, the Application checked, the other Applications of the namespace, verdict)
        let cases: Vec<(&str, Application, Vec<Application>, Verdict)> = vec![
            ("no dependsOn", app("web", &[]), vec![], Verdict::Ready),
            (
                "ready",
                app("web", &["db", "cache"]),
                vec![healthy("db", &[]), healthy("cache", &[])],
                Verdict::Ready,
            ),
            (
                "a dependency that is itself waiting but runs Healthy at its desired revision",
                app("web", &["api"]),
                vec![healthy("api", &["db"])],
                Verdict::Ready,
            ),
            (
                "missing",
                app("web", &["db"]),
                vec![],
                not_ready("waiting for 1 of 1 dependency: db does not exist"),
            ),
            (
                "unhealthy",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), |a| status(a).health.state = HealthState::Degraded)],
                not_ready("waiting for 1 of 1 dependency: db is Degraded, not Healthy"),
            ),
            (
                "Ready not True",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), |a| {
                    set_ready(status(a), Status::False, FailureReason::HealthFailure.as_str())
                })],
                not_ready("waiting for 1 of 1 dependency: db is Ready=False (HealthFailure)"),
            ),
            (
                "healthy at an old revision",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), |a| status(a).desired_revision = Some(C2.into()))],
                not_ready(
                    "waiting for 1 of 1 dependency: db runs 111111111111, not its desired \
                     revision 222222222222",
                ),
            ),
            (
                "nothing deployed yet",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), |a| status(a).deployed_revision = None)],
                not_ready(
                    "waiting for 1 of 1 dependency: db has not deployed its desired revision \
                     111111111111 yet",
                ),
            ),
            (
                "no status",
                app("web", &["db"]),
                vec![app("db", &[])],
                not_ready("waiting for 1 of 1 dependency: db has no status yet"),
            ),
            (
                "status for an older generation",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), |a| a.metadata.generation = Some(3))],
                not_ready(
                    "waiting for 1 of 1 dependency: db has not processed generation 3 yet \
                     (status is for 2)",
                ),
            ),
            (
                "held by the rollback-from annotation",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), held_by_annotation)],
                not_ready(
                    "waiting for 1 of 1 dependency: db is held by a rollback from 222222222222",
                ),
            ),
            (
                "held by Ready=False/RolledBack",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), held_by_condition)],
                not_ready("waiting for 1 of 1 dependency: db is held by a rollback"),
            ),
            (
                "several, in dependsOn order, each named once",
                app("web", &["queue", "db", "cache", "db"]),
                vec![healthy("cache", &[]), with(healthy("queue", &[]), held_by_annotation)],
                not_ready(
                    "waiting for 2 of 3 dependencies: queue is held by a rollback from \
                     222222222222; db does not exist",
                ),
            ),
            ("self-dependency", app("a", &["a"]), vec![], cycle(&["a", "a"])),
            (
                "two-node cycle",
                app("a", &["b"]),
                vec![healthy("b", &["a"])],
                cycle(&["a", "b", "a"]),
            ),
            (
                "three-node cycle",
                app("a", &["b"]),
                vec![healthy("b", &["c"]), healthy("c", &["a"])],
                cycle(&["a", "b", "c", "a"]),
            ),
            (
                "the shortest cycle through the Application",
                app("a", &["x", "b"]),
                vec![
                    healthy("x", &["y"]),
                    healthy("y", &["a"]),
                    healthy("b", &["a"]),
                    healthy("c", &[]),
                ],
                cycle(&["a", "b", "a"]),
            ),
            (
                "the Application's own spec wins over its copy in the list",
                app("a", &["b"]),
                vec![healthy("b", &[]), app("a", &["a"])],
                Verdict::Ready,
            ),
            (
                "depends on a member of a cycle",
                app("web", &["b"]),
                vec![healthy("b", &["c"]), healthy("c", &["b"])],
                not_ready(
                    "waiting for 1 of 1 dependency: b is on the dependency cycle b -> c -> b",
                ),
            ),
            (
                "depends on a cycle further down",
                app("web", &["api"]),
                vec![healthy("api", &["b"]), healthy("b", &["c"]), healthy("c", &["b"])],
                not_ready(
                    "waiting for 1 of 1 dependency: api depends on the dependency cycle \
                     b -> c -> b",
                ),
            ),
            (
                "depends on a self-dependent Application",
                app("web", &["db"]),
                vec![healthy("db", &["db"])],
                not_ready("waiting for 1 of 1 dependency: db is on the dependency cycle db -> db"),
            ),
            (
                "another namespace's Application does not count",
                app("web", &["db"]),
                vec![with(healthy("db", &[]), |a| a.metadata.namespace = Some("other".into()))],
                not_ready("waiting for 1 of 1 dependency: db does not exist"),
            ),
        ];
        for (case, subject, others, verdict) in cases {
            assert_eq!(check(&subject, &others), verdict, "{case}");
        }
    }

    #[test]
    fn a_long_list_is_named_in_part_and_bounded() {
        let names: Vec<String> =
            (0..64).map(|n| format!("dep-{n:02}-{}", "x".repeat(40))).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let Verdict::NotReady { message } = check(&app("web", &refs), &[]) else {
            panic!("not ready")
        };
        assert!(message.starts_with("waiting for 64 of 64 dependencies: dep-00-"), "{message}");
        assert!(message.ends_with("; and 59 more"), "{message}");
        assert!(!message.contains("dep-05-"), "{message}");
        assert!(message.chars().count() <= MAX_MESSAGE);
    }

    #[test]
    fn a_long_chain_and_a_long_cycle_are_handled() {
        // A chain of 2000 Applications ending in a cycle back to the first: every one is on it.
        let n = 2000;
        let name = |i: usize| format!("app-{i:04}");
        let apps: Vec<Application> =
            (0..n).map(|i| healthy(&name(i), &[&name((i + 1) % n)])).collect();
        let Verdict::Cycle { cycle } = check(&apps[0], &apps) else { panic!("cycle") };
        assert_eq!(cycle.len(), n + 1);
        assert_eq!((cycle[0].as_str(), cycle[n].as_str()), ("app-0000", "app-0000"));
        let reported = condition(&apps[0], &Verdict::Cycle { cycle }).expect("condition");
        assert!(reported.message.chars().count() <= MAX_MESSAGE);
        // Without the closing edge the chain is clean: Ready.
        let mut open = apps.clone();
        open[n - 1].spec.depends_on.clear();
        assert_eq!(check(&open[0], &open), Verdict::Ready);
    }

    #[test]
    fn conditions_for_verdicts() {
        let web = app("web", &["db"]);
        let none = app("web", &[]);
        let two = app("web", &["db", "cache"]);
        // (case, Application, verdict, expected (status, reason, message), or None when absent)
        type Expected = Option<(Status, ConditionReason, &'static str)>;
        let cases: Vec<(&str, &Application, Verdict, Expected)> = vec![
            ("absent without dependsOn", &none, Verdict::Ready, None),
            (
                "True with one dependency",
                &web,
                Verdict::Ready,
                Some((
                    Status::True,
                    ConditionReason::DependenciesHealthy,
                    "dependency db is Healthy at its desired revision",
                )),
            ),
            (
                "True with several",
                &two,
                Verdict::Ready,
                Some((
                    Status::True,
                    ConditionReason::DependenciesHealthy,
                    "all 2 dependencies are Healthy at their desired revision: db, cache",
                )),
            ),
            (
                "False/DependencyNotReady",
                &web,
                not_ready("waiting for 1 of 1 dependency: db does not exist"),
                Some((
                    Status::False,
                    ConditionReason::DependencyNotReady,
                    "waiting for 1 of 1 dependency: db does not exist",
                )),
            ),
            (
                "False/DependencyCycle",
                &web,
                cycle(&["web", "db", "web"]),
                Some((
                    Status::False,
                    ConditionReason::DependencyCycle,
                    "dependency cycle: web -> db -> web",
                )),
            ),
        ];
        for (case, subject, verdict, expected) in cases {
            let got = condition(subject, &verdict);
            let expected = expected.map(|(status, reason, message)| NewCondition {
                type_: ConditionType::DependenciesReady,
                status,
                reason: reason.as_str(),
                message: message.to_owned(),
                observed_generation: Some(2),
            });
            assert_eq!(got, expected, "{case}");
        }
    }

    #[test]
    fn the_verdict_feeds_the_condition() {
        let others = [healthy("b", &["a"])];
        let a = app("a", &["b"]);
        let c = condition(&a, &check(&a, &others)).expect("condition");
        assert_eq!((c.status, c.reason), (Status::False, "DependencyCycle"));
        assert_eq!(c.message, "dependency cycle: a -> b -> a");
    }

    #[test]
    fn dependents_of_a_changed_application() {
        let apps = vec![
            app("web", &["db", "cache"]),
            app("worker", &["db", "db"]),
            app("cache", &[]),
            app("db", &["db"]),
            with(app("elsewhere", &["db"]), |a| a.metadata.namespace = Some("other".into())),
            app("api", &["web"]),
        ];
        // (changed, expected dependents)
        let cases: [(&str, &[&str]); 4] =
            [("db", &["web", "worker"]), ("cache", &["web"]), ("web", &["api"]), ("api", &[])];
        for (changed, expected) in cases {
            let subject = apps
                .iter()
                .find(|a| name_of(a) == changed)
                .cloned()
                .unwrap_or_else(|| app(changed, &[]));
            assert_eq!(dependents(&subject, &apps), expected, "{changed}");
        }
        // A deleted Application still has dependents to wake.
        assert_eq!(dependents(&app("gone", &[]), &[app("web", &["gone"])]), ["web"]);
    }
}
