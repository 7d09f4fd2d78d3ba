//! The one duration grammar of Kuvryn Sync, used by API fields (`spec.pollInterval`,
//! `spec.interval`, `spec.health.timeout`, `spec.strategy.failurePolicy.timeout`) and by every
//! command-line flag that takes a duration.
//!
//! A duration is one or more `<number><unit>` pairs written together, Go style: the number is
//! decimal digits with an optional fraction (`1.5`), the unit is `ms`, `s`, `m` or `h`. Examples:
//! `500ms`, `90s`, `5m`, `1.5m`, `1h30m`. No sign, no spaces, no bare numbers, no days (a day is
//! not always 24 hours). [`PATTERN`] is the same grammar as a regular expression, which the CRDs
//! carry so the API server refuses a bad value at admission.
//!
//! Hand-written: the grammar is a small subset of Go's `time.ParseDuration`, and the crates that
//! parse "human" durations accept more (spaces, days, words) than the CRD pattern allows.

use std::time::Duration;

/// The grammar as a regular expression (anchored), for CRD schemas.
pub const PATTERN: &str = kuvryn_sync_api::DURATION_PATTERN;

/// A duration that does not follow the grammar.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a duration: write a number and a unit (ms, s, m or h), like 90s, 5m or 1h30m"
)]
pub struct InvalidDuration {
    /// The text as given.
    pub text: String,
}

/// Parse `text` as the grammar in the module documentation says.
pub fn parse(text: &str) -> Result<Duration, InvalidDuration> {
    let invalid = || InvalidDuration { text: text.to_owned() };
    if text.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let (value, tail) = leading_number(rest).ok_or_else(invalid)?;
        let (seconds_per_unit, tail) = leading_unit(tail).ok_or_else(invalid)?;
        total += value * seconds_per_unit;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

/// Split `digits[.digits]` off the front of `text`.
fn leading_number(text: &str) -> Option<(f64, &str)> {
    let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let whole = digits(text);
    if whole == 0 {
        return None;
    }
    let mut end = whole;
    if let Some(fraction) = text[whole..].strip_prefix('.') {
        let fraction_len = digits(fraction);
        if fraction_len == 0 {
            return None;
        }
        end = whole + 1 + fraction_len;
    }
    Some((text[..end].parse().ok()?, &text[end..]))
}

/// Split a unit off the front of `text`: its length in seconds and the rest.
fn leading_unit(text: &str) -> Option<(f64, &str)> {
    [("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)]
        .into_iter()
        .find_map(|(unit, seconds)| text.strip_prefix(unit).map(|rest| (seconds, rest)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_parses_as_documented() {
        let cases = [
            ("60s", Some(60_000)),
            ("5m", Some(300_000)),
            ("1h30m", Some(5_400_000)),
            ("1.5m", Some(90_000)),
            ("500ms", Some(500)),
            ("1m500ms", Some(60_500)),
            ("0s", Some(0)),
            ("", None),
            ("5", None),
            ("5d", None),
            ("-5s", None),
            (" 5s", None),
            ("5 s", None),
            ("1.s", None),
            (".5s", None),
            ("5sm", None),
            ("s", None),
        ];
        for (text, millis) in cases {
            assert_eq!(parse(text).ok().map(|d| d.as_millis() as u64), millis, "{text:?}");
        }
    }

    #[test]
    fn the_parser_and_the_crd_pattern_accept_the_same_strings() {
        let pattern = regex::Regex::new(PATTERN).expect("PATTERN compiles");
        let samples = [
            "60s", "5m", "1h30m", "1.5m", "500ms", "1m500ms", "0s", "10h", "2.25h", "", "5", "5d",
            "-5s", " 5s", "5 s", "1.s", ".5s", "5sm", "s", "5S", "1h 30m", "1e3s", "5mss",
        ];
        for text in samples {
            assert_eq!(pattern.is_match(text), parse(text).is_ok(), "{text:?}");
        }
    }

    #[test]
    fn the_error_says_what_a_duration_looks_like() {
        let err = parse("10 minutes").expect_err("invalid");
        assert!(err.to_string().contains("\"10 minutes\""), "{err}");
        assert!(err.to_string().contains("1h30m"), "{err}");
    }
}
