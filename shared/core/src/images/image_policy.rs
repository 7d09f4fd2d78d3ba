//! ImagePolicy decisions: which tag a policy selects from a repository's tag list, the status and
//! Events a scan writes, and the registry login a `kubernetes.io/dockerconfigjson` Secret gives.
//! Pure: the controller lists the tags and resolves the digest (registry I/O), reads the Secret,
//! and performs the [`ScanDecision`].
//!
//! Selection rules ([`compile`], then [`select`]):
//! - `spec.policy` sets exactly one of `semver`, `tagPattern` and `digest`. The CRD enforces it;
//!   [`compile`] checks it again, so an object stored before the rule still gets a clear error.
//! - Only tags that follow the distribution grammar (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`) are
//!   considered; anything else a registry returns is ignored, so no odd string can reach a status
//!   or a written-back file.
//! - **semver**: `range` is an npm range (`>=1.2.0 <2.0.0`, `^1.2`, `~1.4.0`, `1.x`, `||`), parsed
//!   with `nodejs-semver` (the `semver` crate rejects space-separated comparators). Tags that are
//!   strict semantic versions `MAJOR.MINOR.PATCH[-PRERELEASE]`, optionally written with a `v`
//!   prefix, take part; other tags are ignored. The highest satisfying version wins and the
//!   selected tag is the tag as written (`v1.2.3`, not `1.2.3`). Pre-releases follow npm: a
//!   pre-release satisfies the range only when a comparator of the range names a pre-release of
//!   the same `MAJOR.MINOR.PATCH` (`>=1.4.0-rc.0` allows `1.4.0-rc.1`, not `1.5.0-rc.1`).
//!   Equal versions (`1.2.0` and `v1.2.0`) are decided by preferring the tag without the `v`,
//!   then the greatest tag in byte order.
//! - **tagPattern**: tags in which `regex` finds a match take part (anchor it with `^` and `$` to
//!   match whole tags). Each is sorted by its sort key: the text of the regex's first capture
//!   group, or the whole tag when the regex has no group (an optional group that did not take
//!   part gives the empty text). `alphabetical` (default) sorts the keys in byte order;
//!   `numerical` reads each key as a non-negative decimal number (`42`, `007`, `1.5`, compared
//!   exactly, however long) and ignores tags whose key is not one. The last tag wins; equal keys
//!   are decided by the whole tag in byte order. The regex is compiled with `regex` (linear time,
//!   no look-around or back-references) under a size limit.
//! - **digest**: the fixed `tag` is selected when the repository has it; the controller then
//!   resolves its current digest, so a re-pushed tag is followed.
//! - No tag selected is an error that says how many tags were seen and which rule chose none.
//!
//! Status rules ([`decide_scan`]):
//! - A successful scan sets `latestTag`, `latestDigest`, `latestImage` ([`image_reference`],
//!   `image:tag@digest`), `lastScannedAt` (every successful read, so a successful scan always
//!   writes the status) and `Ready=True/Selected` naming the image.
//! - A failed scan sets `Ready=False/ScanFailed` with the message (redacted by the caller, masked
//!   for URL credentials and secret shapes here, truncated to [`MAX_MESSAGE`]) and keeps the last
//!   selection and `lastScannedAt`, so write-back keeps using the last known image.
//! - `observedGeneration` (of the status and of the condition) is `metadata.generation`.
//! - `ImageSelected` is recorded only when the selected image (tag or digest) changes, never on a
//!   scan that finds the same one. A failure records no Event (the API reference defines none).
//! - The next scan is due after `spec.interval` ([`scan_interval`]), after a failure too. An
//!   interval that does not parse, or is zero, fails the scan with a message naming
//!   `spec.interval`, whatever the scan found, and the next try is after the default 5m.
//!
//! Registry credentials ([`registry_login`]):
//! - Only a Secret labelled `sync.kuvryn.io/registry-credentials: "true"` and of type
//!   `kubernetes.io/dockerconfigjson` is used; anything else is refused naming the Secret, the
//!   rule and the fix.
//! - Its `.dockerconfigjson` is read for the `auths` entry of the registry host. Keys may be
//!   `host`, `host:port`, `https://host`, `https://host/v1/` and so on: the host and port of the
//!   key must equal the registry's, compared case-insensitively; a port is never implied (`host`
//!   does not match `host:443`). `docker.io`, `index.docker.io` and `registry-1.docker.io` are the
//!   same registry (Docker Hub). An entry gives `auth` (base64 of `user:password`), which wins as
//!   it does for the Docker CLI, or `username` and `password`. `credsStore` and `credHelpers` are
//!   ignored: credential helpers are programs, and a Secret must never make the controller run
//!   one. Without an entry for the host the scan is anonymous (`Ok(None)`). Several keys for the
//!   same host must agree.
//! - Errors name the Secret and the `auths` key, never a user name, password or `auth` value;
//!   the password is a [`SecretString`], hidden from `Debug`.

