//! HTML building blocks of the web view: escaping, the page layout (landmarks, navigation, skip
//! link), and small pieces (badges, definition lists) the pages share.
//!
//! Hand-written with `format!` and one escaping function rather than a template engine: the
//! pages are a handful of tables and lists, and a template crate would add a proc-macro build
//! for little. Every value from the cluster goes through [`esc`]; every finished page goes
//! through `redact_shapes`, as all CLI output does.

use kuvryn_sync_api::HealthState;
use kuvryn_sync_core::redact::redact_shapes;

/// `text` escaped for HTML text and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` escaped for one path segment of a link (namespaces and names are DNS labels, but a
/// link must never break out of its attribute whatever it holds).
pub fn seg(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Which navigation entry the page belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Applications,
    Repositories,
    ImagePolicies,
}

/// What the header says about the connection: who the user is and what the view watches.
#[derive(Clone, Debug, Default)]
pub struct Header {
    /// The user every request is made as (from SelfSubjectReview), or a note why unknown.
    pub user: String,
    /// `namespace demo` or `all namespaces`.
    pub scope: String,
    /// Watches that fail (a kind the user may not list), worded as the API server said.
    pub watch_errors: Vec<String>,
}

/// A notice shown at the top of a page after an action: done, or refused with the API server's
/// words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    Done(String),
    Refused(String),
}

/// A whole page: skip link, banner with navigation, the notice, `main` holding `body` inside
/// the live region the script refreshes.
/// `canonical` is the page's own address when it answers a POST: the script puts it in the
/// location bar and refreshes from it.
pub fn page(
    title: &str,
    section: Section,
    header: &Header,
    notice: Option<&Notice>,
    body: &str,
    canonical: Option<&str>,
) -> String {
    let nav = navigation(section);
    let notice = notice.map_or_else(String::new, notice_html);
    let errors: String = header
        .watch_errors
        .iter()
        .map(|e| format!(r#"<p class="notice refused" role="alert">{}</p>"#, esc(e)))
        .collect();
    let html = format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Kuvryn Sync</title>
<link rel="stylesheet" href="/assets/ui.css">
<script src="/assets/ui.js" defer></script>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="banner">
<p class="brand">Kuvryn Sync</p>
<nav aria-label="Main"><ul>{nav}</ul></nav>
<p class="who">Signed in to the cluster as <strong id="user">{user}</strong> · {scope} · <span id="live-state" role="status" aria-live="polite">live</span></p>
</header>
<main id="main" tabindex="-1"{src}>
{notice}{errors}<div id="live">
{body}
</div>
</main>
</body>
</html>
"##,
        title = esc(title),
        user = esc(&header.user),
        scope = esc(&header.scope),
        src = canonical.map_or_else(String::new, |c| format!(r#" data-src="{}""#, esc(c))),
    );
    redact_shapes(&html)
}

fn navigation(section: Section) -> String {
    let item = |target: Section, href: &str, label: &str| {
        let current = if target == section { r#" aria-current="page""# } else { "" };
        format!(r#"<li><a href="{href}"{current}>{label}</a></li>"#)
    };
    [
        item(Section::Applications, "/", "Applications"),
        item(Section::Repositories, "/repositories", "Repositories"),
        item(Section::ImagePolicies, "/imagepolicies", "Image policies"),
    ]
    .concat()
}

fn notice_html(notice: &Notice) -> String {
    match notice {
        Notice::Done(text) => {
            format!(r#"<div class="notice ok" role="status" id="notice">{}</div>"#, esc(text))
        }
        Notice::Refused(text) => format!(
            r#"<div class="notice refused" role="alert" id="notice"><strong>Refused:</strong> {}</div>"#,
            esc(text)
        ),
    }
}

/// A health state as a badge: its name in text (never colour alone) and a class for colour.
pub fn health_badge(state: HealthState) -> String {
    badge(health_class(state), state.as_str())
}

/// The colour class of a health state.
pub fn health_class(state: HealthState) -> &'static str {
    match state {
        HealthState::Healthy => "good",
        HealthState::Suspended | HealthState::Unknown => "neutral",
        HealthState::Progressing => "busy",
        HealthState::Degraded => "bad",
    }
}

/// `text` as a badge of `class` (`good`, `busy`, `bad`, `neutral`).
pub fn badge(class: &str, text: &str) -> String {
    format!(r#"<span class="badge {class}">{}</span>"#, esc(text))
}

/// Rows of a definition list: (term, already-escaped HTML).
pub fn facts(rows: &[(&str, String)]) -> String {
    let items: String = rows
        .iter()
        .map(|(term, value)| format!("<dt>{}</dt><dd>{value}</dd>", esc(term)))
        .collect();
    format!(r#"<dl class="facts">{items}</dl>"#)
}

/// The hidden CSRF field every form carries.
pub fn csrf_field(token: &str) -> String {
    format!(r#"<input type="hidden" name="csrf" value="{}">"#, esc(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(seg("a b/c"), "a+b%2Fc");
    }

    #[test]
    fn a_page_has_landmarks_a_skip_link_and_masks_secret_shapes() {
        let header =
            Header { user: "alice".into(), scope: "namespace demo".into(), ..Header::default() };
        let body = "<p>https://bob:hunter22@git.example/repo</p>";
        let html = page("Apps", Section::Applications, &header, None, body, None);
        for landmark in
            ["<header", "<nav aria-label=\"Main\"", "<main id=\"main\"", "class=\"skip\""]
        {
            assert!(html.contains(landmark), "{landmark}");
        }
        assert!(html.contains(r#"<a href="/" aria-current="page">Applications</a>"#));
        assert!(!html.contains("hunter22"), "{html}");
    }

    #[test]
    fn a_refusal_is_an_alert_with_the_servers_words() {
        let notice = Notice::Refused("applications \"x\" is forbidden: <nope>".into());
        let html = page(
            "x",
            Section::Applications,
            &Header::default(),
            Some(&notice),
            "",
            Some("/apps/a/b"),
        );
        assert!(html.contains(r#"data-src="/apps/a/b""#));
        assert!(html.contains(r#"role="alert""#));
        assert!(html.contains("applications &quot;x&quot; is forbidden: &lt;nope&gt;"));
    }
}
