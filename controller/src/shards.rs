//! Controller shards (docs/sharding.md): what a replica's watches see, and in automatic mode the
//! shard Leases it holds. The decisions (which shard an object is in, which Leases to claim) are
//! `kuvryn_sync_core::shards`; this module reads and writes the Leases and filters the watches.
//!
//! - [`Scope`] is what one start of the reconcilers covers: everything (unsharded), a label
//!   selector (`--shard NAME`, `--shard-unlabelled`: the API server filters, so a shard never
//!   receives another's objects), or a set of hashed shards (`--shards N`: each replica watches
//!   every Application but keeps in its reconcilers' stores only those of the shards it holds,
//!   so the others are never reconciled: `kube::runtime::Controller` skips an object its store
//!   does not hold).
//! - [`ShardClaims`] keeps one Lease per shard (`<controller>-shard-<i>`) and one presence Lease
//!   per replica (`<controller>-replica-<identity>`). Every quarter of the Lease duration it
//!   renews what it holds, counts the live replicas and claims or gives up shards so that each
//!   holds at most ⌈N / live replicas⌉. A shard is reconciled only after its Lease is taken
//!   (the supervisor starts the reconcilers from [`ShardClaims`]' `desired` set), and given up
//!   only after the reconcilers have stopped (the supervisor reports its `running` set). A
//!   replica that cannot renew a Lease of a shard it runs for three quarters of the duration
//!   exits at once: the other replicas may take the shard only once the full duration has
//!   passed, so the two never write at the same time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Resource;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kuvryn_sync_api::keys;
use kuvryn_sync_core::shards::{self as decide, LeaseView};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What one start of the reconcilers covers.
#[derive(Debug, Clone, Default)]
pub enum Scope {
    /// Every object (no sharding).
    #[default]
    All,
    /// The objects matching a label selector (label mode).
    Label(String),
    /// The objects whose hashed shard (of `shards`) is in `held` (automatic mode).
    Hashed { shards: u32, held: Arc<BTreeSet<u32>> },
}

impl Scope {
    /// The watch configuration of the reconciled kinds, and of the stores of what reconciles
    /// read that belongs to a shard (Repositories, Revisions): the selector in label mode.
    pub fn watcher_config(&self) -> watcher::Config {
        match self {
            Scope::Label(selector) => watcher::Config::default().labels(selector),
            Scope::All | Scope::Hashed { .. } => watcher::Config::default(),
        }
    }

    /// Whether the stores of what reconciles read (Repositories, Revisions) hold every object of
    /// their kind: all but label mode, whose stores hold its shard's label only (an Application
    /// moved from another shard may have Revisions labelled for that one).
    pub fn stores_everything(&self) -> bool {
        !matches!(self, Scope::Label(_))
    }

    /// Whether `namespace/name` is in scope; label mode is filtered by the API server already.
    pub fn owns_name(&self, namespace: &str, name: &str) -> bool {
        match self {
            Scope::Hashed { shards, held } => decide::owns(held, *shards, namespace, name),
            Scope::All | Scope::Label(_) => true,
        }
    }