use std::cmp::Ordering;
use std::sync::LazyLock;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodejs_semver::{Range, Version};
use regex::{Regex, RegexBuilder};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use kuvryn_sync_api::{
    ConditionReason, ConditionType, DEFAULT_SCAN_INTERVAL, EventReason, ImagePolicy,
    ImagePolicySpec, ImagePolicyStatus, TagOrder, TagPolicy, keys,
};

use crate::conditions::{self, NewCondition, Status};
use crate::credentials::secret_values;
use crate::duration::{self, InvalidDuration};
use crate::redact::{self, Redactor};

/// Longest condition or Event message we write.
pub const MAX_MESSAGE: usize = 1024;

/// Size limit of a compiled `tagPattern.regex` (bytes of the compiled program and of the lazy
/// DFA cache), so a pattern like `(a{1000}){1000}` is refused instead of eating memory.
pub const MAX_REGEX_SIZE: usize = 1 << 20;

/// `type` a registry credentials Secret must have.
pub const DOCKER_CONFIG_JSON_TYPE: &str = "kubernetes.io/dockerconfigjson";

/// Key of the Docker configuration in a `kubernetes.io/dockerconfigjson` Secret.
pub const DOCKER_CONFIG_JSON_KEY: &str = ".dockerconfigjson";

/// The names Docker Hub goes by in image references and `auths` keys.
const DOCKER_HUB_HOSTS: &[&str] = &["docker.io", "index.docker.io", "registry-1.docker.io"];

/// A tag as the distribution specification allows it.
static TAG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$").expect("valid regex"));

/// A strict semantic version with an optional `v` prefix. Checked before `nodejs-semver` parses
/// the tag, because its version parser is loose (it accepts `1.2.3.4` and leading zeros).
static SEMVER_TAG: LazyLock<Regex> = LazyLock::new(|| {
    let number = "(?:0|[1-9][0-9]*)";
    let identifier = "(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)";
    Regex::new(&format!(
        r"^v?{number}\.{number}\.{number}(?:-{identifier}(?:\.{identifier})*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
    ))
    .expect("valid regex")
});

/// A non-negative decimal number, the sort key of `order: numerical`.
static DECIMAL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([0-9]+)(?:\.([0-9]+))?$").expect("valid regex"));

/// A manifest digest, `algorithm:encoded` as the OCI image specification defines it.
static DIGEST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[A-Za-z0-9=_-]{32,}$").expect("valid regex")
});

// ---------------------------------------------------------------------------------------------
// Selection
// ---------------------------------------------------------------------------------------------

/// A `spec.policy` checked and ready to select tags.
#[derive(Clone, Debug)]
pub enum CompiledPolicy {
    /// `semver.range`.
    Semver {
        /// The parsed range.
        range: Range,
        /// The range as written, for messages.
        text: String,
    },
    /// `tagPattern`.
    TagPattern {
        /// The compiled `regex`.
        regex: Regex,
        /// `order`.
        order: TagOrder,
    },
    /// `digest.tag`.
    Digest {
        /// The tag to follow.
        tag: String,
    },
}

