//! Controller shards: which shard an object belongs to, which shard names are valid, and which
//! shard Leases a replica claims, renews or gives up. Plain data in and out; the controller reads
//! the Leases and writes what is decided here.
//!
//! Two modes (see `docs/sharding.md`):
//! - **Label mode** (Flux's model): the `sync.kuvryn.io/shard` label on an Application or a
//!   Repository names its shard; a controller started with `--shard NAME` watches only objects
//!   labelled `NAME` and a controller started with `--shard-unlabelled` only unlabelled ones.
//!   [`label_selector`] builds the selector, [`check_shard_name`] checks the flag.
//! - **Automatic mode** (`--shards N`): every object `namespace/name` belongs to shard
//!   [`shard_of`] — jump consistent hashing (Lamping and Veach, 2014) of a SHA-256 of the name,
//!   so shards are even within a few per cent and changing N moves only the objects that must
//!   move (about 1/(N+1) of them when a shard is added). Replicas share the N shards through one
//!   Lease per shard; [`plan_claims`] bounds each replica to ⌈N / live replicas⌉ shards, the
//!   bounded-load rule of Argo CD's consistent-hashing sharding applied to shards instead of
//!   clusters.
//!
//! Why hand-written: jump hashing is a dozen lines with published constants; the crates that
//! offer it (`jumphash`, `jump-consistent-hash`) add a dependency for those lines and hash keys
//! their own way, while every replica here must agree on one stable hash (SHA-256, already used).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// The first 8 bytes of SHA-256 of `parts` joined by `/`: stable across builds and platforms.
fn stable_hash(parts: &[&str]) -> u64 {
    let mut hasher = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hasher.update(b"/");
        }
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(bytes)
}

/// Jump consistent hash: the bucket in `0..buckets` of `key` (`buckets` ≥ 1).
fn jump(mut key: u64, buckets: u32) -> u32 {
    let (mut bucket, mut next) = (-1i64, 0i64);
    while next < i64::from(buckets) {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let jumped =
            ((bucket + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
        next = jumped;
    }
    u32::try_from(bucket).unwrap_or(0)
}

/// The shard (in `0..shards`) of the object `namespace/name`; shard 0 when `shards` is 0.
pub fn shard_of(namespace: &str, name: &str, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    jump(stable_hash(&[namespace, name]), shards)
}

/// Whether a replica holding `held` (of `shards`) reconciles `namespace/name`.
pub fn owns(held: &BTreeSet<u32>, shards: u32, namespace: &str, name: &str) -> bool {
    held.contains(&shard_of(namespace, name, shards))
}

/// Longest shard name: what stays of a Lease name's 63-character budget after
/// `kuvryn-sync-controller-shard-`.
pub const MAX_SHARD_NAME: usize = 63 - "kuvryn-sync-controller-shard-".len();

/// Check a `--shard` value: it must be a label value and part of a Lease name, so a lowercase
/// RFC 1123 label of at most [`MAX_SHARD_NAME`] characters. The error names the flag and rule.
pub fn check_shard_name(name: &str) -> Result<(), String> {
    let valid_chars =
        name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let valid_ends = name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && name.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if name.is_empty() || name.len() > MAX_SHARD_NAME || !valid_chars || !valid_ends {
        return Err(format!(
            "--shard {name:?}: a shard name must be 1 to {MAX_SHARD_NAME} lowercase letters, \
             digits or '-', starting and ending with a letter or digit (it is the value of the \
             sync.kuvryn.io/shard label and part of the shard's Lease name); pick such a name"
        ));
    }
    Ok(())
}

/// Which objects a label-mode controller watches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelShard {
    /// Objects labelled `sync.kuvryn.io/shard=<name>` (`--shard NAME`).
    Named(String),
    /// Objects without the label (`--shard-unlabelled`): the main controller beside shards.
    Unlabelled,
}

/// The label selector of a label-mode controller's watches.
pub fn label_selector(shard: &LabelShard) -> String {
    match shard {
        LabelShard::Named(name) => format!("{}={name}", kuvryn_sync_api::keys::SHARD),
        LabelShard::Unlabelled => format!("!{}", kuvryn_sync_api::keys::SHARD),
    }
}

/// The leader Lease of a label-mode controller: each shard elects its own leader among its
/// replicas; the unlabelled controller keeps the unsharded controller's Lease (`base`).
pub fn leader_lease_name(base: &str, shard: &LabelShard) -> String {
    match shard {
        LabelShard::Named(name) => format!("{base}-shard-{name}"),
        LabelShard::Unlabelled => base.to_owned(),
    }
}

/// The Lease of automatic-mode shard `shard`.
pub fn shard_lease_name(base: &str, shard: u32) -> String {
    format!("{base}-shard-{shard}")
}

/// A Lease as the claim planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    /// `spec.holderIdentity`; `None` or empty when released.
    pub holder: Option<String>,
    /// `spec.renewTime`.
    pub renewed: Option<SystemTime>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
}

