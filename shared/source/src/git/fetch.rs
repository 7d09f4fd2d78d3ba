//! One remote interaction with gix: list refs, pick the wanted commit, fetch it shallowly when the
//! cache lacks it.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::Duration,
};

use gix::{
    ObjectId,
    bstr::{BStr, ByteSlice},
    protocol::transport::client::blocking_io::http,
    remote::{Direction, fetch::Shallow, fetch::Tags, ref_map},
};
use secrecy::ExposeSecret;

use super::{
    FetchRequest, GitAuth, GitError, REMOTE_HEAD, is_full_commit, ssh::SshCommand,
    validate_revision,
};
use kuvryn_sync_core::redact::Redactor;

/// Prefix of every ref we write into a cache repository.
const OUR_REFS: &str = "refs/kuvryn";

/// What one interaction found.
#[derive(Debug)]
pub(super) struct Outcome {
    pub commit: ObjectId,
    pub fetched: bool,
    pub refs_listed: u32,
}

/// The wanted revision as refspecs and the remote ref names to look for, in priority order.
struct Wanted {
    refspecs: Vec<String>,
    names: Vec<String>,
    commit: Option<ObjectId>,
}

fn wanted(revision: &str, redactor: &Redactor) -> Result<Wanted, GitError> {
    if is_full_commit(revision) {
        let id = ObjectId::from_hex(revision.to_ascii_lowercase().as_bytes())
            .map_err(|e| GitError::cache(redactor, "parsing commit id", e))?;
        return Ok(Wanted {
            refspecs: vec![format!("{id}:{OUR_REFS}/commits/{id}")],
            names: Vec::new(),
            commit: Some(id),
        });
    }
    validate_revision(revision, redactor)?;
    let names = if revision == REMOTE_HEAD || revision.starts_with("refs/") {
        vec![revision.to_owned()]
    } else {
        vec![format!("refs/heads/{revision}"), format!("refs/tags/{revision}")]
    };
    Ok(Wanted {
        refspecs: names.iter().map(|n| format!("+{n}:{OUR_REFS}/r/{n}")).collect(),
        names,
        commit: None,
    })
}

/// Sets an interrupt flag when the deadline passes, unless dropped first.
struct Watchdog {
    flag: Arc<AtomicBool>,
    _stop: mpsc::Sender<()>,
}

impl Watchdog {
    fn start(timeout: Duration) -> Self {
        let flag = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let thread_flag = flag.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(timeout) {
                thread_flag.store(true, Ordering::SeqCst);
            }
        });
        Self { flag, _stop: stop }
    }

    fn fired(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

/// The full text of an error and its sources.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn looks_like_auth_failure(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    has_status_code(&lower, &["401", "403"])
        || [
            "unauthorized",
            "forbidden",
            "authenticat",
            "credentials",
            "permission denied",
            "publickey",
            "host key verification failed",
            "remote host identification has changed",
            "host key for",
            "no matching host key",
        ]
        .iter()
        .any(|p| lower.contains(p))
}

/// Whether `text` holds one of `codes` as a number of its own: not part of a longer number
/// (a port such as 40173) and not a port itself (`:401`).
fn has_status_code(text: &str, codes: &[&str]) -> bool {
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        if !bytes[start].is_ascii_digit() {
            start += 1;
            continue;
        }
        let end = bytes[start..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(bytes.len(), |n| start + n);
        let after_colon = start > 0 && bytes[start - 1] == b':';
        if !after_colon && codes.contains(&&text[start..end]) {
            return true;
        }
        start = end;
    }
    false
}

/// Scheme, host and port of a URL, for matching credential requests.
fn authority(url: &BStr) -> Option<(String, String, Option<u16>)> {
    let url = gix::url::parse(url).ok()?;
    Some((url.scheme.as_str().to_owned(), url.host()?.to_ascii_lowercase(), url.port_or_default()))
}