/// Why a `spec.policy` cannot select anything.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// None of the three is set.
    #[error("spec.policy sets none of semver, tagPattern and digest; set exactly one of them")]
    NoPolicy,
    /// More than one is set.
    #[error(
        "spec.policy sets {set}; set exactly one of semver, tagPattern and digest and remove the others"
    )]
    SeveralPolicies {
        /// The ones set, such as `semver and digest`.
        set: String,
    },
    /// `semver.range` is blank.
    #[error(
        "spec.policy.semver.range is empty; write an npm-style range such as \">=1.2.0 <2.0.0\""
    )]
    EmptyRange,
    /// `semver.range` does not parse.
    #[error(
        "spec.policy.semver.range {range:?} is not a semver range; write an npm-style range such as \">=1.2.0 <2.0.0\", \"^1.2\" or \"~1.4.0\""
    )]
    InvalidRange {
        /// The range as written.
        range: String,
    },
    /// `tagPattern.regex` does not compile.
    #[error(
        "spec.policy.tagPattern.regex {regex:?} is not a valid regular expression ({detail}); fix it: the syntax is that of the Rust regex crate (like RE2), without look-around or back-references"
    )]
    InvalidRegex {
        /// The regex as written.
        regex: String,
        /// What the regex compiler said.
        detail: String,
    },
    /// `digest.tag` is not a tag.
    #[error(
        "spec.policy.digest.tag {tag:?} is not a valid tag; a tag is 1 to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'"
    )]
    InvalidTag {
        /// The tag as written.
        tag: String,
    },
}

/// Why no tag was selected. Each message says how many tags the registry listed and which rule
/// selected none of them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// No semantic version satisfies the range.
    #[error(
        "none of the {seen} tags satisfies spec.policy.semver.range {range:?} ({versions} of them are semantic versions; a pre-release counts only when the range names a pre-release of the same version); push a matching tag or change the range"
    )]
    NoSemverMatch {
        /// Tags listed.
        seen: usize,
        /// Of them, semantic versions.
        versions: usize,
        /// The range as written.
        range: String,
    },
    /// No tag matches the regex.
    #[error(
        "none of the {seen} tags matches spec.policy.tagPattern.regex {regex:?}; push a matching tag or change the regex"
    )]
    NoPatternMatch {
        /// Tags listed.
        seen: usize,
        /// The regex as written.
        regex: String,
    },
    /// Tags match, but none has a number to sort by.
    #[error(
        "{matched} of the {seen} tags match spec.policy.tagPattern.regex {regex:?}, but in none of them is the sort key (the first capture group, or the whole tag without one) a decimal number, which order: numerical needs; capture the number, as in ^main-(\\d+)$, or use order: alphabetical"
    )]
    NoNumber {
        /// Tags listed.
        seen: usize,
        /// Of them, matching the regex.
        matched: usize,
        /// The regex as written.
        regex: String,
    },
    /// The fixed tag is not in the list.
    #[error(
        "tag {tag:?} of spec.policy.digest.tag is not among the {seen} tags of the repository; push it or change spec.policy.digest.tag"
    )]
    TagNotFound {
        /// Tags listed.
        seen: usize,
        /// The tag followed.
        tag: String,
    },
}

/// Check `policy` and compile its range or regex.
pub fn compile(policy: &TagPolicy) -> Result<CompiledPolicy, PolicyError> {
    match (&policy.semver, &policy.tag_pattern, &policy.digest) {
        (Some(semver), None, None) => {
            let text = semver.range.trim();
            if text.is_empty() {
                return Err(PolicyError::EmptyRange);
            }
            let range = Range::parse(text)
                .map_err(|_| PolicyError::InvalidRange { range: semver.range.clone() })?;
            Ok(CompiledPolicy::Semver { range, text: semver.range.clone() })
        }
        (None, Some(pattern), None) => {
            let regex = RegexBuilder::new(&pattern.regex)
                .size_limit(MAX_REGEX_SIZE)
                .dfa_size_limit(MAX_REGEX_SIZE)
                .build()
                .map_err(|e| PolicyError::InvalidRegex {
                    regex: pattern.regex.clone(),
                    detail: one_line(&e.to_string()),
                })?;
            Ok(CompiledPolicy::TagPattern { regex, order: pattern.order })
        }
        (None, None, Some(digest)) => {
            if !TAG.is_match(&digest.tag) {
                return Err(PolicyError::InvalidTag { tag: digest.tag.clone() });
            }
            Ok(CompiledPolicy::Digest { tag: digest.tag.clone() })
        }
        (None, None, None) => Err(PolicyError::NoPolicy),
        (semver, pattern, digest) => {
            let set: Vec<&str> = [
                semver.as_ref().map(|_| "semver"),
                pattern.as_ref().map(|_| "tagPattern"),
                digest.as_ref().map(|_| "digest"),
            ]
            .into_iter()
            .flatten()
            .collect();
            Err(PolicyError::SeveralPolicies { set: set.join(" and ") })
        }
    }
}

