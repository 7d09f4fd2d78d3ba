//! Test fault points: named places where the controller process dies on purpose, so a test can
//! show that a crash there loses nothing. Off unless `KSYNC_TEST_FAULT_POINT` names a point;
//! never set it in production.

/// After a sync applied and pruned, before its final statuses are written.
pub const AFTER_APPLY: &str = "after-apply";

/// The environment variable naming the point to die at.
pub const ENV: &str = "KSYNC_TEST_FAULT_POINT";

/// The exit code of a process that died at a fault point.
pub const EXIT_CODE: i32 = 86;

/// A fault point armed from the environment.
#[derive(Clone, Debug)]
pub struct FaultPoint {
    name: String,
}

impl FaultPoint {
    /// The point `KSYNC_TEST_FAULT_POINT` names, if any.
    pub fn from_env() -> Option<Self> {
        std::env::var(ENV).ok().filter(|n| !n.is_empty()).map(|name| Self { name })
    }

    /// Die here when this is the armed point: at once, without unwinding or cleanup, like a
    /// killed process.
    pub fn reached(&self, point: &str) {
        if self.name == point {
            tracing::error!(point, "test fault point reached; exiting");
            std::process::exit(EXIT_CODE);
        }
    }
}
