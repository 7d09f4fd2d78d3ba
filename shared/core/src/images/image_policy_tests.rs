// Table tests spell their row types out.
#![allow(clippy::type_complexity)]

use super::*;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kuvryn_sync_api::{DigestPolicy, SemverPolicy, TagPatternPolicy};

const IMAGE: &str = "registry.example.com:5000/team/api";
const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const PASSWORD_CANARY: &str = "canary-pw-3b7e1f0a";

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).expect("timestamp"))
}

fn tags(list: &[&str]) -> Vec<String> {
    list.iter().map(|t| (*t).to_owned()).collect()
}

fn semver(range: &str) -> TagPolicy {
    TagPolicy { semver: Some(SemverPolicy { range: range.into() }), ..Default::default() }
}

fn pattern(regex: &str, order: TagOrder) -> TagPolicy {
    TagPolicy {
        tag_pattern: Some(TagPatternPolicy { regex: regex.into(), order }),
        ..Default::default()
    }
}

fn digest(tag: &str) -> TagPolicy {
    TagPolicy { digest: Some(DigestPolicy { tag: tag.into() }), ..Default::default() }
}

fn compiled(policy: &TagPolicy) -> CompiledPolicy {
    compile(policy).unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------------------------------------
// compile
// ---------------------------------------------------------------------------------------------

#[test]
fn compile_accepts_exactly_one_valid_policy() {
    let all = TagPolicy {
        semver: Some(SemverPolicy { range: "^1".into() }),
        tag_pattern: Some(TagPatternPolicy { regex: ".*".into(), order: TagOrder::Alphabetical }),
        digest: Some(DigestPolicy { tag: "main".into() }),
    };
    let two = TagPolicy { digest: Some(DigestPolicy { tag: "main".into() }), ..semver("^1") };
    let cases: Vec<(&str, TagPolicy, Result<&str, PolicyError>)> = vec![
        ("semver", semver(">=1.2.0 <2.0.0"), Ok("semver")),
        ("caret", semver("^1.2"), Ok("semver")),
        ("or", semver("1.x || >=3.0.0-rc.0"), Ok("semver")),
        ("pattern", pattern(r"^main-(\d+)$", TagOrder::Numerical), Ok("pattern")),
        ("digest", digest("main"), Ok("digest")),
        ("none", TagPolicy::default(), Err(PolicyError::NoPolicy)),
        ("two", two, Err(PolicyError::SeveralPolicies { set: "semver and digest".into() })),
        (
            "three",
            all,
            Err(PolicyError::SeveralPolicies { set: "semver and tagPattern and digest".into() }),
        ),
        ("empty range", semver("  "), Err(PolicyError::EmptyRange)),
        ("bad range", semver("latest"), Err(PolicyError::InvalidRange { range: "latest".into() })),
        ("bad tag", digest("-main"), Err(PolicyError::InvalidTag { tag: "-main".into() })),
        ("tag with slash", digest("a/b"), Err(PolicyError::InvalidTag { tag: "a/b".into() })),
    ];
    for (name, policy, expected) in cases {
        let got = compile(&policy).map(|c| match c {
            CompiledPolicy::Semver { .. } => "semver",
            CompiledPolicy::TagPattern { .. } => "pattern",
            CompiledPolicy::Digest { .. } => "digest",
        });
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn compile_errors_name_the_field_and_what_to_do() {
    let cases: Vec<(TagPolicy, &[&str])> = vec![
        (TagPolicy::default(), &["spec.policy", "set exactly one"]),
        (semver("latest"), &["spec.policy.semver.range", "\"latest\"", ">=1.2.0 <2.0.0"]),
        (pattern("(unclosed", TagOrder::Alphabetical), &["spec.policy.tagPattern.regex", "fix it"]),
        (digest("a b"), &["spec.policy.digest.tag", "128"]),
    ];
    for (policy, needles) in cases {
        let message = compile(&policy).err().map(|e| e.to_string()).unwrap_or_default();
        for needle in needles {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        assert!(!message.contains('\n'), "{message:?}");
    }
}

#[test]
fn a_regex_over_the_size_limit_is_refused() {
    let err = compile(&pattern("(?:a{1000}){1000}", TagOrder::Alphabetical)).err();
    assert!(
        matches!(&err, Some(PolicyError::InvalidRegex { detail, .. }) if detail.contains("size limit")),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// select
// ---------------------------------------------------------------------------------------------

#[test]
fn semver_selects_the_highest_version_in_the_range() {
    // (case, range, tags, selected)
    let cases: Vec<(&str, &str, Vec<&str>, &str)> = vec![
        (
            "the issue's tags: 1.10.0 beats 1.3.0, 2.0.0 is out, the rc is a pre-release",
            ">=1.2.0 <2.0.0",
            vec!["1.2.0", "1.3.0", "1.10.0", "2.0.0", "1.4.0-rc.1"],
            "1.10.0",
        ),
        ("order of the list does not matter", ">=1.2.0 <2.0.0", vec!["1.10.0", "1.9.0"], "1.10.0"),
        (
            "v prefix understood, tag kept as written",
            ">=1.2.0 <2.0.0",
            vec!["v1.2.0", "v1.10.0", "v2.0.0"],
            "v1.10.0",
        ),
        ("mixed prefixes compare by version", "^1", vec!["v1.9.0", "1.10.0", "v1.11.0"], "v1.11.0"),
        ("tie: the unprefixed tag wins", "^1", vec!["v1.2.0", "1.2.0"], "1.2.0"),
        ("tie in the other order too", "^1", vec!["1.2.0", "v1.2.0"], "1.2.0"),
        (
            "a range naming a pre-release allows pre-releases of that version",
            ">=1.4.0-rc.0",
            vec!["1.3.0", "1.4.0-rc.1", "1.4.0-rc.2", "1.5.0-rc.1"],
            "1.4.0-rc.2",
        ),
        (
            "the release beats its pre-releases",
            ">=1.4.0-rc.0 <2.0.0",
            vec!["1.4.0-rc.1", "1.4.0", "1.4.1-rc.1"],
            "1.4.0",
        ),
        (
            "pre-release identifiers compare numerically",
            ">=1.4.0-rc.0",
            vec!["1.4.0-rc.9", "1.4.0-rc.10"],
            "1.4.0-rc.10",
        ),
        (
            "a range without pre-release ignores them",
            "^1.0.0",
            vec!["1.0.0", "1.1.0-rc.1"],
            "1.0.0",
        ),
        (
            "non-semver tags are ignored",
            "*",
            vec!["latest", "main", "1.2", "1.2.3.4", "01.2.3", "V1.2.4", "sha-1a2b", "1.2.3"],
            "1.2.3",
        ),
        ("tilde", "~1.2.0", vec!["1.2.9", "1.3.0"], "1.2.9"),
        ("or", "1.x || >=3.0.0", vec!["1.5.0", "2.0.0", "3.1.0"], "3.1.0"),
        (
            "tags outside the distribution grammar are ignored",
            "*",
            vec!["1.2.3", "2.0.0 ", "3.0.0\n", "+4.0.0"],
            "1.2.3",
        ),
    ];
    for (case, range, list, expected) in cases {
        let got = select(&compiled(&semver(range)), &tags(&list));
        assert_eq!(got.as_deref(), Ok(expected), "{case}");
    }
}

#[test]
fn tag_pattern_selects_the_last_tag_in_order() {
    // (case, regex, order, tags, selected)
    let cases: Vec<(&str, &str, TagOrder, Vec<&str>, &str)> = vec![
        (
            "numerical by the first capture group: the highest build",
            r"^main-(\d+)$",
            TagOrder::Numerical,
            vec!["main-9", "main-10", "main-100", "main-2", "other-500", "main-x"],
            "main-100",
        ),
        (
            "alphabetical picks differently on the same tags",
            r"^main-(\d+)$",
            TagOrder::Alphabetical,
            vec!["main-9", "main-10", "main-100", "main-2", "other-500"],
            "main-9",
        ),
        (
            "alphabetical is the default and sorts by the group, not the whole tag",
            r"^[a-z]+-(\d{8})$",
            TagOrder::default(),
            vec!["zeta-20240101", "alpha-20250101"],
            "alpha-20250101",
        ),
        (
            "numerical without a group reads the whole tag",
            r"^\d+$",
            TagOrder::Numerical,
            vec!["9", "10", "100", "v200"],
            "100",
        ),
        (
            "numerical skips keys that are not numbers",
            r"^build-(.+)$",
            TagOrder::Numerical,
            vec!["build-5", "build-abc", "build-1e9"],
            "build-5",
        ),
        (
            "numbers of any length compare exactly",
            r"^main-(\d+)$",
            TagOrder::Numerical,
            vec!["main-99999999999999999999999", "main-100000000000000000000000"],
            "main-100000000000000000000000",
        ),
        (
            "decimal fractions compare as numbers",
            r"^r(\d+\.\d+)$",
            TagOrder::Numerical,
            vec!["r1.10", "r1.5", "r1.45"],
            "r1.5",
        ),
        (
            "equal numbers: the greatest tag wins",
            r"^main-(\d+)$",
            TagOrder::Numerical,
            vec!["main-7", "main-007"],
            "main-7",
        ),
        (
            "an unanchored regex matches anywhere in the tag",
            "rc",
            TagOrder::Alphabetical,
            vec!["1.0-rc1", "1.0", "0.9-rc2"],
            "1.0-rc1",
        ),
        (
            "an optional group that did not take part sorts as empty text",
            r"^main(?:-(\d+))?$",
            TagOrder::Alphabetical,
            vec!["main-1", "main"],
            "main-1",
        ),
    ];
    for (case, regex, order, list, expected) in cases {
        let got = select(&compiled(&pattern(regex, order)), &tags(&list));
        assert_eq!(got.as_deref(), Ok(expected), "{case}");
    }
}

#[test]
fn digest_policy_selects_its_fixed_tag() {
    let policy = compiled(&digest("main"));
    assert_eq!(select(&policy, &tags(&["dev", "main", "1.0.0"])).as_deref(), Ok("main"));
}

#[test]
fn no_selection_says_how_many_tags_and_which_rule() {
    // (policy, tags, error, words the message must have)
    let cases: Vec<(TagPolicy, Vec<&str>, SelectError, Vec<&str>)> = vec![
        (
            semver(">=3.0.0"),
            vec!["1.0.0", "2.0.0", "latest"],
            SelectError::NoSemverMatch { seen: 3, versions: 2, range: ">=3.0.0".into() },
            vec!["none of the 3 tags", "spec.policy.semver.range \">=3.0.0\"", "2 of them"],
        ),
        (
            semver("^1"),
            vec![],
            SelectError::NoSemverMatch { seen: 0, versions: 0, range: "^1".into() },
            vec!["none of the 0 tags"],
        ),
        (
            pattern(r"^main-(\d+)$", TagOrder::Numerical),
            vec!["dev-1", "latest"],
            SelectError::NoPatternMatch { seen: 2, regex: r"^main-(\d+)$".into() },
            vec!["none of the 2 tags", "spec.policy.tagPattern.regex"],
        ),
        (
            pattern(r"^main-(.*)$", TagOrder::Numerical),
            vec!["main-a", "main-b", "x"],
            SelectError::NoNumber { seen: 3, matched: 2, regex: r"^main-(.*)$".into() },
            vec!["2 of the 3 tags", "order: numerical"],
        ),
        (
            digest("main"),
            vec!["dev", "1.0.0"],
            SelectError::TagNotFound { seen: 2, tag: "main".into() },
            vec!["\"main\"", "spec.policy.digest.tag", "2 tags"],
        ),
    ];
    for (policy, list, expected, words) in cases {
        let got = select(&compiled(&policy), &tags(&list));
        assert_eq!(got.as_ref(), Err(&expected));
        let message = expected.to_string();
        for word in words {
            assert!(message.contains(word), "{message:?} lacks {word:?}");
        }
    }
}

#[test]
fn image_reference_is_image_tag_at_digest() {
    assert_eq!(
        image_reference("127.0.0.1:5000/app", "1.2.0", D1),
        format!("127.0.0.1:5000/app:1.2.0@{D1}")
    );
    assert!(is_digest(D1));
    for bad in ["sha256", "sha256:", "sha256:abc", "SHA256:1111111111111111111111111111111111", ""]
    {
        assert!(!is_digest(bad), "{bad}");
    }
}

// ---------------------------------------------------------------------------------------------
// decide_scan
// ---------------------------------------------------------------------------------------------

fn policy(interval: &str, status: Option<ImagePolicyStatus>) -> ImagePolicy {
    let spec = ImagePolicySpec {
        image: IMAGE.into(),
        secret_ref: None,
        interval: interval.into(),
        policy: semver("^1"),
        webhook: None,
    };
    let mut policy = ImagePolicy::new("api", spec);
    policy.metadata.namespace = Some("team".into());
    policy.metadata.generation = Some(4);
    policy.status = status;
    policy
}

fn selected(tag: &str, digest: &str) -> ScanOutcome {
    ScanOutcome::Selected { tag: tag.into(), digest: digest.into() }
}

fn failed(message: &str) -> ScanOutcome {
    ScanOutcome::Failed { message: message.into() }
}

fn ready(status: &ImagePolicyStatus) -> (String, String, String, Time) {
    let c = conditions::get(&status.conditions, ConditionType::Ready).expect("Ready");
    (c.status.clone(), c.reason.clone(), c.message.clone(), c.last_transition_time.clone())
}

#[test]
fn a_sequence_of_scans_sets_status_and_events() {
    let image1 = format!("{IMAGE}:1.2.0@{D1}");
    let image2 = format!("{IMAGE}:1.2.0@{D2}");
    let image3 = format!("{IMAGE}:1.3.0@{D2}");
    // (case, outcome, now, written, Ready status, reason, message, ImageSelected message,
    //  latestImage, lastScannedAt, lastTransitionTime)
    type Step = (
        &'static str,
        ScanOutcome,
        i64,
        bool,
        &'static str,
        &'static str,
        String,
        Option<String>,
        String,
        i64,
        i64,
    );
    let steps: Vec<Step> = vec![
        (
            "the first selection emits ImageSelected",
            selected("1.2.0", D1),
            10,
            true,
            "True",
            "Selected",
            format!("selected {image1}"),
            Some(format!("selected {image1}")),
            image1.clone(),
            10,
            10,
        ),
        (
            "the same selection again: no Event, but lastScannedAt moves, so the status is written",
            selected("1.2.0", D1),
            20,
            true,
            "True",
            "Selected",
            format!("selected {image1}"),
            None,
            image1.clone(),
            20,
            10,
        ),
        (
            "a failure keeps the selection and lastScannedAt, and records no Event",
            failed("GET https://bot:pw@registry.example.com/v2/: 401 Unauthorized"),
            30,
            true,
            "False",
            "ScanFailed",
            "GET https://bot:***@registry.example.com/v2/: 401 Unauthorized".into(),
            None,
            image1.clone(),
            20,
            30,
        ),
        (
            "the same failure again writes nothing",
            failed("GET https://bot:pw@registry.example.com/v2/: 401 Unauthorized"),
            40,
            false,
            "False",
            "ScanFailed",
            "GET https://bot:***@registry.example.com/v2/: 401 Unauthorized".into(),
            None,
            image1.clone(),
            20,
            30,
        ),
        (
            "recovering with the same selection emits no ImageSelected",
            selected("1.2.0", D1),
            50,
            true,
            "True",
            "Selected",
            format!("selected {image1}"),
            None,
            image1.clone(),
            50,
            50,
        ),
        (
            "a re-pushed tag (new digest) is a new selection",
            selected("1.2.0", D2),
            60,
            true,
            "True",
            "Selected",
            format!("selected {image2}"),
            Some(format!("selected {image2} (was {image1})")),
            image2.clone(),
            60,
            50,
        ),
        (
            "a new tag is a new selection",
            selected("1.3.0", D2),
            70,
            true,
            "True",
            "Selected",
            format!("selected {image3}"),
            Some(format!("selected {image3} (was {image2})")),
            image3.clone(),
            70,
            50,
        ),
    ];
    let mut status: Option<ImagePolicyStatus> = None;
    for (case, outcome, now, written, cond, reason, message, event, latest, scanned, moved) in steps
    {
        let decision = decide_scan(&policy("90s", status.clone()), &outcome, &at(now));
        assert_eq!(decision.status.is_some(), written, "{case}");
        assert_eq!(decision.requeue_after, Duration::from_secs(90), "{case}");
        let expected_events: Vec<(EventReason, String)> =
            event.into_iter().map(|m| (EventReason::ImageSelected, m)).collect();
        assert_eq!(decision.events, expected_events, "{case}");
        if let Some(new) = decision.status {
            status = Some(new);
        }
        let current = status.clone().unwrap_or_default();
        assert_eq!(ready(&current), (cond.into(), reason.into(), message, at(moved)), "{case}");
        assert_eq!(current.latest_image.as_deref(), Some(latest.as_str()), "{case}");
        let (tag, digest) = latest
            .rsplit_once('@')
            .and_then(|(rest, d)| rest.rsplit_once(':').map(|(_, t)| (t.to_owned(), d.to_owned())))
            .unwrap_or_default();
        assert_eq!(current.latest_tag, Some(tag), "{case}");
        assert_eq!(current.latest_digest, Some(digest), "{case}");
        assert_eq!(current.last_scanned_at, Some(at(scanned)), "{case}");
        assert_eq!(current.observed_generation, Some(4), "{case}");
        let condition = conditions::get(&current.conditions, ConditionType::Ready);
        assert_eq!(condition.and_then(|c| c.observed_generation), Some(4), "{case}");
    }
}

#[test]
fn a_first_scan_that_fails_has_no_selection() {
    let decision = decide_scan(&policy("5m", None), &failed("connection refused"), &at(1));
    let status = decision.status.expect("written");
    assert_eq!(status.latest_image, None);
    assert_eq!(status.last_scanned_at, None);
    assert_eq!(ready(&status).1, "ScanFailed");
    assert_eq!(decision.requeue_after, Duration::from_secs(300));
    assert!(decision.events.is_empty());
}

#[test]
fn an_unusable_interval_fails_the_scan_naming_spec_interval() {
    for interval in ["5 minutes", "0s", "0m0s"] {
        let decision = decide_scan(&policy(interval, None), &selected("1.2.0", D1), &at(1));
        let status = decision.status.expect("written");
        let (cond, reason, message, _) = ready(&status);
        assert_eq!((cond.as_str(), reason.as_str()), ("False", "ScanFailed"), "{interval}");
        assert!(message.starts_with("spec.interval"), "{message}");
        assert!(message.contains(interval), "{message}");
        assert_eq!(status.latest_image, None, "{interval}: the selection is not adopted");
        assert_eq!(status.last_scanned_at, None);
        assert!(decision.events.is_empty());
        assert_eq!(decision.requeue_after, Duration::from_secs(300), "{interval}");
    }
}

#[test]
fn a_selection_a_registry_could_not_have_meant_is_a_failure() {
    for outcome in [selected("1.2.0", "sha256:short"), selected("bad tag\n", D1)] {
        let decision = decide_scan(&policy("5m", None), &outcome, &at(1));
        let status = decision.status.expect("written");
        assert_eq!(ready(&status).1, "ScanFailed", "{outcome:?}");
        assert_eq!(status.latest_image, None);
    }
}

#[test]
fn long_failure_messages_are_truncated() {
    let long = "x".repeat(5000);
    let decision = decide_scan(&policy("5m", None), &failed(&long), &at(1));
    let message = ready(&decision.status.expect("written")).2;
    assert_eq!(message.chars().count(), MAX_MESSAGE);
    assert!(message.ends_with('…'));
}

// ---------------------------------------------------------------------------------------------
// registry_login
// ---------------------------------------------------------------------------------------------

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn docker_secret(label: Option<&str>, type_: Option<&str>, config: Option<&str>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some("regcred".into()),
            namespace: Some("team".into()),
            labels: label
                .map(|v| BTreeMap::from([(keys::REGISTRY_CREDENTIALS.to_owned(), v.to_owned())])),
            ..Default::default()
        },
        type_: type_.map(str::to_owned),
        data: config.map(|c| {
            BTreeMap::from([(DOCKER_CONFIG_JSON_KEY.to_owned(), ByteString(c.as_bytes().to_vec()))])
        }),
        ..Default::default()
    }
}

fn config(auths: serde_json::Value) -> String {
    serde_json::json!({ "auths": auths }).to_string()
}

fn login(config: &str, host: &str) -> Result<Option<(String, String)>, RegistryLoginError> {
    let secret = docker_secret(Some("true"), Some(DOCKER_CONFIG_JSON_TYPE), Some(config));
    registry_login(&secret, host)
        .map(|found| found.map(|l| (l.username.clone(), l.password.expose_secret().to_owned())))
}

#[test]
fn logins_are_found_by_registry_host() {
    use serde_json::json;
    let pw = PASSWORD_CANARY;
    let basic = |user: &str| json!({ "username": user, "password": pw });
    let auth = json!({ "auth": b64(&format!("robot:{pw}")) });
    let some = |user: &str| Ok(Some((user.to_owned(), pw.to_owned())));
    // (case, auths, registry host, expected)
    let cases: Vec<(
        &str,
        serde_json::Value,
        &str,
        Result<Option<(String, String)>, RegistryLoginError>,
    )> = vec![
        (
            "username and password",
            json!({ "registry.example.com": basic("bot") }),
            "registry.example.com",
            some("bot"),
        ),
        (
            "the auth field",
            json!({ "registry.example.com": auth.clone() }),
            "registry.example.com",
            some("robot"),
        ),
        (
            "auth wins over username and password, as for the Docker CLI",
            json!({ "registry.example.com": { "auth": b64(&format!("robot:{pw}")), "username": "other", "password": "other-pw" } }),
            "registry.example.com",
            some("robot"),
        ),
        (
            "auth without padding",
            json!({ "r.example.com": { "auth": b64(&format!("ab:{pw}x")).trim_end_matches('=') } }),
            "r.example.com",
            Ok(Some(("ab".into(), format!("{pw}x")))),
        ),
        (
            "host with port",
            json!({ "127.0.0.1:5000": basic("bot") }),
            "127.0.0.1:5000",
            some("bot"),
        ),
        (
            "port must match exactly",
            json!({ "127.0.0.1:5000": basic("bot") }),
            "127.0.0.1",
            Ok(None),
        ),
        (
            "no port is not port 443",
            json!({ "registry.example.com": basic("bot") }),
            "registry.example.com:443",
            Ok(None),
        ),
        (
            "https:// key",
            json!({ "https://registry.example.com": basic("bot") }),
            "registry.example.com",
            some("bot"),
        ),
        (
            "https:// key with a path",
            json!({ "https://registry.example.com:5000/v1/": basic("bot") }),
            "registry.example.com:5000",
            some("bot"),
        ),
        (
            "case-insensitive",
            json!({ "HTTPS://Registry.Example.COM": basic("bot") }),
            "registry.EXAMPLE.com",
            some("bot"),
        ),
        (
            "Docker Hub's index key serves docker.io",
            json!({ "https://index.docker.io/v1/": basic("hub") }),
            "docker.io",
            some("hub"),
        ),
        (
            "docker.io key serves index.docker.io",
            json!({ "docker.io": basic("hub") }),
            "index.docker.io",
            some("hub"),
        ),
        (
            "another host's entry is not used",
            json!({ "other.example.com": basic("bot") }),
            "registry.example.com",
            Ok(None),
        ),
        (
            "a suffix of the host is not the host",
            json!({ "example.com": basic("bot") }),
            "registry.example.com",
            Ok(None),
        ),
        (
            "two keys for the host that agree",
            json!({ "registry.example.com": basic("bot"), "https://registry.example.com/v1/": basic("bot") }),
            "registry.example.com",
            some("bot"),
        ),
        ("empty auths", json!({}), "registry.example.com", Ok(None)),
        ("an empty key matches no host", json!({ "": basic("bot") }), "", Ok(None)),
    ];
    for (case, auths, host, expected) in cases {
        assert_eq!(login(&config(auths), host), expected, "{case}");
    }
    // Helpers are never run: a config naming them gives anonymous access.
    let helpers =
        json!({ "credsStore": "desktop", "credHelpers": { "registry.example.com": "ecr-login" } })
            .to_string();
    assert_eq!(login(&helpers, "registry.example.com"), Ok(None));
}

#[test]
fn unusable_secrets_are_refused_naming_the_secret_and_the_rule() {
    use serde_json::json;
    let id = "team/regcred".to_owned();
    let good =
        config(json!({ "r.example.com": { "username": "bot", "password": PASSWORD_CANARY } }));
    let entry = |problem: &'static str| RegistryLoginError::InvalidEntry {
        secret: id.clone(),
        key: "r.example.com".into(),
        problem,
    };
    let with = |entry: serde_json::Value| config(json!({ "r.example.com": entry }));
    // (case, label, type, .dockerconfigjson, expected)
    let cases: Vec<(&str, Option<&str>, Option<&str>, Option<String>, RegistryLoginError)> = vec![
        (
            "unlabelled",
            None,
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(good.clone()),
            RegistryLoginError::NotLabelled { secret: id.clone() },
        ),
        (
            "label not true",
            Some("yes"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(good.clone()),
            RegistryLoginError::WrongLabelValue { secret: id.clone(), value: "yes".into() },
        ),
        (
            "Opaque",
            Some("true"),
            Some("Opaque"),
            Some(good.clone()),
            RegistryLoginError::WrongType { secret: id.clone(), found: "Opaque".into() },
        ),
        (
            "no type",
            Some("true"),
            None,
            Some(good.clone()),
            RegistryLoginError::WrongType { secret: id.clone(), found: String::new() },
        ),
        (
            "no key",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            None,
            RegistryLoginError::InvalidConfig { secret: id.clone(), problem: "is missing".into() },
        ),
        (
            "not JSON, with the password in it",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(format!(
                "{{\"auths\": {{\"r.example.com\": {{\"password\": \"{PASSWORD_CANARY}\" }}"
            )),
            RegistryLoginError::InvalidConfig {
                secret: id.clone(),
                problem: "is not valid JSON (error at line 1, column 63)".into(),
            },
        ),
        (
            "not an object",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some("[]".into()),
            RegistryLoginError::InvalidConfig {
                secret: id.clone(),
                problem: "is not a JSON object".into(),
            },
        ),
        (
            "auths not an object",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(json!({ "auths": [PASSWORD_CANARY] }).to_string()),
            RegistryLoginError::InvalidConfig {
                secret: id.clone(),
                problem: "has an auths field that is not an object".into(),
            },
        ),
        (
            "auth not base64",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "auth": format!("%%{PASSWORD_CANARY}") }))),
            entry("has an auth field that is not base64"),
        ),
        (
            "auth without a colon",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "auth": b64(PASSWORD_CANARY) }))),
            entry("has an auth field without a ':' between user and password"),
        ),
        (
            "auth with an empty password",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "auth": b64("bot:") }))),
            entry("has an auth field with an empty user name or password"),
        ),
        (
            "password without username",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "password": PASSWORD_CANARY }))),
            entry("has a password but no username"),
        ),
        (
            "username without password",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "username": "bot" }))),
            entry("has a username but no password"),
        ),
        (
            "password not a string",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "username": "bot", "password": 12345678 }))),
            entry("has a password field that is not a string"),
        ),
        (
            "identity token only",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({ "identitytoken": PASSWORD_CANARY }))),
            entry("holds only an identitytoken, which is not supported"),
        ),
        (
            "empty entry",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(with(json!({}))),
            entry("holds no credentials"),
        ),
        (
            "two keys for the host that disagree",
            Some("true"),
            Some(DOCKER_CONFIG_JSON_TYPE),
            Some(config(json!({
                "r.example.com": { "username": "bot", "password": PASSWORD_CANARY },
                "https://r.example.com": { "username": "bot", "password": "another-password" },
            }))),
            RegistryLoginError::Ambiguous {
                secret: id.clone(),
                host: "r.example.com".into(),
                keys: "\"https://r.example.com\", \"r.example.com\"".into(),
            },
        ),
    ];
    for (case, label, type_, data, expected) in cases {
        let secret = docker_secret(label, type_, data.as_deref());
        let got = registry_login(&secret, "r.example.com");
        let message = got.as_ref().err().map(ToString::to_string).unwrap_or_default();
        assert_eq!(got.err(), Some(expected), "{case}");
        assert!(message.contains("team/regcred"), "{case}: {message}");
        assert!(!message.contains(PASSWORD_CANARY), "{case}: {message}");
        assert!(!message.contains(&b64(PASSWORD_CANARY)), "{case}: {message}");
    }
}