/// The regex compiler's multi-line diagnostics on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Select a tag from a repository's `tags` by `policy`, as the module documentation says.
pub fn select(policy: &CompiledPolicy, tags: &[String]) -> Result<String, SelectError> {
    let seen = tags.len();
    let valid = || tags.iter().filter(|t| TAG.is_match(t));
    match policy {
        CompiledPolicy::Semver { range, text } => {
            let mut versions = 0;
            let mut best: Option<(Version, bool, &String)> = None;
            for tag in valid() {
                let Some(version) = semver_tag(tag) else { continue };
                versions += 1;
                if !version.satisfies(range) {
                    continue;
                }
                let candidate = (version, !tag.starts_with('v'), tag);
                if best.as_ref().is_none_or(|b| candidate > *b) {
                    best = Some(candidate);
                }
            }
            best.map(|(_, _, tag)| tag.clone()).ok_or_else(|| SelectError::NoSemverMatch {
                seen,
                versions,
                range: text.clone(),
            })
        }
        CompiledPolicy::TagPattern { regex, order } => {
            let has_group = regex.captures_len() > 1;
            let mut matched = 0;
            let mut best: Option<(SortKey<'_>, &String)> = None;
            for tag in valid() {
                let Some(captures) = regex.captures(tag) else { continue };
                matched += 1;
                let text = if has_group {
                    captures.get(1).map_or("", |m| m.as_str())
                } else {
                    tag.as_str()
                };
                let key = match order {
                    TagOrder::Alphabetical => SortKey::Text(text),
                    TagOrder::Numerical => match decimal(text) {
                        Some(number) => SortKey::Number(number),
                        None => continue,
                    },
                };
                let candidate = (key, tag);
                if best.as_ref().is_none_or(|b| candidate > *b) {
                    best = Some(candidate);
                }
            }
            match best {
                Some((_, tag)) => Ok(tag.clone()),
                None if matched == 0 => {
                    Err(SelectError::NoPatternMatch { seen, regex: regex.as_str().to_owned() })
                }
                None => {
                    Err(SelectError::NoNumber { seen, matched, regex: regex.as_str().to_owned() })
                }
            }
        }
        CompiledPolicy::Digest { tag } => valid()
            .find(|t| *t == tag)
            .cloned()
            .ok_or_else(|| SelectError::TagNotFound { seen, tag: tag.clone() }),
    }
}

/// The version of a tag that is a strict semantic version, with or without a `v` prefix.
fn semver_tag(tag: &str) -> Option<Version> {
    if !SEMVER_TAG.is_match(tag) {
        return None;
    }
    Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// A tag's sort key under `tagPattern`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SortKey<'a> {
    Text(&'a str),
    Number(Decimal<'a>),
}

/// A non-negative decimal number as digit strings, compared exactly: the whole part without
/// leading zeros, the fraction without trailing zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decimal<'a> {
    whole: &'a str,
    fraction: &'a str,
}

impl Ord for Decimal<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.whole
            .len()
            .cmp(&other.whole.len())
            .then_with(|| self.whole.cmp(other.whole))
            .then_with(|| self.fraction.cmp(other.fraction))
    }
}

impl PartialOrd for Decimal<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn decimal(text: &str) -> Option<Decimal<'_>> {
    let captures = DECIMAL.captures(text)?;
    let whole = captures.get(1)?.as_str().trim_start_matches('0');
    let fraction = captures.get(2).map_or("", |m| m.as_str()).trim_end_matches('0');
    Some(Decimal { whole, fraction })
}

/// The immutable reference of a selection, `image:tag@digest` (`status.latestImage`).
pub fn image_reference(image: &str, tag: &str, digest: &str) -> String {
    format!("{image}:{tag}@{digest}")
}

