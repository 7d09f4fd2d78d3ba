//! Image write-back pushes (`kuvryn_sync_source::git::push_update`) against real Git servers:
//! `git daemon` with receive-pack enabled for the repository, lighttpd + `git http-backend` over
//! https with basic auth, and OpenSSH `sshd`. What landed is read back from the bare repository
//! with the real `git`.
//!
//! Needs `git`, and the Debian packages `lighttpd lighttpd-mod-openssl apache2-utils
//! openssh-server`; a missing one fails with instructions, nothing is skipped.

use std::cell::Cell;
use std::path::Path;

use kuvryn_sync_api::FailureReason;
use kuvryn_sync_source::git::{
    BasicAuth, GitAuth, PushError, PushOutcome, PushRequest, SshAuth, push_update,
};
use kuvryn_sync_tests::servers::{BareRepo, GitDaemon, HttpsGit, SshGit, git, run};
use secrecy::SecretString;

const AUTHOR: &str = "Kuvryn Image Bot";
const EMAIL: &str = "image-bot@kuvryn.invalid";
const PASSWORD: &str = "canary-push-pw-4b7d";
const WRONG_PASSWORD: &str = "canary-wrong-push-pw-c3e1";
const MANIFEST: &str = "apps/web.yaml";
const OLD: &str = "image: ghcr.io/acme/web:1.2.0 # {\"$imagepolicy\": \"apps:web\"}\n";
const NEW: &str = "image: ghcr.io/acme/web:1.3.0 # {\"$imagepolicy\": \"apps:web\"}\n";

/// A bare repository `NAME.git` under a fresh root holding `apps/web.yaml` with [`OLD`].
fn repository(name: &str) -> (tempfile::TempDir, BareRepo) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("srv");
    std::fs::create_dir_all(&root).expect("root");
    let repo = BareRepo::create(&root, name).expect("bare repository");
    repo.commit(&[(MANIFEST, OLD)], "add web").expect("commit");
    (dir, repo)
}

/// `git daemon` serving the repository, with anonymous push allowed for it.
fn daemon_for(repo: &BareRepo) -> GitDaemon {
    git_bare(repo, &["config", "daemon.receivepack", "true"]);
    GitDaemon::start(repo.path.parent().expect("root")).expect("git daemon")
}

/// Run `git --git-dir=<bare> args`; its trimmed output.
fn git_bare(repo: &BareRepo, args: &[&str]) -> String {
    let mut cmd = git(repo.home());
    cmd.arg(format!("--git-dir={}", repo.path.display())).args(args);
    run(cmd).expect("git").trim().to_owned()
}

fn request(url: &str) -> PushRequest {
    PushRequest::new(url, "main", AUTHOR, EMAIL)
}

/// An edit that sets `apps/web.yaml` to `content` and says so.
fn set_manifest(dir: &Path, content: &str) -> Result<Option<String>, String> {
    std::fs::write(dir.join(MANIFEST), content).map_err(|e| e.to_string())?;
    Ok(Some(format!("Update images\n\n- {MANIFEST}: ghcr.io/acme/web:1.3.0\n")))
}

