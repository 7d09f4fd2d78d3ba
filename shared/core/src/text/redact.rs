//! The one place that decides what is secret and masks it.
//!
//! Every user-visible string — status messages, Events, log fields, CLI output, plan entries,
//! diagnosis evidence — passes through a [`Redactor`] before it leaves the process. A redactor
//! masks three things:
//! - the exact values it was told about (Secret data, passwords, tokens, private keys, sink
//!   URLs), including their base64 encodings, since Kubernetes carries Secret data as base64.
//!   Values of at least four characters are masked wherever they occur. Shorter ones (a PIN, a
//!   port, `on`) would shred ordinary words if masked everywhere, so they are masked where a
//!   value stands: quoted whole (`"ab"`, `'ab'`), or whole right after `:` or `=` (one optional
//!   space), up to a delimiter (whitespace, `,`, `;`, `}`, `]`, a quote or the end). That is how
//!   a value is printed in YAML, JSON, `key=value` and apply errors; prose mentioning the same
//!   letters stays readable;
//! - credentials embedded in URLs (`https://user:password@host` → `https://user:***@host`);
//! - well-known secret shapes that may arrive from elsewhere (PEM private key blocks,
//!   `Authorization: Bearer …` headers).
//!
//! Hand-written because no crate masks a dynamic set of values together with URL userinfo; it is
//! built on `regex` and `base64`.

use std::sync::LazyLock;

use base64::Engine;
use regex::Regex;

/// What a masked value is replaced with.
pub const MASK: &str = "***";

/// Shortest value masked wherever it occurs; shorter ones are masked only where a value stands
/// (see the module doc), since masking a one-character "secret" everywhere would shred every
/// message.
const MIN_SECRET_LEN: usize = 4;

static URL_USERINFO: LazyLock<Regex> = LazyLock::new(|| {
    // scheme://user:password@ — the password part is masked, the user kept for debugging.
    Regex::new(
        r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]+)@",
    )
    .expect("valid regex")
});

static PEM_PRIVATE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?s)-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(-----END ([A-Z0-9 ]*)PRIVATE KEY-----|$)",
    )
    .expect("valid regex")
});

static BEARER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}").expect("valid regex")
});

/// Masks secret values in text. Cheap to clone; build one per Application or Repository from the
/// secrets its work touched.
#[derive(Clone, Default)]
pub struct Redactor {
    // Longest first, so a secret that contains another is masked whole.
    secrets: Vec<String>,
    // Values shorter than MIN_SECRET_LEN, each as the pattern of the places a value stands.
    short: Vec<ShortSecret>,
}

#[derive(Clone)]
struct ShortSecret {
    value: String,
    after_separator: Regex,
}

impl ShortSecret {
    fn new(value: &str) -> Self {
        let pattern = format!(r#"(?P<pre>[:=] ?){}(?P<post>[\s,;}}\]"']|$)"#, regex::escape(value));
        Self { value: value.to_owned(), after_separator: Regex::new(&pattern).expect("escaped") }
    }

    fn mask(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for quote in ['"', '\''] {
            let quoted = format!("{quote}{}{quote}", self.value);
            if out.contains(&quoted) {
                out = out.replace(&quoted, &format!("{quote}{MASK}{quote}"));
            }
        }
        self.after_separator
            .replace_all(&out, format!("${{pre}}{MASK}${{post}}").as_str())
            .into_owned()
    }
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &(self.secrets.len() + self.short.len()))
            .finish()
    }
}

impl Redactor {
    /// A redactor that masks only URL credentials and well-known secret shapes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also mask `value`, its base64 encodings and each of its lines (a multi-line key may be
    /// quoted a line at a time).
    pub fn add_secret(&mut self, value: &str) {
        let mut add = |v: &str| {
            let v = v.trim();
            if v.is_empty() {
                return;
            }
            if v.chars().count() < MIN_SECRET_LEN {
                if !self.short.iter().any(|s| s.value == v) {
                    self.short.push(ShortSecret::new(v));
                }
            } else if !self.secrets.iter().any(|s| s == v) {
                self.secrets.push(v.to_owned());
            }
        };
        add(value);
        for line in value.lines() {
            add(line);
        }
        add(&base64::engine::general_purpose::STANDARD.encode(value));
        add(&base64::engine::general_purpose::STANDARD_NO_PAD.encode(value));
        add(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value));
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// Builder form of [`Redactor::add_secret`].
    pub fn with_secret(mut self, value: &str) -> Self {
        self.add_secret(value);
        self
    }