impl LeaseView {
    /// Whether nobody holds the Lease at `now`: released, never held, or not renewed within its
    /// duration (the holder's clock wrote `renewTime`: clocks are assumed to agree within the
    /// renewal margin, as for every Lease-based election).
    pub fn free_at(&self, now: SystemTime) -> bool {
        let held = self.holder.as_deref().is_some_and(|h| !h.is_empty());
        let fresh = self.renewed.is_some_and(|renewed| renewed + self.duration > now);
        !(held && fresh)
    }

    /// Whether `identity` holds the Lease at `now`.
    pub fn held_by(&self, identity: &str, now: SystemTime) -> bool {
        self.holder.as_deref() == Some(identity) && !self.free_at(now)
    }
}

/// What a replica does with the shard Leases this round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimPlan {
    /// Free shards to take, most preferred first.
    pub acquire: Vec<u32>,
    /// Held shards to give up (stop reconciling them, then release the Lease) so that loads
    /// stay even.
    pub release: Vec<u32>,
}

/// Most shards one replica holds when `replicas` are alive: ⌈shards / replicas⌉.
pub fn bound(shards: u32, replicas: usize) -> usize {
    let replicas = u32::try_from(replicas.max(1)).unwrap_or(u32::MAX);
    usize::try_from(shards.div_ceil(replicas)).unwrap_or(usize::MAX)
}

/// How much `identity` prefers `shard` (rendezvous hashing): replicas starting together reach
/// for different shards, and a replica gives up its least preferred first.
fn preference(identity: &str, shard: u32) -> u64 {
    stable_hash(&[identity, &shard.to_string()])
}