/// List refs of `req.url` and fetch the wanted commit into `repo` when it is missing.
pub(super) fn resolve(
    repo: &mut gix::Repository,
    req: &FetchRequest,
    redactor: &Redactor,
    shown_url: &str,
) -> Result<Outcome, GitError> {
    let want = wanted(&req.revision, redactor)?;
    if let Some(id) = want.commit
        && repo.has_object(id)
    {
        ensure_commit(repo, id, req, redactor, shown_url)?;
        return Ok(Outcome { commit: id, fetched: false, refs_listed: 0 });
    }
    match connect_and_fetch(repo, req, redactor, shown_url, &want, Shallow::DepthAtRemote(one())) {
        Ok(outcome) => Ok(outcome),
        // Servers may refuse a commit they do not advertise; fall back to all branches and tags
        // with full history and look for it there.
        Err(GitError::Remote { .. }) if want.commit.is_some() => {
            let all = Wanted {
                refspecs: vec![
                    format!("+refs/heads/*:{OUR_REFS}/all/heads/*"),
                    format!("+refs/tags/*:{OUR_REFS}/all/tags/*"),
                ],
                names: Vec::new(),
                commit: want.commit,
            };
            let shallow =
                if repo.is_shallow().unwrap_or(true) { Shallow::undo() } else { Shallow::NoChange };
            connect_and_fetch(repo, req, redactor, shown_url, &all, shallow)
        }
        Err(err) => Err(err),
    }
}

/// For `git://` remotes, our own TCP connection: gix's writes several small packet lines per
/// request, and with Nagle's algorithm on, each request then waits for the server's delayed ACK
/// (about 40 ms on Linux, twice per fetch). `TCP_NODELAY` removes that wait, and socket timeouts
/// bound a server that stops answering mid-listing. Other schemes return `None` and use gix's
/// own transports.
fn git_daemon_transport(
    req: &FetchRequest,
) -> Option<std::io::Result<Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>>>
{
    use gix::protocol::transport::client::git::{ConnectMode, blocking_io::Connection};
    use std::net::{TcpStream, ToSocketAddrs};
    let url = gix::url::parse(req.url.as_bytes().as_bstr()).ok()?;
    if url.scheme != gix::url::Scheme::Git {
        return None;
    }
    let host = url.host()?.to_owned();
    let port = url.port;
    let connect = || -> std::io::Result<Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>> {
        let addr = (host.as_str(), port.unwrap_or(9418))
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address for the host"))?;
        let read = TcpStream::connect_timeout(&addr, req.timeout)?;
        read.set_nodelay(true)?;
        read.set_read_timeout(Some(req.timeout))?;
        read.set_write_timeout(Some(req.timeout))?;
        let write = read.try_clone()?;
        Ok(Box::new(Connection::new(
            read,
            write,
            gix::protocol::transport::Protocol::V2,
            url.path.clone(),
            Some((host.clone(), port)),
            ConnectMode::Daemon,
            false,
        )))
    };
    Some(connect())
}

fn one() -> std::num::NonZeroU32 {
    std::num::NonZeroU32::MIN
}

fn ensure_commit(
    repo: &gix::Repository,
    id: ObjectId,
    req: &FetchRequest,
    redactor: &Redactor,
    shown_url: &str,
) -> Result<(), GitError> {
    match repo.find_object(id) {
        Ok(object) if object.kind == gix::object::Kind::Commit => Ok(()),
        Ok(_) => Err(GitError::RevisionNotFound {
            revision: redactor.redact(&format!("{} (does not name a commit)", req.revision)),
            url: shown_url.to_owned(),
        }),
        Err(_) => Err(revision_not_found(req, redactor, shown_url)),
    }
}

/// One remote interaction: connect, list refs, pick the wanted commit and, when the cache lacks
/// it, receive a pack with `shallow` (gix writes the fetched refs under [`OUR_REFS`]).
fn connect_and_fetch(
    repo: &mut gix::Repository,
    req: &FetchRequest,
    redactor: &Redactor,
    shown_url: &str,
    want: &Wanted,
    shallow: Shallow,
) -> Result<Outcome, GitError> {
    let ssh = ssh_command(req, redactor)?;
    configure_cache_repository(repo, ssh.as_ref(), redactor)?;
    let repo = &*repo;
    let watchdog = Watchdog::start(req.timeout);
    let fail = RemoteFailure { req, redactor, shown_url, ssh: ssh.as_ref(), watchdog: &watchdog };

    let remote = repo
        .remote_at_without_url_rewrite(req.url.as_str())
        .map_err(|e| fail.error(&e))?
        .with_fetch_tags(Tags::None)
        .with_refspecs(want.refspecs.iter().map(String::as_str), Direction::Fetch)
        .map_err(|e| fail.error(&e))?;
    let connection = connect(&remote, req, redactor, &fail)?;
    // The handshake and the ref listing.
    let prepare = connection
        .prepare_fetch(gix::progress::Discard, ref_map::Options::default())
        .map_err(|e| fail.error(&e))?;
    let refs_listed = 1;
    let commit = match want.commit {
        Some(id) => id,
        None => find_wanted_ref(&prepare.ref_map().remote_refs, want)
            .ok_or_else(|| revision_not_found(req, redactor, shown_url))?,
    };
    if repo.has_object(commit) {
        // The wanted ref did not move: no fetch.
        drop(prepare);
        ensure_commit(repo, commit, req, redactor, shown_url)?;
        return Ok(Outcome { commit, fetched: false, refs_listed });
    }
    prepare
        .with_shallow(shallow)
        .receive(gix::progress::Discard, &watchdog.flag)
        .map_err(|e| fail.error(&e))?;
    drop(ssh);
    if !repo.has_object(commit) {
        return Err(revision_not_found(req, redactor, shown_url));
    }
    ensure_commit(repo, commit, req, redactor, shown_url)?;
    Ok(Outcome { commit, fetched: true, refs_listed })
}