    /// Whether `object` is in scope.
    pub fn owns<K: Resource>(&self, object: &K) -> bool {
        let meta = object.meta();
        self.owns_name(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// A reconciled kind's watch events narrowed to the scope: an object out of scope is never
    /// listed, and one that is updated is removed from the store.
    pub fn narrow<K, S>(&self, events: S) -> impl Stream<Item = S::Item> + Send + use<K, S>
    where
        K: Resource + Send + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
    {
        let scope = self.clone();
        events.filter_map(move |event| {
            let kept = match event {
                Ok(watcher::Event::InitApply(object)) if !scope.owns(&object) => None,
                Ok(watcher::Event::Apply(object)) if !scope.owns(&object) => {
                    Some(Ok(watcher::Event::Delete(object)))
                }
                other => Some(other),
            };
            std::future::ready(kept)
        })
    }
}

/// Automatic sharding's Leases: their namespace and names, this replica's identity, the shard
/// count and the Lease duration.
#[derive(Clone)]
pub struct ShardClaims {
    pub client: kube::Client,
    pub namespace: String,
    /// Lease name prefix (the controller's name).
    pub base: String,
    pub identity: String,
    pub shards: u32,
    pub duration: Duration,
}

/// A running claim loop: the shards to reconcile, where the supervisor reports the shards it
/// runs, and the loop's end.
pub struct Claiming {
    pub desired: watch::Receiver<BTreeSet<u32>>,
    pub running: watch::Sender<BTreeSet<u32>>,
    pub done: tokio::sync::oneshot::Receiver<()>,
}

/// A shard Lease this replica holds: when its last renewal was sent, and the Lease as written.
#[derive(Debug, Clone)]
struct Held {
    renewed: Instant,
    lease: Lease,
}

/// The claim loop's state between rounds.
#[derive(Debug, Default)]
struct ClaimState {
    held: BTreeMap<u32, Held>,
    releasing: BTreeSet<u32>,
    /// When the next Lease held by another replica expires: the next round comes then, if
    /// sooner than the renewal interval, so a failed replica's shards are taken over within
    /// the Lease duration of its last renewal.
    next_expiry: Option<SystemTime>,
}

impl ShardClaims {
    /// Start claiming on a thread and runtime of their own, with a client of their own (made
    /// by `client`), so that a replica busy reconciling cannot starve its Lease renewals nor its
    /// fence. Returns the shards the reconcilers should run (`desired`), the sender on which the
    /// supervisor reports the shards it runs, and a receiver that resolves once the loop has
    /// ended. On `stop` every Lease is released.
    pub fn start(
        client: impl FnOnce() -> Result<Self, kube::Error> + Send + 'static,
        stop: CancellationToken,
    ) -> std::io::Result<Claiming> {
        let (desired_tx, desired) = watch::channel(BTreeSet::new());
        let (running, running_rx) = watch::channel(BTreeSet::new());
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        std::thread::Builder::new().name("shard-leases".into()).spawn(move || {
            runtime.block_on(async move {
                let claims = match client() {
                    Ok(claims) => claims,
                    Err(err) => {
                        tracing::error!(%err, "cannot build the shard Lease client");
                        return;
                    }
                };
                let deadlines = Arc::new(Mutex::new(BTreeMap::new()));
                tokio::spawn(fence(running_rx.clone(), Arc::clone(&deadlines), claims.margin()));
                claims.claim_loop(desired_tx, running_rx, deadlines, stop).await;
            });
            let _ = done_tx.send(());
        })?;
        Ok(Claiming { desired, running, done })
    }

    /// How long until the next round: the renewal interval, or just after the next expiry of
    /// another replica's Lease when that comes sooner.
    fn next_round(&self, state: &ClaimState) -> Duration {
        let until_expiry = state
            .next_expiry
            .and_then(|at| at.duration_since(SystemTime::now()).ok())
            .map(|wait| wait + Duration::from_millis(50));
        until_expiry.map_or(self.margin(), |wait| wait.min(self.margin()))
    }

    /// How often Leases are renewed; also how long before expiry a replica stops.
    fn margin(&self) -> Duration {
        self.duration / 4
    }

    async fn claim_loop(
        self,
        desired: watch::Sender<BTreeSet<u32>>,
        mut running: watch::Receiver<BTreeSet<u32>>,
        deadlines: Arc<Mutex<BTreeMap<u32, Instant>>>,
        stop: CancellationToken,
    ) {
        let mut state = ClaimState::default();
        let mut first = true;
        loop {
            let running_now = running.borrow_and_update().clone();
            if let Err(err) = self.round(&mut state, &running_now, first).await {
                tracing::warn!(%err, "shard Leases: cannot complete a round; retrying");
            }
            first = false;
            let expiries =
                state.held.iter().map(|(shard, held)| (*shard, held.renewed + self.duration));
            *deadlines.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                expiries.collect();
            let wanted: BTreeSet<u32> =
                state.held.keys().filter(|s| !state.releasing.contains(s)).copied().collect();
            desired.send_if_modified(|current| {
                let changed = *current != wanted;
                if changed {
                    tracing::info!(shards = ?wanted, of = self.shards, "shards to reconcile");
                    current.clone_from(&wanted);
                }
                changed
            });
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.next_round(&state)) => {},
                _ = running.changed() => {},
            }
        }
        for (shard, held) in std::mem::take(&mut state.held) {
            if let Err(err) = self.release(shard, held.lease).await {
                tracing::warn!(%err, shard, "cannot release a shard Lease; it expires on its own");
            }
        }
        // Leave at once, so the others' bound rises now and they take the released shards
        // without waiting for this replica's presence to expire.
        if let Err(err) = self.announce(false).await {
            tracing::warn!(%err, "cannot withdraw this replica's presence Lease; it expires");
        }
    }

