//! Checkout limits: how much of a commit's tree the Git cache may write, decided entry by entry
//! while the tree is walked in the object database, before anything is written.
//!
//! A commit is tiny on the wire but can name a huge checkout: trees that share one subtree
//! ("git bomb": 10 levels of 10 entries is 10^10 paths in a few kilobytes), or one large blob.
//! [`CheckoutBudget`] is charged once per tree entry (files, directories, symbolic links and
//! submodules each count as one path), with each blob's size as the object header states it, and
//! refuses at the first entry over a limit, so a bomb costs at most `max_files` steps to refuse.

use std::fmt;

/// Default [`CheckoutLimits::max_files`]: paths (files, directories, links) in one checkout.
pub const DEFAULT_MAX_FILES: u64 = 100_000;
/// Default [`CheckoutLimits::max_total_bytes`]: bytes of all files of one checkout (1 GiB).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 1 << 30;
/// Default [`CheckoutLimits::max_file_bytes`]: bytes of one file (64 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;
/// Default [`CheckoutLimits::max_depth`]: directory nesting below the root.
pub const DEFAULT_MAX_DEPTH: usize = 256;

/// What one checkout may hold. The controller sets them from its `--checkout-*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckoutLimits {
    /// Paths (files, directories, symbolic links, submodules), `--checkout-max-files`.
    pub max_files: u64,
    /// Sum of the sizes of all files and link targets, `--checkout-max-bytes`.
    pub max_total_bytes: u64,
    /// Size of the largest single file, `--checkout-max-file-bytes`.
    pub max_file_bytes: u64,
    /// Deepest directory nesting (the root's entries are at depth 1), `--checkout-max-depth`.
    pub max_depth: usize,
}

impl Default for CheckoutLimits {
    fn default() -> Self {
        Self {
            max_files: DEFAULT_MAX_FILES,
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// Which limit a checkout broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckoutLimit {
    /// [`CheckoutLimits::max_files`].
    Files,
    /// [`CheckoutLimits::max_total_bytes`].
    TotalBytes,
    /// [`CheckoutLimits::max_file_bytes`].
    FileBytes,
    /// [`CheckoutLimits::max_depth`].
    Depth,
}

impl CheckoutLimit {
    /// The controller flag that sets this limit.
    pub fn flag(self) -> &'static str {
        match self {
            CheckoutLimit::Files => "--checkout-max-files",
            CheckoutLimit::TotalBytes => "--checkout-max-bytes",
            CheckoutLimit::FileBytes => "--checkout-max-file-bytes",
            CheckoutLimit::Depth => "--checkout-max-depth",
        }
    }
}

/// A checkout refused by a limit; the message names the limit, its flag and the path reached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CheckoutLimitExceeded {
    /// The limit broken.
    pub limit: CheckoutLimit,
    /// Its value.
    pub value: u64,
    /// The repository-relative path at which it was broken.
    pub path: String,
    /// The size of that file, for [`CheckoutLimit::FileBytes`].
    pub size: Option<u64>,
}

impl fmt::Display for CheckoutLimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.limit {
            CheckoutLimit::Files => format!("more than {} paths", self.value),
            CheckoutLimit::TotalBytes => format!("more than {} bytes of files", self.value),
            CheckoutLimit::FileBytes => format!(
                "a file of {} bytes, above the {} bytes one file may hold",
                self.size.unwrap_or_default(),
                self.value
            ),
            CheckoutLimit::Depth => format!("directories nested deeper than {}", self.value),
        };
        write!(
            f,
            "the commit's tree holds {what} (reached at {:?}); nothing was checked out. Reduce the \
             repository or raise the controller's {} flag",
            self.path,
            self.limit.flag()
        )
    }
}

/// What a checkout has used so far, charged entry by entry.
#[derive(Clone, Debug)]
pub struct CheckoutBudget {
    limits: CheckoutLimits,
    files: u64,
    bytes: u64,
}

impl CheckoutBudget {
    /// A budget with nothing used.
    pub fn new(limits: CheckoutLimits) -> Self {
        Self { limits, files: 0, bytes: 0 }
    }