/// Whether `digest` is a manifest digest (`algorithm:encoded`, such as `sha256:` and 64 hex
/// digits).
pub fn is_digest(digest: &str) -> bool {
    DIGEST.is_match(digest)
}

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

/// `spec.interval` that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IntervalError {
    /// It does not parse.
    #[error("spec.interval: {0}")]
    Invalid(#[from] InvalidDuration),
    /// It is zero, which would scan without pause.
    #[error("spec.interval is {text:?}, which is zero; set a positive interval such as 5m")]
    Zero {
        /// The interval as written.
        text: String,
    },
}

/// How long to wait between scans: `spec.interval`.
pub fn scan_interval(spec: &ImagePolicySpec) -> Result<Duration, IntervalError> {
    let interval = duration::parse(&spec.interval)?;
    if interval.is_zero() {
        return Err(IntervalError::Zero { text: spec.interval.clone() });
    }
    Ok(interval)
}

/// The default scan interval, for an interval that cannot be used.
fn default_interval() -> Duration {
    duration::parse(DEFAULT_SCAN_INTERVAL).unwrap_or(Duration::from_secs(300))
}

/// What one scan found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanOutcome {
    /// The policy selected `tag`, whose manifest digest is `digest`.
    Selected {
        /// The selected tag.
        tag: String,
        /// Its manifest digest, as the registry reported it.
        digest: String,
    },
    /// The spec, the credentials, the registry or the selection failed; `message` is already
    /// redacted with the credentials the scan used.
    Failed {
        /// What went wrong.
        message: String,
    },
}

/// What a scan writes.
#[derive(Clone, Debug, PartialEq)]
pub struct ScanDecision {
    /// The new status, or `None` when it equals the current one (no write).
    pub status: Option<ImagePolicyStatus>,
    /// Events to record (reason, message).
    pub events: Vec<(EventReason, String)>,
    /// When to scan next.
    pub requeue_after: Duration,
}

/// Decide the status, Events and next scan of `policy` after `outcome`, at `now`.
pub fn decide_scan(policy: &ImagePolicy, outcome: &ScanOutcome, now: &Time) -> ScanDecision {
    let generation = policy.metadata.generation;
    let current = policy.status.clone().unwrap_or_default();
    let mut status = current.clone();
    status.observed_generation = generation;

    let (requeue_after, outcome) = match scan_interval(&policy.spec) {
        Ok(interval) => (interval, checked(outcome)),
        Err(e) => (default_interval(), ScanOutcome::Failed { message: e.to_string() }),
    };

    let mut events = Vec::new();
    let (condition_status, reason, message) = match &outcome {
        ScanOutcome::Selected { tag, digest } => {
            let image = image_reference(&policy.spec.image, tag, digest);
            if current.latest_image.as_deref() != Some(image.as_str()) {
                let message = match &current.latest_image {
                    Some(previous) => format!("selected {image} (was {previous})"),
                    None => format!("selected {image}"),
                };
                events.push((EventReason::ImageSelected, truncate(&message)));
            }
            status.latest_tag = Some(tag.clone());
            status.latest_digest = Some(digest.clone());
            status.latest_image = Some(image.clone());
            status.last_scanned_at = Some(now.clone());
            (Status::True, ConditionReason::Selected, format!("selected {image}"))
        }
        ScanOutcome::Failed { message } => {
            (Status::False, ConditionReason::ScanFailed, message.clone())
        }
    };
    conditions::set(
        &mut status.conditions,
        NewCondition {
            type_: ConditionType::Ready,
            status: condition_status,
            reason: reason.as_str(),
            message: truncate(&message),
            observed_generation: generation,
        },
        now,
    );
    ScanDecision { status: (status != current).then_some(status), events, requeue_after }
}

/// A selection whose tag or digest a registry could not have meant is a failed scan.
fn checked(outcome: &ScanOutcome) -> ScanOutcome {
    match outcome {
        ScanOutcome::Selected { tag, .. } if !TAG.is_match(tag) => ScanOutcome::Failed {
            message: "the registry returned a tag that is not a valid tag; the selection is ignored"
                .to_owned(),
        },
        ScanOutcome::Selected { digest, .. } if !is_digest(digest) => ScanOutcome::Failed {
            message: "the registry returned a manifest digest that is not algorithm:hex; the selection is ignored"
                .to_owned(),
        },
        other => other.clone(),
    }
}