/// The ssh wrapper for this request: with the configured key and known hosts, or, for an ssh
/// remote without ssh credentials, still the strict wrapper (batch mode, no agent, no user
/// config, nothing in known_hosts). `None` for other remotes.
fn ssh_command(req: &FetchRequest, redactor: &Redactor) -> Result<Option<SshCommand>, GitError> {
    let prepare = |key: &secrecy::SecretString, known_hosts: &str| {
        SshCommand::prepare(key, known_hosts, req.timeout)
            .map(Some)
            .map_err(|e| GitError::cache(redactor, "preparing ssh", e))
    };
    match &req.credentials {
        Some(GitAuth::Ssh(ssh)) => prepare(&ssh.private_key, &ssh.known_hosts),
        None | Some(GitAuth::Basic(_)) => {
            let is_ssh = gix::url::parse(req.url.as_bytes().as_bstr())
                .is_ok_and(|u| u.scheme == gix::url::Scheme::Ssh);
            if is_ssh { prepare(&secrecy::SecretString::from(""), "") } else { Ok(None) }
        }
    }
}

/// The repository is opened isolated (no system, global or environment configuration); these
/// in-memory settings are the only ones that apply. Non-ssh remotes never spawn ssh, so the
/// command then points at a program that does not exist.
fn configure_cache_repository(
    repo: &mut gix::Repository,
    ssh: Option<&SshCommand>,
    redactor: &Redactor,
) -> Result<(), GitError> {
    let failed = |e| GitError::cache(redactor, "configuring the cache repository", e);
    let program = ssh.map_or_else(
        || "/nonexistent/ssh".to_owned(),
        |s| s.program().to_string_lossy().into_owned(),
    );
    let mut config = repo.config_snapshot_mut();
    config
        .append_config(
            [
                format!("gitoxide.ssh.commandWithoutShellFallback={program}").as_str(),
                "ssh.variant=ssh",
                "http.followRedirects=false",
                "credential.helper=",
                "protocol.version=2",
            ],
            gix::config::Source::Api,
        )
        .map_err(failed)?;
    config.commit().map_err(failed)?;
    Ok(())
}

/// Turns a failed remote step into a [`GitError`]: with ssh's stderr, marked when the deadline
/// had passed, redacted and truncated, and [`GitError::Authentication`] when it looks like one.
struct RemoteFailure<'a> {
    req: &'a FetchRequest,
    redactor: &'a Redactor,
    shown_url: &'a str,
    ssh: Option<&'a SshCommand>,
    watchdog: &'a Watchdog,
}

impl RemoteFailure<'_> {
    fn error(&self, err: &(dyn std::error::Error + 'static)) -> GitError {
        let mut text = chain(err);
        let stderr = self.ssh.map(SshCommand::stderr).unwrap_or_default();
        if !stderr.is_empty() {
            text.push_str(" (ssh: ");
            text.push_str(&stderr);
            text.push(')');
        }
        if self.watchdog.fired() {
            text = format!("timed out after {:?}: {text}", self.req.timeout);
        }
        let message = self.redactor.redact(&kuvryn_sync_core::redact::truncate(&text, 2000));
        let url = self.shown_url.to_owned();
        if !looks_like_auth_failure(&text) {
            return GitError::Remote { url, message };
        }
        let message = if self.req.credentials.is_none() {
            format!("the remote requires credentials and none are configured ({message})")
        } else {
            message
        };
        GitError::Authentication { url, message }
    }
}

type Transport = Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>;