/// The claims of replica `identity` given the shard Leases (`leases[i]` is shard `i`'s, `None`
/// when it does not exist yet) and the number of live replicas (itself included): take free
/// shards up to the [`bound`], give up held shards above it.
pub fn plan_claims(
    leases: &[Option<LeaseView>],
    identity: &str,
    live_replicas: usize,
    now: SystemTime,
) -> ClaimPlan {
    let shards = u32::try_from(leases.len()).unwrap_or(u32::MAX);
    let limit = bound(shards, live_replicas);
    let by_preference = |mut list: Vec<u32>| {
        list.sort_by_key(|&shard| std::cmp::Reverse(preference(identity, shard)));
        list
    };
    let indexed = || (0..shards).zip(leases.iter());
    let held: Vec<u32> = indexed()
        .filter(|(_, lease)| lease.as_ref().is_some_and(|l| l.held_by(identity, now)))
        .map(|(shard, _)| shard)
        .collect();
    if held.len() > limit {
        let mut release = by_preference(held);
        let keep = release.drain(..limit).count();
        debug_assert_eq!(keep, limit);
        return ClaimPlan { acquire: Vec::new(), release };
    }
    let free: Vec<u32> = indexed()
        .filter(|(_, lease)| lease.as_ref().is_none_or(|l| l.free_at(now)))
        .map(|(shard, _)| shard)
        .collect();
    let mut acquire = by_preference(free);
    acquire.truncate(limit - held.len());
    ClaimPlan { acquire, release: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(count: usize) -> Vec<(String, String)> {
        (0..count).map(|i| (format!("team-{}", i % 17), format!("app-{i}"))).collect()
    }

    fn counts(shards: u32, objects: &[(String, String)]) -> Vec<usize> {
        let mut counts = vec![0; shards as usize];
        for (namespace, name) in objects {
            counts[shard_of(namespace, name, shards) as usize] += 1;
        }
        counts
    }

    #[test]
    fn ten_thousand_names_split_within_ten_per_cent_of_even() {
        let objects = names(10_000);
        for shards in [2u32, 3, 5, 10] {
            let even = 10_000.0 / f64::from(shards);
            for count in counts(shards, &objects) {
                let off = (count as f64 - even).abs() / even;
                assert!(off <= 0.10, "{shards} shards: {count} is {off:.3} off {even}");
            }
        }
    }

    #[test]
    fn three_shards_are_within_three_per_cent() {
        // The figure docs/sharding.md quotes: 10,000 names over 3 shards.
        let counts = counts(3, &names(10_000));
        eprintln!("10,000 names over 3 shards: {counts:?}");
        for count in &counts {
            assert!((3_233..=3_433).contains(count), "{counts:?}");
        }
    }

    #[test]
    fn adding_a_shard_moves_only_objects_onto_it() {
        let objects = names(10_000);
        for shards in 1u32..8 {
            let mut moved = 0;
            for (namespace, name) in &objects {
                let before = shard_of(namespace, name, shards);
                let after = shard_of(namespace, name, shards + 1);
                if before != after {
                    assert_eq!(after, shards, "{namespace}/{name} moved between old shards");
                    moved += 1;
                }
            }
            let expected = 10_000.0 / f64::from(shards + 1);
            let off = (f64::from(moved) - expected).abs() / expected;
            assert!(
                off <= 0.10,
                "{shards}→{}: {moved} moved, expected about {expected}",
                shards + 1
            );
        }
    }

    #[test]
    fn removing_the_last_shard_moves_only_its_objects() {
        let objects = names(10_000);
        for (namespace, name) in &objects {
            let before = shard_of(namespace, name, 4);
            let after = shard_of(namespace, name, 3);
            if before < 3 {
                assert_eq!(before, after, "{namespace}/{name} moved though its shard stayed");
            }
        }
    }

    #[test]
    fn the_shard_is_stable_and_in_range() {
        // Fixed points: a change of hash or algorithm would reshuffle every installation.
        assert_eq!(shard_of("default", "podinfo", 3), shard_of("default", "podinfo", 3));
        assert_eq!(shard_of("a", "b", 0), 0);
        assert_eq!(shard_of("a", "b", 1), 0);
        for (namespace, name) in names(500) {
            assert!(shard_of(&namespace, &name, 7) < 7);
        }
        // `a/b c` and `a b/c` must not collide by construction of the key.
        let held = BTreeSet::from([shard_of("ns", "app", 5)]);
        assert!(owns(&held, 5, "ns", "app"));
    }

    #[test]
    fn shard_names() {
        for good in ["a", "eu-1", "shard0", &"x".repeat(MAX_SHARD_NAME)] {
            assert_eq!(check_shard_name(good), Ok(()), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"x".repeat(MAX_SHARD_NAME + 1)] {
            let err = check_shard_name(bad).expect_err(bad);
            assert!(err.contains("--shard") && err.contains("lowercase"), "{err}");
        }
    }

    #[test]
    fn selectors_and_lease_names() {
        let named = LabelShard::Named("eu".into());
        assert_eq!(label_selector(&named), "sync.kuvryn.io/shard=eu");
        assert_eq!(label_selector(&LabelShard::Unlabelled), "!sync.kuvryn.io/shard");
        assert_eq!(leader_lease_name("ctl", &named), "ctl-shard-eu");
        assert_eq!(leader_lease_name("ctl", &LabelShard::Unlabelled), "ctl");
        assert_eq!(shard_lease_name("ctl", 2), "ctl-shard-2");
        assert!(leader_lease_name("kuvryn-sync-controller", &named).len() <= 63);
    }

    const NOW: Duration = Duration::from_secs(1_000_000);

    fn at(seconds_ago: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + NOW - Duration::from_secs(seconds_ago))
    }

    fn lease(holder: &str, seconds_ago: u64) -> Option<LeaseView> {
        Some(LeaseView {
            holder: Some(holder.to_owned()),
            renewed: at(seconds_ago),
            duration: Duration::from_secs(15),
        })
    }

    fn plan(leases: &[Option<LeaseView>], me: &str, replicas: usize) -> ClaimPlan {
        plan_claims(leases, me, replicas, SystemTime::UNIX_EPOCH + NOW)
    }

    #[test]
    fn bounds() {
        assert_eq!(bound(3, 1), 3);
        assert_eq!(bound(3, 2), 2);
        assert_eq!(bound(3, 3), 1);
        assert_eq!(bound(3, 5), 1);
        assert_eq!(bound(10, 3), 4);
        assert_eq!(bound(3, 0), 3);
    }

    #[test]
    fn claims_table() {
        struct Case {
            what: &'static str,
            leases: Vec<Option<LeaseView>>,
            replicas: usize,
            acquire: usize,
            release: usize,
        }
        let cases = [
            Case {
                what: "alone: all",
                leases: vec![None, None, None],
                replicas: 1,
                acquire: 3,
                release: 0,
            },
            Case {
                what: "one of three: one",
                leases: vec![None, None, None],
                replicas: 3,
                acquire: 1,
                release: 0,
            },
            Case {
                what: "at the bound: nothing",
                leases: vec![lease("me", 1), lease("b", 1), lease("c", 1)],
                replicas: 3,
                acquire: 0,
                release: 0,
            },
            Case {
                what: "a replica died: its expired shard, up to ⌈3/2⌉",
                leases: vec![lease("me", 1), lease("b", 1), lease("c", 16)],
                replicas: 2,
                acquire: 1,
                release: 0,
            },
            Case {
                what: "expired but the dead replica still counted: wait",
                leases: vec![lease("me", 1), lease("b", 1), lease("c", 16)],
                replicas: 3,
                acquire: 0,
                release: 0,
            },
            Case {
                what: "released shard (no holder)",
                leases: vec![lease("me", 1), lease("", 1), lease("c", 1)],
                replicas: 2,
                acquire: 1,
                release: 0,
            },
            Case {
                what: "replicas joined: give up all but one",
                leases: vec![lease("me", 1), lease("me", 2), lease("me", 3)],
                replicas: 3,
                acquire: 0,
                release: 2,
            },
            Case {
                what: "held by others and fresh: nothing to take",
                leases: vec![lease("b", 14), lease("b", 1), lease("c", 1)],
                replicas: 2,
                acquire: 0,
                release: 0,
            },
        ];
        for case in cases {
            let plan = plan(&case.leases, "me", case.replicas);
            assert_eq!(plan.acquire.len(), case.acquire, "{}: {plan:?}", case.what);
            assert_eq!(plan.release.len(), case.release, "{}: {plan:?}", case.what);
            for shard in &plan.acquire {
                let lease = &case.leases[*shard as usize];
                assert!(lease.as_ref().is_none_or(|l| l.free_at(SystemTime::UNIX_EPOCH + NOW)));
            }
            for shard in &plan.release {
                assert_eq!(
                    case.leases[*shard as usize]
                        .as_ref()
                        .expect("released shards exist")
                        .holder
                        .as_deref(),
                    Some("me")
                );
            }
        }
    }

    #[test]
    fn replicas_starting_together_prefer_different_shards() {
        let leases = vec![None; 3];
        let firsts: BTreeSet<u32> = ["controller-0", "controller-1", "controller-2", "x", "y"]
            .iter()
            .map(|me| plan(&leases, me, 3).acquire[0])
            .collect();
        assert!(firsts.len() >= 2, "every replica reaches for the same shard: {firsts:?}");
    }

    #[test]
    fn an_expired_lease_of_mine_is_not_held() {
        let mine = lease("me", 15).expect("a lease");
        assert!(!mine.held_by("me", SystemTime::UNIX_EPOCH + NOW));
        assert!(mine.free_at(SystemTime::UNIX_EPOCH + NOW));
        assert!(lease("me", 14).expect("a lease").held_by("me", SystemTime::UNIX_EPOCH + NOW));
    }
}