fn truncate(message: &str) -> String {
    redact::truncate(&redact::redact_shapes(message), MAX_MESSAGE)
}

// ---------------------------------------------------------------------------------------------
// Registry credentials
// ---------------------------------------------------------------------------------------------

/// A user name and password for one registry host. `Debug` shows the user name only.
#[derive(Clone, Debug)]
pub struct RegistryLogin {
    /// Basic-auth user name (also sent when a registry's token service asks for basic auth).
    pub username: String,
    /// Password or access token.
    pub password: SecretString,
}

impl RegistryLogin {
    /// A redactor masking the password and the `auth` form of the login (base64 of
    /// `user:password`), in every encoding the redactor knows.
    pub fn redactor(&self) -> Redactor {
        Redactor::new().with_secret(self.password.expose_secret()).with_secret(&format!(
            "{}:{}",
            self.username,
            self.password.expose_secret()
        ))
    }
}

/// Why a Secret cannot serve as registry credentials. Messages name the Secret and the `auths`
/// key, never a value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryLoginError {
    /// The Secret lacks the label.
    #[error(
        "Secret {secret} is not labelled sync.kuvryn.io/registry-credentials: \"true\"; add the label to allow it as registry credentials"
    )]
    NotLabelled {
        /// `namespace/name`.
        secret: String,
    },
    /// The label has another value.
    #[error(
        "Secret {secret} has label sync.kuvryn.io/registry-credentials: {value:?}, not \"true\"; set it to \"true\" to allow it as registry credentials"
    )]
    WrongLabelValue {
        /// `namespace/name`.
        secret: String,
        /// The label's value (at most 32 characters).
        value: String,
    },
    /// The Secret is of another type.
    #[error(
        "Secret {secret} has type {found:?}; registry credentials need a Secret of type kubernetes.io/dockerconfigjson (kubectl create secret docker-registry)"
    )]
    WrongType {
        /// `namespace/name`.
        secret: String,
        /// The type found (empty when unset).
        found: String,
    },
    /// `.dockerconfigjson` is missing, not text or not a JSON object with an `auths` object.
    #[error("Secret {secret}: key .dockerconfigjson {problem}; store a Docker config.json there")]
    InvalidConfig {
        /// `namespace/name`.
        secret: String,
        /// What is wrong, without quoting the content.
        problem: String,
    },
    /// The `auths` entry for the host cannot be used.
    #[error(
        "Secret {secret}: the .dockerconfigjson auths entry {key:?} {problem}; give it auth (base64 of user:password) or username and password"
    )]
    InvalidEntry {
        /// `namespace/name`.
        secret: String,
        /// The `auths` key (a registry host, not a secret).
        key: String,
        /// What is wrong, without quoting a value.
        problem: &'static str,
    },
    /// Several `auths` keys name the host with different credentials.
    #[error(
        "Secret {secret}: the .dockerconfigjson auths entries {keys} all name registry {host} but hold different credentials; keep one"
    )]
    Ambiguous {
        /// `namespace/name`.
        secret: String,
        /// The registry host.
        host: String,
        /// The keys, quoted and comma-separated.
        keys: String,
    },
}