/// Open a connection to `remote` (our own TCP connection for `git://`, gix's transports
/// otherwise) with the HTTP options and the credential callback set. Nothing is sent yet.
fn connect<'remote, 'repo>(
    remote: &'remote gix::Remote<'repo>,
    req: &FetchRequest,
    redactor: &Redactor,
    fail: &RemoteFailure<'_>,
) -> Result<gix::remote::Connection<'remote, 'static, 'repo, Transport>, GitError> {
    let mut connection = match git_daemon_transport(req) {
        Some(transport) => {
            remote.to_connection_with_transport(transport.map_err(|e| fail.error(&e))?)
        }
        None => remote.connect(Direction::Fetch).map_err(|e| fail.error(&e))?,
    };
    let is_http = matches!(
        remote.url(Direction::Fetch).map(|u| u.scheme.clone()),
        Some(gix::url::Scheme::Http | gix::url::Scheme::Https)
    );
    if is_http {
        connection.set_transport_options(Box::new(http_options(req, redactor)?));
    }
    let expected = authority(req.url.as_bytes().as_bstr());
    let basic = match &req.credentials {
        Some(GitAuth::Basic(basic)) => Some((basic.username.clone(), basic.password.clone())),
        _ => None,
    };
    connection.set_credentials(move |action| {
        use gix::credentials::helper::Action;
        match action {
            Action::Get(ctx) => Ok(basic_credentials(basic.as_ref(), expected.as_ref(), ctx)),
            Action::Store(_) | Action::Erase(_) => Ok(None),
        }
    });
    Ok(connection)
}

/// The configured user name and password, only when the remote asks for exactly the configured
/// scheme, host and port.
fn basic_credentials(
    basic: Option<&(String, secrecy::SecretString)>,
    expected: Option<&(String, String, Option<u16>)>,
    ctx: gix::credentials::protocol::Context,
) -> Option<gix::credentials::protocol::Outcome> {
    let (username, password) = basic?;
    let asked = ctx
        .url
        .as_ref()
        .and_then(|u| authority(u.as_bstr()))
        .or_else(|| ctx.to_url().and_then(|u| authority(u.as_bstr())));
    if asked.is_none() || asked.as_ref() != expected {
        return None;
    }
    Some(gix::credentials::protocol::Outcome {
        identity: gix::sec::identity::Account {
            username: username.clone(),
            password: password.expose_secret().to_owned(),
            oauth_refresh_token: None,
        },
        next: ctx.into(),
    })
}

/// The commit of the first wanted ref name the remote advertises (peeled for annotated tags).
fn find_wanted_ref(
    remote_refs: &[gix::protocol::handshake::Ref],
    want: &Wanted,
) -> Option<ObjectId> {
    want.names.iter().find_map(|name| {
        remote_refs.iter().find_map(|r| {
            let (ref_name, target, peeled) = r.unpack();
            (ref_name == name.as_bytes().as_bstr())
                .then(|| peeled.or(target).map(ToOwned::to_owned))?
        })
    })
}

fn revision_not_found(req: &FetchRequest, redactor: &Redactor, shown_url: &str) -> GitError {
    GitError::RevisionNotFound {
        revision: redactor.redact(&req.revision),
        url: shown_url.to_owned(),
    }
}

fn http_options(req: &FetchRequest, redactor: &Redactor) -> Result<http::Options, GitError> {
    let extra_roots = match &req.ca_certs_pem {
        Some(pem) => reqwest::Certificate::from_pem_bundle(pem.as_bytes())
            .map_err(|e| GitError::cache(redactor, "reading the CA certificates", e))?,
        None => Vec::new(),
    };
    let timeout = req.timeout;
    let backend = http::reqwest::Options {
        configure_client: Some(Box::new(move |builder: reqwest::blocking::ClientBuilder| {
            Ok(builder
                .timeout(timeout)
                .connect_timeout(timeout)
                .tls_certs_merge(extra_roots.clone()))
        })),
        configure_request: None,
    };
    Ok(http::Options {
        follow_redirects: http::options::FollowRedirects::None,
        connect_timeout: Some(timeout),
        user_agent: Some("kuvryn-sync".into()),
        backend: Some(Arc::new(Mutex::new(backend))),
        ..Default::default()
    })
}

#[cfg(test)]
mod auth_failure_tests {
    use super::looks_like_auth_failure;

    #[test]
    fn status_codes_count_only_as_numbers_of_their_own() {
        let cases = [
            ("received http status 401", true),
            ("http 403 forbidden", true),
            (
                "error sending request for url (https://127.0.0.1:40173/x): connection refused",
                false,
            ),
            ("tcp connect error to 127.0.0.1:401: connection refused", false),
            ("timed out after 4030ms", false),
            ("permission denied (publickey)", true),
            ("connection reset by peer", false),
        ];
        for (text, auth) in cases {
            assert_eq!(looks_like_auth_failure(text), auth, "{text}");
        }
    }
}
