//! The server-side apply field manager of an Application: `kuvryn-sync/<namespace>/<name>`, one
//! per Application, so that two Applications writing the same field conflict instead of silently
//! taking turns. Kubernetes caps a manager name at 128 characters: a longer name keeps its
//! readable start and ends with a hash of the whole, so it stays unique and stable.

use sha2::{Digest, Sha256};

/// The longest field manager name the API server accepts.
pub const MAX_LEN: usize = 128;

/// The prefix of every Application's field manager.
pub const PREFIX: &str = "kuvryn-sync/";

/// Hex characters of the hash that ends a shortened name.
const HASH_LEN: usize = 16;

/// The field manager of Application `namespace/name`.
pub fn for_application(namespace: &str, name: &str) -> String {
    let full = format!("{PREFIX}{namespace}/{name}");
    if full.len() <= MAX_LEN {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest.iter().take(HASH_LEN / 2).map(|b| format!("{b:02x}")).collect();
    // Namespaces and names are DNS labels/subdomains: ASCII, so byte slicing is on a boundary.
    let keep = MAX_LEN - HASH_LEN - 1;
    format!("{}-{hash}", &full[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_readable_and_long_ones_stay_unique_within_the_limit() {
        assert_eq!(for_application("team", "web"), "kuvryn-sync/team/web");
        let ns = "n".repeat(63);
        let long_a = format!("{}a", "x".repeat(200));
        let long_b = format!("{}b", "x".repeat(200));
        let a = for_application(&ns, &long_a);
        let b = for_application(&ns, &long_b);
        assert_eq!(a.len(), MAX_LEN);
        assert_eq!(b.len(), MAX_LEN);
        assert_ne!(a, b, "names differing only past the cut get different managers");
        assert!(a.starts_with(&format!("{PREFIX}{ns}/xxx")), "{a}");
        assert_eq!(a, for_application(&ns, &long_a), "stable");
        let exactly = "y".repeat(MAX_LEN - PREFIX.len() - "team/".len());
        assert_eq!(for_application("team", &exactly).len(), MAX_LEN);
        assert!(for_application("team", &exactly).ends_with(&exactly), "no hash when it fits");
    }
}