    /// One round: announce presence, read the Leases, renew, claim, release.
    async fn round(
        &self,
        state: &mut ClaimState,
        running: &BTreeSet<u32>,
        first: bool,
    ) -> Result<(), kube::Error> {
        self.announce(true).await?;
        let (leases, replicas) = self.observe(state).await?;
        self.renew(state, &leases, running).await;
        if first {
            // Let the replicas starting together see each other before anyone claims.
            return Ok(());
        }
        let now = SystemTime::now();
        let views: Vec<Option<LeaseView>> =
            leases.iter().map(|lease| lease.as_ref().map(view)).collect();
        let plan = decide::plan_claims(&views, &self.identity, replicas, now);
        for shard in plan.acquire {
            if let Some(held) = self.acquire(shard, leases[shard as usize].clone()).await {
                tracing::info!(shard, identity = %self.identity, "took shard Lease");
                state.held.insert(shard, held);
            }
        }
        state.releasing.extend(plan.release);
        let stopped: Vec<u32> =
            state.releasing.iter().filter(|s| !running.contains(s)).copied().collect();
        for shard in stopped {
            state.releasing.remove(&shard);
            if let Some(held) = state.held.remove(&shard) {
                tracing::info!(shard, identity = %self.identity, "giving up shard Lease");
                if let Err(err) = self.release(shard, held.lease).await {
                    tracing::warn!(%err, shard, "cannot release a shard Lease; it expires");
                }
            }
        }
        Ok(())
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Renew this replica's presence Lease, or withdraw it (`present` false: no holder) when
    /// the replica stops (server-side apply: only this replica writes it).
    async fn announce(&self, present: bool) -> Result<(), kube::Error> {
        let name = replica_lease_name(&self.base, &self.identity);
        let holder = if present { self.identity.as_str() } else { "" };
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {keys::SHARD_LEASE: "replica"}},
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": self.duration.as_secs(),
                "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
            },
        });
        let params = PatchParams::apply(&format!("{}-shards", self.base)).force();
        self.leases().patch(&name, &params, &Patch::Apply(&lease)).await.map(drop)
    }

    /// The shard Leases by shard (`None`: not created yet) and the live replicas.
    /// Also notes in `state` when the next Lease held by another replica expires.
    async fn observe(
        &self,
        state: &mut ClaimState,
    ) -> Result<(Vec<Option<Lease>>, usize), kube::Error> {
        let list = self.leases().list(&ListParams::default().labels(keys::SHARD_LEASE)).await?;
        let now = SystemTime::now();
        let mut shards = vec![None; self.shards as usize];
        let mut replicas = 0;
        state.next_expiry = list
            .items
            .iter()
            .map(view)
            .filter(|lease| !lease.free_at(now) && lease.holder.as_deref() != Some(&self.identity))
            .filter_map(|lease| lease.renewed.map(|renewed| renewed + lease.duration))
            .min();
        for lease in list.items {
            let kind = lease.metadata.labels.as_ref().and_then(|l| l.get(keys::SHARD_LEASE));
            match kind.map(String::as_str) {
                Some("replica") if !view(&lease).free_at(now) => replicas += 1,
                Some("shard") => {
                    let name = lease.metadata.name.as_deref().unwrap_or_default();
                    let index =
                        (0..self.shards).find(|i| decide::shard_lease_name(&self.base, *i) == name);
                    if let Some(index) = index {
                        shards[index as usize] = Some(lease);
                    }
                }
                _ => {}
            }
        }
        Ok((shards, replicas.max(1)))
    }

    /// Renew every held shard Lease; one found taken or not renewable is dropped (the fence
    /// ends the process first if its reconcilers still run).
    async fn renew(
        &self,
        state: &mut ClaimState,
        leases: &[Option<Lease>],
        running: &BTreeSet<u32>,
    ) {
        let shards: Vec<u32> = state.held.keys().copied().collect();
        for shard in shards {
            let current = leases[shard as usize].as_ref();
            let still_mine = current.is_some_and(|l| {
                l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(&self.identity)
            });
            if !still_mine {
                tracing::error!(shard, "shard Lease taken by another replica");
                state.held.remove(&shard);
                if running.contains(&shard) {
                    lost_shard(shard);
                }
                continue;
            }
            let sent = Instant::now();
            let mut lease = current.cloned().unwrap_or_default();
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
            let name = decide::shard_lease_name(&self.base, shard);
            match self.leases().replace(&name, &PostParams::default(), &lease).await {
                Ok(written) => {
                    state.held.insert(shard, Held { renewed: sent, lease: written });
                }
                Err(err) => tracing::warn!(%err, shard, "cannot renew a shard Lease"),
            }
        }
    }

    /// Take a free shard Lease (create it, or replace the released or expired one at the
    /// version read: a replica that lost the race gets a conflict).
    async fn acquire(&self, shard: u32, current: Option<Lease>) -> Option<Held> {
        let name = decide::shard_lease_name(&self.base, shard);
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let transitions = current
            .as_ref()
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.lease_transitions)
            .unwrap_or(0);
        let spec = LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: i32::try_from(self.duration.as_secs()).ok(),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(transitions + i32::from(current.is_some())),
            ..Default::default()
        };
        let sent = Instant::now();
        let result = match current {
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.leases().replace(&name, &PostParams::default(), &lease).await
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name),
                        labels: Some([(keys::SHARD_LEASE.to_owned(), "shard".to_owned())].into()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.leases().create(&PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(lease) => Some(Held { renewed: sent, lease }),
            Err(kube::Error::Api(status)) if status.code == 409 => None,
            Err(err) => {
                tracing::warn!(%err, shard, "cannot take a shard Lease");
                None
            }
        }
    }

    /// Release a held Lease: no holder, so another replica takes it at once.
    async fn release(&self, shard: u32, mut lease: Lease) -> Result<(), kube::Error> {
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.renew_time = None;
        let name = decide::shard_lease_name(&self.base, shard);
        self.leases().replace(&name, &PostParams::default(), &lease).await.map(drop)
    }
}

