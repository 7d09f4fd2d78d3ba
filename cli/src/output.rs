//! Output helpers shared by the commands: `-o json|yaml`, colour only on a terminal, kubectl-style
//! ages, short commits and aligned tables.
//!
//! Hand-written: a table is a few lines of padding and the colours are four ANSI codes, not worth
//! a dependency. Every string printed passes through `kuvryn_sync_core::redact::redact_shapes`.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kuvryn_sync_core::redact::redact_shapes;
use serde::Serialize;

/// `-o`: print the underlying objects instead of the human view, or change the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// JSON, pretty-printed.
    Json,
    /// YAML.
    Yaml,
    /// The table with more columns (list views only).
    Wide,
    /// `kind.group/name`, one per line, as kubectl prints (list views only).
    Name,
}

/// The `-o` flag of the read commands.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArgs {
    /// Print the underlying objects or status fields as JSON or YAML instead of the human view;
    /// `wide` and `name` change the table of the list views (`status`, `get`, `tree`, `events`).
    #[arg(short = 'o', long = "output", value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
}

impl OutputArgs {
    /// Whether `-o wide` was given.
    pub fn wide(&self) -> bool {
        self.format == Some(Format::Wide)
    }

    /// JSON or YAML, when one of them was asked for.
    pub fn structured(&self) -> Option<Format> {
        self.format.filter(|f| matches!(f, Format::Json | Format::Yaml))
    }
}

/// `value` as `format`, redacted; `wide` and `name` are refused (this view is not a list).
pub fn structured<T: Serialize>(format: Format, value: &T) -> Result<String> {
    let text = match format {
        Format::Json => serde_json::to_string_pretty(value)? + "\n",
        Format::Yaml => kuvryn_sync_core::yaml::to_string(value)?,
        Format::Wide | Format::Name => {
            return Err(crate::Refused(
                "-o wide and -o name apply to list views (`status` without APP, `get`, `tree`, \
                 `events`); use -o json or -o yaml here"
                    .to_owned(),
            )
            .into());
        }
    };
    Ok(redact_shapes(&text))
}

/// `kind.group/name` lines for `-o name`, as kubectl prints them.
pub fn names(resource: &str, names: impl IntoIterator<Item = String>) -> String {
    names.into_iter().map(|name| format!("{resource}/{name}\n")).collect()
}

/// Print `text` to standard output, redacted.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(redact_shapes(text).as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Whether to colour: only on a terminal, and never when `NO_COLOR` is set (to anything).
pub fn colour_enabled(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none()
}

/// Colours of the human views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    Green,
    Yellow,
    Red,
    Dim,
}

/// Paints text, or leaves it plain when colour is off.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    /// Whether ANSI colours are written.
    pub colour: bool,
}

impl Style {
    /// The style for standard output.
    pub fn for_stdout() -> Style {
        Style {
            colour: colour_enabled(
                std::io::stdout().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ),
        }
    }

    /// `text` in `colour` (plain when colour is off).
    pub fn paint(&self, colour: Colour, text: &str) -> String {
        if !self.colour {
            return text.to_owned();
        }
        let code = match colour {
            Colour::Green => "32",
            Colour::Yellow => "33",
            Colour::Red => "31",
            Colour::Dim => "2",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }
}

/// kubectl's age format: `45s`, `12m`, `5h`, `3d`; `<unknown>` without a time.
pub fn age(now: Timestamp, then: Option<&Time>) -> String {
    let Some(then) = then else { return "<unknown>".to_owned() };
    let seconds = now.as_second().saturating_sub(then.0.as_second()).max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A time as RFC 3339, or `-`.
pub fn timestamp(time: Option<&Time>) -> String {
    time.map_or_else(|| "-".to_owned(), |t| t.0.to_string())
}

/// The first 12 characters of a commit (as `status.deployedRevisionShort`), or `-`.
pub fn short_commit(commit: Option<&str>) -> String {
    match commit {
        Some(c) if !c.is_empty() => c.chars().take(12).collect(),
        _ => "-".to_owned(),
    }
}

/// An Application's Ready condition as `True/Healthy`, `False/HealthFailure`, or `-` before the
/// first status: the one summary `status`, `diagnose`, `wait` and the UI print.
pub fn ready_summary(app: &kuvryn_sync_api::Application) -> String {
    let conditions = app.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    condition(conditions, "Ready")
        .map_or_else(|| "-".to_owned(), |c| format!("{}/{}", c.status, c.reason))
}

/// The condition of `type_` in `conditions`.
pub fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Rows aligned in columns separated by three spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(i) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 3));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("valid")
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let cases = [
            (true, None, true),
            (true, Some(""), false),
            (true, Some("1"), false),
            (false, None, false),
            (false, Some("1"), false),
        ];
        for (tty, no_color, want) in cases {
            let value = no_color.map(std::ffi::OsStr::new);
            assert_eq!(colour_enabled(tty, value), want, "tty {tty} NO_COLOR {no_color:?}");
        }
    }

    #[test]
    fn plain_style_writes_no_escape_codes() {
        assert_eq!(Style { colour: false }.paint(Colour::Red, "x"), "x");
        assert_eq!(Style { colour: true }.paint(Colour::Red, "x"), "\x1b[31mx\x1b[0m");
    }

    #[test]
    fn ages_read_like_kubectl() {
        let now = at(1_000_000);
        let cases = [
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (7199, "119m"),
            (7200, "2h"),
            (172_799, "47h"),
            (172_800, "2d"),
            (-5, "0s"),
        ];
        for (ago, want) in cases {
            let then = Time(at(1_000_000 - ago));
            assert_eq!(age(now, Some(&then)), want, "{ago}s ago");
        }
        assert_eq!(age(now, None), "<unknown>");
    }

    #[test]
    fn short_commits_are_twelve_characters() {
        assert_eq!(short_commit(Some("0123456789abcdef")), "0123456789ab");
        assert_eq!(short_commit(Some("abc")), "abc");
        assert_eq!(short_commit(Some("")), "-");
        assert_eq!(short_commit(None), "-");
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["web".to_owned(), "Synced".to_owned()],
            vec!["payments".to_owned(), "OutOfSync".to_owned()],
        ];
        assert_eq!(
            table(&["NAME", "SYNC"], &rows),
            "NAME       SYNC\nweb        Synced\npayments   OutOfSync\n"
        );
    }

    #[test]
    fn structured_output_masks_secret_shapes() {
        let value = serde_json::json!({"url": "https://user:hunter22@example.com/repo"});
        let text = structured(Format::Json, &value).expect("json");
        assert!(!text.contains("hunter22"), "{text}");
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("still JSON");
        assert_eq!(parsed["url"], "https://user:***@example.com/repo");
    }
}
