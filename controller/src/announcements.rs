//! Commits the controller announced as sync state `Planning` and has not rendered yet. The
//! reconcile that follows an announcement may read the Application from a store that has not
//! seen the announcement's status write yet; it renders then, instead of announcing again.

use std::collections::HashMap;
use std::sync::Mutex;

/// The announced commit of each Application, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Announcements(Mutex<HashMap<String, String>>);

impl Announcements {
    /// `commit` was announced for Application `namespace/name`.
    pub fn record(&self, namespace: &str, name: &str, commit: &str) {
        let mut announced = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        announced.insert(format!("{namespace}/{name}"), commit.to_owned());
    }

    /// Whether `commit` is the one announced for Application `namespace/name`; forgets what was
    /// announced for it either way (one render follows an announcement).
    pub fn take(&self, namespace: &str, name: &str, commit: &str) -> bool {
        let mut announced = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        announced.remove(&format!("{namespace}/{name}")).is_some_and(|c| c == commit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_taken_once_and_only_for_its_commit() {
        let announcements = Announcements::default();
        announcements.record("team-a", "web", "c1");
        assert!(!announcements.take("team-a", "other", "c1"));
        assert!(!announcements.take("team-b", "web", "c1"));
        assert!(announcements.take("team-a", "web", "c1"));
        assert!(!announcements.take("team-a", "web", "c1"), "taken once");
        announcements.record("team-a", "web", "c1");
        assert!(!announcements.take("team-a", "web", "c2"), "another commit");
        assert!(!announcements.take("team-a", "web", "c1"), "forgotten by the other take");
    }
}