#[test]
fn refusal_messages_say_what_to_do() {
    let unlabelled = docker_secret(None, Some(DOCKER_CONFIG_JSON_TYPE), Some("{}"));
    assert_eq!(
        registry_login(&unlabelled, "r.example.com").err().map(|e| e.to_string()).as_deref(),
        Some(
            "Secret team/regcred is not labelled sync.kuvryn.io/registry-credentials: \"true\"; add the label to allow it as registry credentials"
        )
    );
    let opaque = docker_secret(Some("true"), Some("Opaque"), Some("{}"));
    assert_eq!(
        registry_login(&opaque, "r.example.com").err().map(|e| e.to_string()).as_deref(),
        Some(
            "Secret team/regcred has type \"Opaque\"; registry credentials need a Secret of type kubernetes.io/dockerconfigjson (kubectl create secret docker-registry)"
        )
    );
}

#[test]
fn string_data_is_read_too() {
    let mut secret = docker_secret(Some("true"), Some(DOCKER_CONFIG_JSON_TYPE), None);
    let config = config(
        serde_json::json!({ "r.example.com": { "username": "bot", "password": "pw-from-string-data" } }),
    );
    secret.string_data = Some(BTreeMap::from([(DOCKER_CONFIG_JSON_KEY.to_owned(), config)]));
    let found = registry_login(&secret, "r.example.com").ok().flatten().map(|l| l.username);
    assert_eq!(found.as_deref(), Some("bot"));
}

#[test]
fn the_password_never_shows_in_debug_and_the_redactor_masks_it() {
    let auth = b64(&format!("robot:{PASSWORD_CANARY}"));
    let config = config(serde_json::json!({ "r.example.com": { "auth": auth } }));
    let found = login(&config, "r.example.com");
    assert!(matches!(found, Ok(Some(_))));
    let secret = docker_secret(Some("true"), Some(DOCKER_CONFIG_JSON_TYPE), Some(&config));
    let login = registry_login(&secret, "r.example.com").ok().flatten().expect("login");
    let debug = format!("{login:?}");
    assert!(debug.contains("robot"), "{debug}");
    assert!(!debug.contains(PASSWORD_CANARY) && !debug.contains(&auth), "{debug}");
    let redactor = login.redactor();
    for leaked in [
        format!("registry said: bad password {PASSWORD_CANARY}"),
        format!("Authorization: Basic {auth}"),
        format!("{{\"auth\":\"{auth}\"}}"),
    ] {
        let out = redactor.redact(&leaked);
        assert!(!out.contains(PASSWORD_CANARY) && !out.contains(&auth), "{out}");
    }
}