#[test]
fn a_write_back_commits_once_as_the_configured_author_and_nothing_when_up_to_date() {
    let (_dir, repo) = repository("deploy");
    let daemon = daemon_for(&repo);
    let url = daemon.url(&repo.name);
    let before = git_bare(&repo, &["rev-parse", "refs/heads/main"]);

    let outcome = push_update(&request(&url), |dir| set_manifest(dir, NEW)).expect("push");
    let PushOutcome::Committed { commit } = outcome else { panic!("{outcome:?}") };
    assert_eq!(git_bare(&repo, &["rev-parse", "refs/heads/main"]), commit);
    assert_eq!(git_bare(&repo, &["rev-list", "--count", &format!("{before}..{commit}")]), "1");
    assert_eq!(
        git_bare(&repo, &["log", "-1", "--format=%an|%ae|%cn|%ce|%P", &commit]),
        format!("{AUTHOR}|{EMAIL}|{AUTHOR}|{EMAIL}|{before}")
    );
    assert_eq!(
        git_bare(&repo, &["log", "-1", "--format=%B", &commit]),
        format!("Update images\n\n- {MANIFEST}: ghcr.io/acme/web:1.3.0")
    );
    assert_eq!(git_bare(&repo, &["diff", "--name-only", &before, &commit]), MANIFEST);
    assert_eq!(git_bare(&repo, &["show", &format!("{commit}:{MANIFEST}")]), NEW.trim_end());

    // Nothing to change: no commit, no push.
    let calls = Cell::new(0);
    let outcome = push_update(&request(&url), |_| {
        calls.set(calls.get() + 1);
        Ok::<_, String>(None)
    })
    .expect("up to date");
    assert_eq!((outcome, calls.get()), (PushOutcome::UpToDate, 1));
    // A message but the same bytes: also up to date.
    let outcome = push_update(&request(&url), |dir| set_manifest(dir, NEW)).expect("same");
    assert_eq!(outcome, PushOutcome::UpToDate);
    // A failing edit pushes nothing.
    let err = push_update(&request(&url), |dir| {
        std::fs::write(dir.join("half-done.yaml"), "x: 1\n").map_err(|e| e.to_string())?;
        Err::<Option<String>, _>("marker names no policy".to_owned())
    })
    .expect_err("edit error");
    assert!(
        matches!(&err, PushError::Edit { message } if message.contains("marker names no policy")),
        "{err}"
    );
    assert_eq!(git_bare(&repo, &["rev-parse", "refs/heads/main"]), commit);

    let missing = PushRequest { branch: "release".into(), ..request(&url) };
    let err = push_update(&missing, |dir| set_manifest(dir, NEW)).expect_err("no such branch");
    assert!(
        matches!(&err, PushError::BranchNotFound { branch, .. } if branch == "release"),
        "{err}"
    );
}

#[test]
fn a_push_race_ends_with_our_commit_on_top_of_theirs() {
    let (_dir, repo) = repository("raced");
    let daemon = daemon_for(&repo);
    let before = git_bare(&repo, &["rev-parse", "refs/heads/main"]);
    let theirs = Cell::new(String::new());
    let calls = Cell::new(0);

    let outcome = push_update(&request(&daemon.url(&repo.name)), |dir| {
        calls.set(calls.get() + 1);
        if calls.get() == 1 {
            // Someone else commits to the branch between our clone and our push.
            theirs.set(
                repo.commit(&[("NOTES.md", "their change\n")], "their change").expect("theirs"),
            );
        }
        set_manifest(dir, NEW)
    })
    .expect("push after the race");
    let PushOutcome::Committed { commit } = outcome else { panic!("{outcome:?}") };
    let theirs = theirs.take();
    assert_eq!(calls.get(), 2, "the edit ran again on the new head");
    assert_eq!(git_bare(&repo, &["rev-parse", "refs/heads/main"]), commit, "ours is the head");
    assert_eq!(git_bare(&repo, &["rev-parse", &format!("{commit}^")]), theirs, "on top of theirs");
    assert_eq!(git_bare(&repo, &["rev-parse", &format!("{commit}^^")]), before);
    assert_eq!(git_bare(&repo, &["show", &format!("{commit}:NOTES.md")]), "their change");
    assert_eq!(git_bare(&repo, &["show", &format!("{commit}:{MANIFEST}")]), NEW.trim_end());
    assert_eq!(git_bare(&repo, &["diff", "--name-only", &theirs, &commit]), MANIFEST);
}

#[test]
fn a_branch_that_keeps_moving_fails_after_the_bounded_attempts() {
    let (_dir, repo) = repository("busy");
    let daemon = daemon_for(&repo);
    let calls = Cell::new(0);
    let req = PushRequest { max_attempts: 3, ..request(&daemon.url(&repo.name)) };
    let err = push_update(&req, |dir| {
        calls.set(calls.get() + 1);
        repo.commit(&[("NOTES.md", &format!("their change {}\n", calls.get()))], "theirs")
            .expect("theirs");
        set_manifest(dir, NEW)
    })
    .expect_err("never lands");
    assert!(matches!(err, PushError::Rejected { attempts: 3, .. }), "{err}");
    assert_eq!(calls.get(), 3);
    assert_eq!(git_bare(&repo, &["show", &format!("refs/heads/main:{MANIFEST}")]), OLD.trim_end());
}

fn basic(password: &str, ca_pem: Option<String>) -> Option<GitAuth> {
    Some(GitAuth::Basic(BasicAuth {
        username: "bot".into(),
        password: SecretString::from(password.to_owned()),
        ca_bundle: ca_pem,
    }))
}