    /// Mask every secret in every value of a Secret's `data` (base64-decoded bytes that are
    /// text) and `stringData`.
    pub fn add_secret_data<'a>(&mut self, values: impl IntoIterator<Item = &'a [u8]>) {
        for bytes in values {
            if let Ok(text) = std::str::from_utf8(bytes) {
                self.add_secret(text);
            } else {
                // Binary data cannot appear verbatim in text, but its base64 can.
                let encoded = base64::engine::general_purpose::STANDARD.encode(bytes);
                self.add_secret(&encoded);
            }
        }
    }

    /// The text with every secret masked.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        for short in &self.short {
            if out.contains(short.value.as_str()) {
                out = short.mask(&out);
            }
        }
        redact_shapes(&out)
    }
}

/// Mask only URL credentials and well-known secret shapes, for text that no redactor with known
/// values covers (such as a Git URL in an error).
pub fn redact_shapes(text: &str) -> String {
    let out = URL_USERINFO.replace_all(text, format!("${{scheme}}${{user}}:{MASK}@").as_str());
    let out =
        PEM_PRIVATE_KEY.replace_all(&out, format!("-----BEGIN PRIVATE KEY----- {MASK}").as_str());
    let out = BEARER.replace_all(&out, format!("$1 {MASK}").as_str());
    out.into_owned()
}

/// Shorten `text` to at most `max` characters (not bytes), marking the cut with `…`.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-5f1d2a9c-secret-value";

    #[test]
    fn masks_known_values_and_their_base64_forms() {
        let redactor = Redactor::new().with_secret(CANARY);
        let b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
        let cases = [
            format!("password {CANARY} rejected"),
            format!("data: {{\"password\": \"{b64}\"}}"),
            format!("{CANARY}{CANARY}"),
        ];
        for case in cases {
            let out = redactor.redact(&case);
            assert!(!out.contains(CANARY), "{out}");
            assert!(!out.contains(&b64), "{out}");
            assert!(out.contains(MASK), "{out}");
        }
    }

    #[test]
    fn masks_each_line_of_a_multi_line_secret() {
        let key = "line-one-secret-aaaa\nline-two-secret-bbbb\n";
        let redactor = Redactor::new().with_secret(key);
        let out = redactor.redact("error near line-two-secret-bbbb in key");
        assert_eq!(out, "error near *** in key");
    }

    #[test]
    fn masks_url_passwords_but_keeps_the_user_and_host() {
        let cases = [
            (
                "fatal: https://bot:hunter2token@git.example.com/x.git",
                "fatal: https://bot:***@git.example.com/x.git",
            ),
            ("http://:tok3n@h/x", "http://:***@h/x"),
            ("ssh://git@host/x.git", "ssh://git@host/x.git"),
            ("no url here", "no url here"),
        ];
        for (input, expected) in cases {
            assert_eq!(redact_shapes(input), expected, "{input}");
        }
    }

    #[test]
    fn masks_private_keys_and_authorization_headers() {
        let pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";
        let out = redact_shapes(&format!("key: {pem} end"));
        assert!(!out.contains("b3BlbnNzaC1rZXktdjEAAAAA"), "{out}");
        let out = redact_shapes("Authorization: Bearer abcdefgh12345678");
        assert_eq!(out, "Authorization: Bearer ***");
    }

    #[test]
    fn masks_short_values_where_a_value_stands_and_nowhere_else() {
        let redactor = Redactor::new().with_secret("ab").with_secret("7").with_secret("on");
        for (text, masked) in [
            // Where values are printed: YAML, JSON, key=value, quoted, at the end.
            ("password: ab", "password: ***"),
            ("{\"pin\":\"7\",\"x\":1}", "{\"pin\":\"***\",\"x\":1}"),
            ("pin=7; next", "pin=***; next"),
            ("token='ab'", "token='***'"),
            ("data:{a:ab}", "data:{a:***}"),
            ("flag: on\nother", "flag: ***\nother"),
            // Prose and longer tokens that merely contain the letters stay as they are.
            ("a tab b", "a tab b"),
            ("version 7.1 is on the way", "version 7.1 is on the way"),
            ("key: abc", "key: abc"),
            ("replicas: 17", "replicas: 17"),
            ("mode: online", "mode: online"),
        ] {
            assert_eq!(redactor.redact(text), masked, "{text:?}");
        }
        // A short value's base64 form is long enough to be masked everywhere.
        assert_eq!(Redactor::new().with_secret("ab").redact("got YWI= back"), "got *** back");
        // Empty values mask nothing.
        assert_eq!(Redactor::new().with_secret("").redact("a: \"\""), "a: \"\"");
    }

    #[test]
    fn truncates_on_character_boundaries() {
        assert_eq!(truncate("héllo", 10), "héllo");
        assert_eq!(truncate("héllo wörld", 5), "héll…");
    }
}