    /// Paths charged so far.
    pub fn files(&self) -> u64 {
        self.files
    }

    /// Bytes charged so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Charge one entry at `path`, `depth` directories below the root (1 for the root's own
    /// entries), holding `size` bytes when it is a file or link (`None` for a directory or a
    /// submodule).
    pub fn charge(
        &mut self,
        path: &str,
        depth: usize,
        size: Option<u64>,
    ) -> Result<(), CheckoutLimitExceeded> {
        let exceeded = |limit, value: u64, size| CheckoutLimitExceeded {
            limit,
            value,
            path: path.to_owned(),
            size,
        };
        if depth > self.limits.max_depth {
            return Err(exceeded(CheckoutLimit::Depth, self.limits.max_depth as u64, None));
        }
        if self.files >= self.limits.max_files {
            return Err(exceeded(CheckoutLimit::Files, self.limits.max_files, None));
        }
        self.files += 1;
        if let Some(size) = size {
            if size > self.limits.max_file_bytes {
                return Err(exceeded(
                    CheckoutLimit::FileBytes,
                    self.limits.max_file_bytes,
                    Some(size),
                ));
            }
            self.bytes = self.bytes.saturating_add(size);
            if self.bytes > self.limits.max_total_bytes {
                return Err(exceeded(CheckoutLimit::TotalBytes, self.limits.max_total_bytes, None));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: CheckoutLimits =
        CheckoutLimits { max_files: 3, max_total_bytes: 100, max_file_bytes: 60, max_depth: 2 };

    #[test]
    fn the_first_entry_over_a_limit_is_refused_naming_the_limit_and_its_flag() {
        // (entries charged in order, the limit expected to break, at which path)
        type Entry = (&'static str, usize, Option<u64>);
        type Expected = Option<(CheckoutLimit, &'static str)>;
        let cases: &[(&str, &[Entry], Expected)] = &[
            ("fits", &[("a", 1, Some(60)), ("d", 1, None), ("d/b", 2, Some(40))], None),
            (
                "a fourth path",
                &[("a", 1, Some(1)), ("b", 1, Some(1)), ("c", 1, None), ("c/d", 2, Some(1))],
                Some((CheckoutLimit::Files, "c/d")),
            ),
            ("one big file", &[("a", 1, Some(61))], Some((CheckoutLimit::FileBytes, "a"))),
            (
                "files adding up",
                &[("a", 1, Some(60)), ("b", 1, Some(41))],
                Some((CheckoutLimit::TotalBytes, "b")),
            ),
            (
                "too deep",
                &[("a", 1, None), ("a/b", 2, None), ("a/b/c", 3, Some(0))],
                Some((CheckoutLimit::Depth, "a/b/c")),
            ),
            ("empty files are free", &[("a", 1, Some(0)), ("b", 1, Some(0))], None),
        ];
        for (name, entries, expected) in cases {
            let mut budget = CheckoutBudget::new(SMALL);
            let outcome = entries.iter().try_for_each(|(p, d, s)| budget.charge(p, *d, *s));
            match (outcome, expected) {
                (Ok(()), None) => {}
                (Err(err), Some((limit, path))) => {
                    assert_eq!((err.limit, err.path.as_str()), (*limit, *path), "{name}");
                    let message = err.to_string();
                    assert!(message.contains(limit.flag()), "{name}: {message}");
                    assert!(message.contains(path), "{name}: {message}");
                }
                (outcome, expected) => panic!("{name}: {outcome:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn defaults_fit_under_the_default_git_cache_and_messages_say_what_to_do() {
        let limits = CheckoutLimits::default();
        assert_eq!(limits.max_files, 100_000);
        assert!(limits.max_file_bytes < limits.max_total_bytes);
        let err =
            CheckoutBudget::new(SMALL).charge("big.bin", 1, Some(1 << 20)).expect_err("too big");
        assert_eq!(
            err.to_string(),
            "the commit's tree holds a file of 1048576 bytes, above the 60 bytes one file may \
             hold (reached at \"big.bin\"); nothing was checked out. Reduce the repository or \
             raise the controller's --checkout-max-file-bytes flag"
        );
    }
}
