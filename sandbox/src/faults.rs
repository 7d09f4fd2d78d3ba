//! Fault injection for reliability tests: per verb (`get`, `list`, `watch`, `create`, `update`,
//! `patch`, `delete`, `deletecollection`, or `*`) an error rate, added latency, a rate of
//! connection resets, and for watches cuts of open streams and `410 Gone` on resumption; each
//! fault optionally only for one requester.
//!
//! The random draws come from a small xorshift generator (no dependency for a handful of
//! lines); [`Faults::seeded`] makes them repeatable for the unit tests below.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What to inject for one verb.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fault {
    /// Probability (0..=1) of answering with an error Status instead of serving.
    pub error_rate: f64,
    /// HTTP code of injected errors (500 when 0): 500 InternalError, 503 ServiceUnavailable,
    /// 429 TooManyRequests (with Retry-After: 1), 504 Timeout.
    pub error_code: u16,
    /// Added before serving.
    pub latency: Duration,
    /// Probability (0..=1) of dropping the connection instead of answering.
    pub reset_rate: f64,
    /// Watches only: every open watch stream is cut after a random time drawn uniformly from
    /// half to one and a half times this (zero: never). Half the cuts end the stream cleanly
    /// (as kube-apiserver's watch timeout does), half reset the connection; either way the
    /// client must watch again from the last version it saw.
    pub watch_cut_after: Duration,
    /// Watches only: probability (0..=1) that a watch resuming from a `resourceVersion` gets
    /// `410 Gone` ("too old resource version") at once, as after an etcd compaction, so that
    /// the client must list again.
    pub watch_gone_rate: f64,
    /// Only requests authenticated as this user (before impersonation) get the fault; `None`:
    /// every requester.
    pub only_user: Option<String>,
    /// Only requests for this resource (its plural, such as `configmaps`) get the fault; `None`:
    /// every resource.
    pub only_resource: Option<String>,
}

/// How a cut watch stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The stream ends normally (the client sees the end of the response).
    Close,
    /// The connection is dropped mid-stream.
    Reset,
}

/// What a watch stream gets beyond [`Action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchPlan {
    /// Answer with a `410 Gone` ERROR event at once.
    pub gone: bool,
    /// Cut the stream after this long, this way.
    pub cut: Option<(Duration, Cut)>,
}

/// How many faults were injected, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Injected {
    pub errors: u64,
    pub resets: u64,
    pub delayed: u64,
    pub watch_cuts: u64,
    pub watch_gone: u64,
}

/// The active faults.
#[derive(Debug, Default)]
pub struct Faults {
    by_verb: RwLock<HashMap<String, Fault>>,
    rng: AtomicU64,
    errors: AtomicU64,
    resets: AtomicU64,
    delayed: AtomicU64,
    watch_cuts: AtomicU64,
    watch_gone: AtomicU64,
}

/// What the server should do with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Serve,
    Error(u16),
    Reset,
}

impl Faults {
    /// Faults whose random draws start from `seed` (repeatable).
    #[cfg(test)]
    pub fn seeded(seed: u64) -> Faults {
        Faults { rng: AtomicU64::new(seed | 1), ..Default::default() }
    }

    pub fn set(&self, verb: &str, f: Fault) {
        self.by_verb.write().unwrap_or_else(|e| e.into_inner()).insert(verb.to_string(), f);
    }