/// The presence Lease of replica `identity` (made a valid name).
pub fn replica_lease_name(base: &str, identity: &str) -> String {
    let safe: String = identity
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect();
    format!("{base}-replica-{}", safe.trim_matches('-'))
}

fn view(lease: &Lease) -> LeaseView {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseView {
        holder: spec.holder_identity,
        renewed: spec.renew_time.map(|t| SystemTime::from(t.0)),
        duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
    }
}

/// End the process: a shard's reconcilers run without a Lease that another replica may take.
fn lost_shard(shard: u32) -> ! {
    tracing::error!(
        shard,
        "lost the Lease of a shard being reconciled; exiting so that no \
        Application has two writers (the replica restarts and claims shards again)"
    );
    std::process::exit(1);
}

/// Exit before the Lease of a running shard can expire: every Lease renewal that succeeded
/// moved its deadline; one not renewed `margin` before the Lease duration ends the process.
async fn fence(
    running: watch::Receiver<BTreeSet<u32>>,
    expiries: Arc<Mutex<BTreeMap<u32, Instant>>>,
    margin: Duration,
) {
    let mut tick = tokio::time::interval(margin / 4);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let expired = {
            let expiries = expiries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            running
                .borrow()
                .iter()
                .copied()
                .find(|shard| expiries.get(shard).is_none_or(|expiry| *expiry <= now + margin))
        };
        if let Some(shard) = expired {
            lost_shard(shard);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap as Application;

    fn app(namespace: &str, name: &str) -> Application {
        Application {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(events: &[Result<watcher::Event<Application>, watcher::Error>]) -> Vec<String> {
        events
            .iter()
            .map(|event| match event {
                Ok(watcher::Event::Apply(a)) => {
                    format!("apply {}", a.metadata.name.clone().unwrap_or_default())
                }
                Ok(watcher::Event::Delete(a)) => {
                    format!("delete {}", a.metadata.name.clone().unwrap_or_default())
                }
                Ok(watcher::Event::InitApply(a)) => {
                    format!("init {}", a.metadata.name.clone().unwrap_or_default())
                }
                Ok(watcher::Event::Init) => "init".to_owned(),
                Ok(watcher::Event::InitDone) => "done".to_owned(),
                Err(_) => "error".to_owned(),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_hashed_scope_keeps_its_shards_objects_and_drops_the_others() {
        // Two names in different shards of 2.
        let (mine, theirs) =
            (0..100).map(|i| format!("app-{i}")).fold((None, None), |(mine, theirs), name| {
                match decide::shard_of("ns", &name, 2) {
                    0 => (mine.or(Some(name)), theirs),
                    _ => (mine, theirs.or(Some(name))),
                }
            });
        let (mine, theirs) = (mine.expect("a name in shard 0"), theirs.expect("one in shard 1"));
        let scope = Scope::Hashed { shards: 2, held: Arc::new(BTreeSet::from([0])) };
        let events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(app("ns", &mine))),
            Ok(watcher::Event::InitApply(app("ns", &theirs))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(app("ns", &mine))),
            Ok(watcher::Event::Apply(app("ns", &theirs))),
            Ok(watcher::Event::Delete(app("ns", &theirs))),
        ];
        let narrowed: Vec<_> = scope.narrow(futures::stream::iter(events)).collect().await;
        assert_eq!(
            names(&narrowed),
            [
                "init".to_owned(),
                format!("init {mine}"),
                "done".to_owned(),
                format!("apply {mine}"),
                format!("delete {theirs}"),
                format!("delete {theirs}"),
            ]
        );
        assert!(scope.owns(&app("ns", &mine)) && !scope.owns(&app("ns", &theirs)));
        // Unsharded and label scopes keep everything (the API server filters labels).
        assert!(Scope::All.owns(&app("ns", &theirs)));
        assert!(Scope::Label("sync.kuvryn.io/shard=eu".into()).owns(&app("ns", &theirs)));
        let config = Scope::Label("sync.kuvryn.io/shard=eu".into()).watcher_config();
        assert_eq!(config.label_selector.as_deref(), Some("sync.kuvryn.io/shard=eu"));
        assert_eq!(scope.watcher_config().label_selector, None);
    }

    #[test]
    fn replica_lease_names_are_valid() {
        assert_eq!(replica_lease_name("ctl", "Pod_A.1"), "ctl-replica-pod-a-1");
        assert_eq!(replica_lease_name("ctl", "-x-"), "ctl-replica-x");
    }
}