/// `namespace/name` of a Secret.
fn secret_id(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Refuse a Secret without `sync.kuvryn.io/registry-credentials: "true"`.
pub fn check_registry_label(secret: &Secret) -> Result<(), RegistryLoginError> {
    match secret.metadata.labels.as_ref().and_then(|l| l.get(keys::REGISTRY_CREDENTIALS)) {
        Some(value) if value == keys::TRUE => Ok(()),
        Some(value) => Err(RegistryLoginError::WrongLabelValue {
            secret: secret_id(secret),
            value: value.chars().take(32).collect(),
        }),
        None => Err(RegistryLoginError::NotLabelled { secret: secret_id(secret) }),
    }
}

/// The login `secret` holds for `registry_host` (`host` or `host:port`, as in the image
/// reference), or `None` for anonymous access; see the module documentation.
pub fn registry_login(
    secret: &Secret,
    registry_host: &str,
) -> Result<Option<RegistryLogin>, RegistryLoginError> {
    check_registry_label(secret)?;
    let id = secret_id(secret);
    let found = secret.type_.as_deref().unwrap_or_default();
    if found != DOCKER_CONFIG_JSON_TYPE {
        return Err(RegistryLoginError::WrongType { secret: id, found: found.to_owned() });
    }
    let invalid =
        |problem: String| RegistryLoginError::InvalidConfig { secret: id.clone(), problem };
    let values = secret_values(secret);
    let raw = values.get(DOCKER_CONFIG_JSON_KEY).ok_or_else(|| invalid("is missing".to_owned()))?;
    // Only the position of a syntax error is reported: serde_json's messages may quote content.
    let config: Value = serde_json::from_slice(raw).map_err(|e| {
        invalid(format!("is not valid JSON (error at line {}, column {})", e.line(), e.column()))
    })?;
    let Some(config) = config.as_object() else {
        return Err(invalid("is not a JSON object".to_owned()));
    };
    let auths = match config.get("auths") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(auths)) => auths,
        Some(_) => return Err(invalid("has an auths field that is not an object".to_owned())),
    };

    let wanted = normalize_host(registry_host);
    let mut found: Vec<(&String, RegistryLogin)> = Vec::new();
    for (key, entry) in auths {
        if !same_registry(&normalize_host(key), &wanted) {
            continue;
        }
        let login = entry_login(entry).map_err(|problem| RegistryLoginError::InvalidEntry {
            secret: id.clone(),
            key: key.clone(),
            problem,
        })?;
        found.push((key, login));
    }
    let Some((_, first)) = found.first() else { return Ok(None) };
    let agree = found.iter().all(|(_, login)| {
        login.username == first.username
            && login.password.expose_secret() == first.password.expose_secret()
    });
    if !agree {
        let keys: Vec<String> = found.iter().map(|(key, _)| format!("{key:?}")).collect();
        return Err(RegistryLoginError::Ambiguous {
            secret: id,
            host: wanted,
            keys: keys.join(", "),
        });
    }
    Ok(found.into_iter().next().map(|(_, login)| login))
}

/// `host[:port]` of an `auths` key or a registry host: no scheme, no path, lower case.
fn normalize_host(key: &str) -> String {
    let key = key.trim().to_ascii_lowercase();
    let key = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(&key);
    key.split('/').next().unwrap_or_default().to_owned()
}

fn same_registry(key_host: &str, wanted: &str) -> bool {
    !key_host.is_empty() && key_host == wanted
        || (DOCKER_HUB_HOSTS.contains(&key_host) && DOCKER_HUB_HOSTS.contains(&wanted))
}

/// The login of one `auths` entry; the error says what is wrong without quoting a value.
fn entry_login(entry: &Value) -> Result<RegistryLogin, &'static str> {
    let entry = entry.as_object().ok_or("is not an object")?;
    let text = |field: &str, problem: &'static str| -> Result<Option<String>, &'static str> {
        match entry.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(problem),
        }
    };
    if let Some(auth) = text("auth", "has an auth field that is not a string")? {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(auth.trim()))
            .map_err(|_| "has an auth field that is not base64")?;
        let decoded =
            String::from_utf8(decoded).map_err(|_| "has an auth field that is not text")?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or("has an auth field without a ':' between user and password")?;
        if username.is_empty() || password.is_empty() {
            return Err("has an auth field with an empty user name or password");
        }
        return Ok(RegistryLogin {
            username: username.to_owned(),
            password: SecretString::from(password.to_owned()),
        });
    }
    let username = text("username", "has a username field that is not a string")?;
    let password = text("password", "has a password field that is not a string")?;
    match (username, password) {
        (Some(username), Some(password)) => {
            Ok(RegistryLogin { username, password: SecretString::from(password) })
        }
        (Some(_), None) => Err("has a username but no password"),
        (None, Some(_)) => Err("has a password but no username"),
        (None, None) if entry.contains_key("identitytoken") => {
            Err("holds only an identitytoken, which is not supported")
        }
        (None, None) => Err("holds no credentials"),
    }
}

#[cfg(test)]
#[path = "image_policy_tests.rs"]
mod tests;