    pub fn clear(&self) {
        self.by_verb.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The counts of injected faults so far.
    pub fn injected(&self) -> Injected {
        Injected {
            errors: self.errors.load(Ordering::Relaxed),
            resets: self.resets.load(Ordering::Relaxed),
            delayed: self.delayed.load(Ordering::Relaxed),
            watch_cuts: self.watch_cuts.load(Ordering::Relaxed),
            watch_gone: self.watch_gone.load(Ordering::Relaxed),
        }
    }

    fn random(&self) -> f64 {
        // xorshift64*, seeded lazily from the clock. Concurrent draws may repeat a value; the
        // rates stay what they are.
        let mut x = self.rng.load(Ordering::Relaxed);
        if x == 0 {
            x = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0x9E37_79B9)
                | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault for this verb, requester and resource, if any.
    fn fault_for(&self, verb: &str, requester: &str, resource: Option<&str>) -> Option<Fault> {
        let m = self.by_verb.read().unwrap_or_else(|e| e.into_inner());
        if m.is_empty() {
            return None;
        }
        m.get(verb)
            .or_else(|| m.get("*"))
            .filter(|f| f.only_user.as_deref().is_none_or(|u| u == requester))
            .filter(|f| f.only_resource.as_deref().is_none_or(|r| Some(r) == resource))
            .cloned()
    }

    /// Decide for a request with this verb by `requester` (after sleeping any latency).
    #[cfg(test)]
    pub async fn decide(&self, verb: &str, requester: &str) -> Action {
        self.decide_on(verb, requester, None).await
    }

    /// [`Faults::decide`] for a request on `resource` (a plural such as `configmaps`).
    pub async fn decide_on(&self, verb: &str, requester: &str, resource: Option<&str>) -> Action {
        let Some(f) = self.fault_for(verb, requester, resource) else { return Action::Serve };
        if !f.latency.is_zero() {
            self.delayed.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(f.latency).await;
        }
        self.draw(&f)
    }

    /// The error/reset draw of [`Faults::decide`].
    fn draw(&self, f: &Fault) -> Action {
        if f.reset_rate > 0.0 && self.random() < f.reset_rate {
            self.resets.fetch_add(1, Ordering::Relaxed);
            return Action::Reset;
        }
        if f.error_rate > 0.0 && self.random() < f.error_rate {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Action::Error(if f.error_code == 0 { 500 } else { f.error_code });
        }
        Action::Serve
    }

    /// The faults of a watch by `requester` that is served; `resuming`: it names a
    /// `resourceVersion` to continue from (only those can be too old).
    pub fn watch_plan(&self, requester: &str, resuming: bool) -> WatchPlan {
        let Some(f) = self.fault_for("watch", requester, None) else { return WatchPlan::default() };
        if resuming && f.watch_gone_rate > 0.0 && self.random() < f.watch_gone_rate {
            self.watch_gone.fetch_add(1, Ordering::Relaxed);
            return WatchPlan { gone: true, cut: None };
        }
        if f.watch_cut_after.is_zero() {
            return WatchPlan::default();
        }
        let after = f.watch_cut_after.mul_f64(0.5 + self.random());
        let how = if self.random() < 0.5 { Cut::Close } else { Cut::Reset };
        WatchPlan { gone: false, cut: Some((after, how)) }
    }

    /// Count a cut that happened (a stream that ends earlier is not cut).
    pub fn count_cut(&self) {
        self.watch_cuts.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAWS: usize = 20_000;

    #[test]
    fn error_and_reset_rates_are_kept_and_counted() {
        let faults = Faults::seeded(7);
        let fault = Fault { error_rate: 0.2, error_code: 429, reset_rate: 0.1, ..Fault::default() };
        let actions: Vec<Action> = (0..DRAWS).map(|_| faults.draw(&fault)).collect();
        let count = |a: Action| actions.iter().filter(|x| **x == a).count();
        let resets = count(Action::Reset) as f64 / DRAWS as f64;
        assert!((0.08..0.12).contains(&resets), "resets {resets}");
        // Errors are drawn among the requests not reset: 0.9 * 0.2.
        let errors = count(Action::Error(429)) as f64 / DRAWS as f64;
        assert!((0.16..0.20).contains(&errors), "errors {errors}");
        let counted = faults.injected();
        assert_eq!(counted.resets, count(Action::Reset) as u64);
        assert_eq!(counted.errors, count(Action::Error(429)) as u64);
    }

    #[test]
    fn an_error_without_a_code_is_500() {
        let faults = Faults::seeded(3);
        let fault = Fault { error_rate: 1.0, ..Fault::default() };
        assert_eq!(faults.draw(&fault), Action::Error(500));
        assert_eq!(faults.draw(&Fault::default()), Action::Serve);
    }

    #[tokio::test]
    async fn a_verb_fault_wins_over_the_wildcard_and_a_user_fault_spares_others() {
        let faults = Faults::seeded(11);
        faults.set("*", Fault { error_rate: 1.0, error_code: 503, ..Fault::default() });
        faults.set(
            "delete",
            Fault { reset_rate: 1.0, only_user: Some("ctl".into()), ..Fault::default() },
        );
        assert_eq!(faults.decide("get", "anyone").await, Action::Error(503));
        assert_eq!(faults.decide("delete", "ctl").await, Action::Reset);
        // The delete fault is only for `ctl`; the wildcard does not stand in for it.
        assert_eq!(faults.decide("delete", "admin").await, Action::Serve);
        faults.clear();
        assert_eq!(faults.decide("get", "anyone").await, Action::Serve);
    }

    #[tokio::test]
    async fn a_resource_fault_spares_other_resources() {
        let faults = Faults::seeded(5);
        let forbidden = Fault {
            error_rate: 1.0,
            error_code: 403,
            only_resource: Some("configmaps".into()),
            ..Fault::default()
        };
        faults.set("watch", forbidden);
        assert_eq!(faults.decide_on("watch", "ctl", Some("configmaps")).await, Action::Error(403));
        assert_eq!(faults.decide_on("watch", "ctl", Some("secrets")).await, Action::Serve);
        assert_eq!(faults.decide_on("list", "ctl", Some("configmaps")).await, Action::Serve);
        assert_eq!(faults.decide("watch", "ctl").await, Action::Serve, "no resource named");
    }

    #[test]
    fn watch_cuts_fall_within_half_to_one_and_a_half_times_and_both_ways() {
        let faults = Faults::seeded(5);
        let every = Duration::from_secs(4);
        faults.set("watch", Fault { watch_cut_after: every, ..Fault::default() });
        let (mut closes, mut resets) = (0, 0);
        for _ in 0..2000 {
            let plan = faults.watch_plan("ctl", true);
            assert!(!plan.gone);
            let (after, how) = plan.cut.expect("every watch is cut");
            assert!(after >= every / 2 && after < every * 3 / 2, "{after:?}");
            match how {
                Cut::Close => closes += 1,
                Cut::Reset => resets += 1,
            }
        }
        assert!(closes > 800 && resets > 800, "closes {closes}, resets {resets}");
        // Other verbs' faults do not touch watches.
        faults.set("watch", Fault::default());
        assert_eq!(faults.watch_plan("ctl", true), WatchPlan::default());
    }

    #[test]
    fn gone_only_for_resuming_watches_at_its_rate() {
        let faults = Faults::seeded(9);
        faults.set(
            "watch",
            Fault {
                watch_gone_rate: 0.25,
                watch_cut_after: Duration::from_secs(1),
                ..Fault::default()
            },
        );
        let gone = (0..DRAWS).filter(|_| faults.watch_plan("ctl", true).gone).count();
        let share = gone as f64 / DRAWS as f64;
        assert!((0.22..0.28).contains(&share), "gone {share}");
        assert_eq!(faults.injected().watch_gone, gone as u64);
        // A watch from the current state (no version) is never too old, but still cut.
        for _ in 0..500 {
            let plan = faults.watch_plan("ctl", false);
            assert!(!plan.gone && plan.cut.is_some());
        }
    }

    #[test]
    fn user_scoped_watch_faults_spare_other_watchers() {
        let faults = Faults::seeded(13);
        faults.set(
            "watch",
            Fault {
                watch_gone_rate: 1.0,
                watch_cut_after: Duration::from_secs(1),
                only_user: Some("ctl".into()),
                ..Fault::default()
            },
        );
        assert!(faults.watch_plan("ctl", true).gone);
        assert_eq!(faults.watch_plan("test-observer", true), WatchPlan::default());
    }
}
