//! Fault injection for reliability tests: per verb (`get`, `list`, `watch`, `create`, `update`,
//! `patch`, `delete`, `deletecollection`, or `*`) an error rate, added latency and a rate of
//! connection resets.

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
}

/// The active faults.
#[derive(Debug, Default)]
pub struct Faults {
    by_verb: RwLock<HashMap<String, Fault>>,
    rng: AtomicU64,
}

/// What the server should do with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Serve,
    Error(u16),
    Reset,
}

impl Faults {
    pub fn set(&self, verb: &str, f: Fault) {
        self.by_verb.write().unwrap_or_else(|e| e.into_inner()).insert(verb.to_string(), f);
    }

    pub fn clear(&self) {
        self.by_verb.write().unwrap_or_else(|e| e.into_inner()).clear();
    }

    fn random(&self) -> f64 {
        // xorshift64*, seeded lazily from the clock.
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

    /// Decide for a request with this verb (after sleeping any latency).
    pub async fn decide(&self, verb: &str) -> Action {
        let f = {
            let m = self.by_verb.read().unwrap_or_else(|e| e.into_inner());
            if m.is_empty() {
                return Action::Serve;
            }
            m.get(verb).or_else(|| m.get("*")).cloned()
        };
        let Some(f) = f else { return Action::Serve };
        if !f.latency.is_zero() {
            tokio::time::sleep(f.latency).await;
        }
        if f.reset_rate > 0.0 && self.random() < f.reset_rate {
            return Action::Reset;
        }
        if f.error_rate > 0.0 && self.random() < f.error_rate {
            return Action::Error(if f.error_code == 0 { 500 } else { f.error_code });
        }
        Action::Serve
    }
}