#[test]
fn https_basic_auth_pushes_and_wrong_or_missing_credentials_are_refused_without_leaking() {
    let (_dir, repo) = repository("private");
    let server =
        HttpsGit::start(repo.path.parent().expect("root"), "bot", PASSWORD).expect("https");
    let url = server.url(&repo.name);

    let req = PushRequest {
        credentials: basic(PASSWORD, None),
        ca_certs_pem: Some(server.ca_pem.clone()),
        ..request(&url)
    };
    let outcome = push_update(&req, |dir| {
        // The checkout keeps no credentials: not in its remote URL, nor anywhere in .git.
        for file in ["config", "FETCH_HEAD", "packed-refs"] {
            let text = std::fs::read_to_string(dir.join(".git").join(file)).unwrap_or_default();
            assert!(!text.contains(PASSWORD), "{file}: {text}");
        }
        set_manifest(dir, NEW)
    })
    .expect("https push");
    let PushOutcome::Committed { commit } = outcome else { panic!("{outcome:?}") };
    assert_eq!(git_bare(&repo, &["rev-parse", "refs/heads/main"]), commit);
    assert_eq!(
        git_bare(&repo, &["log", "-1", "--format=%an <%ae>", &commit]),
        format!("{AUTHOR} <{EMAIL}>")
    );

    // The CA may also come with the credentials (a `ca.crt` key).
    let via_secret_ca =
        PushRequest { credentials: basic(PASSWORD, Some(server.ca_pem.clone())), ..request(&url) };
    let outcome =
        push_update(&via_secret_ca, |_| Ok::<_, String>(None)).expect("clone with the Secret's CA");
    assert_eq!(outcome, PushOutcome::UpToDate);

    let wrong = PushRequest { credentials: basic(WRONG_PASSWORD, None), ..req.clone() };
    let err = push_update(&wrong, |dir| set_manifest(dir, OLD)).expect_err("wrong password");
    assert!(matches!(err, PushError::Authentication { .. }), "{err}");
    assert_eq!(err.reason(), FailureReason::AuthenticationFailure);
    let text = format!("{err} {err:?}");
    assert!(!text.contains(WRONG_PASSWORD) && !text.contains(PASSWORD), "{text}");

    let anonymous = PushRequest { credentials: None, ..req.clone() };
    let err = push_update(&anonymous, |dir| set_manifest(dir, OLD)).expect_err("no credentials");
    assert!(matches!(err, PushError::Authentication { .. }), "{err}");

    let untrusted = PushRequest { ca_certs_pem: None, ..req };
    let err = push_update(&untrusted, |dir| set_manifest(dir, OLD)).expect_err("untrusted CA");
    assert!(matches!(err, PushError::Git { .. }), "{err}");
    assert!(!format!("{err:?}").contains(PASSWORD), "{err:?}");
    assert_eq!(git_bare(&repo, &["rev-parse", "refs/heads/main"]), commit, "nothing else landed");
}

#[test]
fn ssh_pushes_with_a_pinned_host_key_and_refuses_a_wrong_one() {
    let (_dir, repo) = repository("viassh");
    let server = SshGit::start(repo.path.parent().expect("root")).expect("sshd");
    let ssh = |known_hosts: String| {
        Some(GitAuth::Ssh(SshAuth {
            private_key: SecretString::from(server.client_key.clone()),
            known_hosts,
        }))
    };
    let req = PushRequest {
        credentials: ssh(server.known_hosts.clone()),
        ..request(&server.url(&repo.name))
    };
    let outcome = push_update(&req, |dir| set_manifest(dir, NEW)).expect("ssh push");
    let PushOutcome::Committed { commit } = outcome else { panic!("{outcome:?}") };
    assert_eq!(git_bare(&repo, &["rev-parse", "refs/heads/main"]), commit);

    let wrong_host =
        PushRequest { credentials: ssh(server.wrong_known_hosts().expect("other key")), ..req };
    let err = push_update(&wrong_host, |dir| set_manifest(dir, OLD)).expect_err("wrong host key");
    assert!(matches!(err, PushError::Authentication { .. }), "{err}");
    let key_line = server.client_key.lines().nth(1).expect("key body");
    assert!(!format!("{err} {err:?}").contains(key_line), "{err}");
}
