//! Image write-back edits: setting the fields of a YAML file that carry an ImagePolicy marker
//! comment to the policy's selection, changing those values and no other byte. Pure: the
//! controller lists the YAML files under `spec.imageUpdate.path` in a fresh checkout, reads each,
//! calls [`update_file`] with a lookup of the ImagePolicies, writes back the files that changed,
//! and commits with [`commit_message`].
//!
//! Hand-written, line by line, because no YAML library reproduces a file byte for byte after an
//! edit: serializers drop or move comments (the markers themselves), reorder or reindent keys,
//! and change quoting, and a write-back must change exactly the marked values.
//!
//! Markers:
//! - A marker is a comment after a field's value on the same line whose text is a JSON object
//!   with the key `$imagepolicy`, parsed with `serde_json` (whitespace inside it is free):
//!   `image: ghcr.io/acme/api:1.2.0 # {"$imagepolicy": "team:api"}`. Fields are `key: value`
//!   lines and list items (`- value`, `- key: value`); keys may be quoted.
//! - `"NAMESPACE:NAME"` sets the value to the policy's `latestImage` (`image:tag@digest`).
//! - `"NAMESPACE:NAME:tag"` sets only the tag. In a full reference (`repo:tag`, `repo`,
//!   `repo:tag@digest`) the tag is replaced or added and the name kept; a digest already pinned
//!   in the value is replaced with the policy's digest, since a reference that keeps the old
//!   digest would keep running the old image whatever its tag says. A value with no name part
//!   (no `/`, `:` or `@`, like a Helm chart's `image.tag: 1.2.0`) is a tag on its own and is
//!   replaced whole.
//! - `"NAMESPACE:NAME:name"` sets only the name (the repository, with its registry), keeping the
//!   value's tag and digest as they are.
//! - A reference is split as container runtimes split it: a digest after the first `@`, a tag
//!   after the last `:` that follows the last `/` (so `127.0.0.1:5000/app` has no tag).
//!
//! What is preserved: every byte outside the replaced values — comments, key order, indentation,
//! blank lines, line endings (`\n` and `\r\n`), a byte order mark, and the value's quote style
//! (`"..."`, `'...'` or plain). A plain value that would no longer read as a string (a tag like
//! `1.10`, `2024` or `2024-01-31`, which YAML reads as a number or a date) is written
//! double-quoted.
//!
//! What is left alone and reported in [`FileUpdate::skipped`]: markers naming a policy the
//! lookup does not know (the policy does not exist, or the caller does not allow it), markers
//! whose `$imagepolicy` is not `NAMESPACE:NAME[:tag|:name]`, markers on a value this module does
//! not edit (flow collections, anchors, aliases, tags, quoted values with escapes, lines that are
//! no field), and new values with characters outside an image reference's
//! (`A-Z a-z 0-9 . _ - : / @ +`). Lines inside block scalars (`|`, `>`) and comment lines are
//! text, never fields. Running [`update_file`] on its own output changes nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use kuvryn_sync_api::ImagePolicyStatus;

use crate::image_policy::image_reference;
use crate::receiver::is_hook_target;

/// The JSON key of a marker comment.
pub const MARKER_KEY: &str = "$imagepolicy";

/// Longest marker text quoted in a report.
const MAX_QUOTED: usize = 120;

/// An ImagePolicy a marker names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyRef {
    /// Namespace of the ImagePolicy.
    pub namespace: String,
    /// Name of the ImagePolicy.
    pub name: String,
}

impl fmt::Display for PolicyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What part of the value a marker sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MarkerField {
    /// No suffix: the whole value becomes `image:tag@digest`.
    Image,
    /// `:tag`.
    Tag,
    /// `:name`.
    Name,
}

/// A policy's selection: `status.latestImage` in its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyImage {
    /// The image repository the selection was made in, such as `ghcr.io/acme/api`.
    pub image: String,
    /// The selected tag.
    pub tag: String,
    /// The selected tag's manifest digest.
    pub digest: String,
}

impl PolicyImage {
    /// `image:tag@digest`.
    pub fn reference(&self) -> String {
        image_reference(&self.image, &self.tag, &self.digest)
    }

    /// The selection recorded in an ImagePolicy's status, or `None` when it has none (yet) or
    /// its `latestImage` does not end with `:latestTag@latestDigest`. The image is taken from
    /// `latestImage`, so it is the one the selection was made in even if `spec.image` changed
    /// since.
    pub fn from_status(status: &ImagePolicyStatus) -> Option<PolicyImage> {
        let tag = status.latest_tag.as_deref()?;
        let digest = status.latest_digest.as_deref()?;
        let image = status.latest_image.as_deref()?.strip_suffix(&format!(":{tag}@{digest}"))?;
        (!image.is_empty()).then(|| PolicyImage {
            image: image.to_owned(),
            tag: tag.to_owned(),
            digest: digest.to_owned(),
        })
    }
}

/// One value changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// Line number, from 1.
    pub line: usize,
    /// The policy the marker names.
    pub policy: PolicyRef,
    /// What the marker sets.
    pub field: MarkerField,
    /// The value before, without quotes.
    pub old: String,
    /// The value after, without quotes.
    pub new: String,
}

/// A marker left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Line number, from 1.
    pub line: usize,
    /// Why.
    pub problem: SkipProblem,
}

/// Why a marker was left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipProblem {
    /// The lookup does not know the policy.
    UnknownPolicy(PolicyRef),
    /// `$imagepolicy` is not `NAMESPACE:NAME`, `NAMESPACE:NAME:tag` or `NAMESPACE:NAME:name`, or
    /// the comment is not a JSON object with a string `$imagepolicy`.
    MalformedMarker {
        /// The marker comment as written (shortened).
        marker: String,
    },
    /// The marked value is not one this module edits.
    UnsupportedValue {
        /// The policy the marker names.
        policy: PolicyRef,
        /// What the value is.
        detail: &'static str,
    },
    /// The new value has characters no image reference has; it is not written.
    UnsafeValue {
        /// The policy the marker names.
        policy: PolicyRef,
    },
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let line = self.line;
        match &self.problem {
            SkipProblem::UnknownPolicy(policy) => write!(
                f,
                "line {line}: ImagePolicy {policy} was not found (or may not be used here); the value is left as it is"
            ),
            SkipProblem::MalformedMarker { marker } => write!(
                f,
                "line {line}: marker {marker:?} is not {{\"$imagepolicy\": \"NAMESPACE:NAME\"}} (optionally with :tag or :name after NAME); fix the comment"
            ),
            SkipProblem::UnsupportedValue { policy, detail } => write!(
                f,
                "line {line}: the value marked for ImagePolicy {policy} is {detail}, which image write-back does not edit; write it as a plain or quoted scalar on the marker's line"
            ),
            SkipProblem::UnsafeValue { policy } => write!(
                f,
                "line {line}: ImagePolicy {policy}'s selection has characters an image reference cannot have; it is not written"
            ),
        }
    }
}

/// A file after [`update_file`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileUpdate {
    /// The new text (equal to the input when nothing changed).
    pub text: String,
    /// The values changed, in line order.
    pub changes: Vec<Change>,
    /// The markers left alone, in line order.
    pub skipped: Vec<Skipped>,
}

/// Set every marked value of `text` to the selection `lookup` gives for the policy it names; see
/// the module documentation.
pub fn update_file(text: &str, lookup: impl Fn(&PolicyRef) -> Option<PolicyImage>) -> FileUpdate {
    let mut out = String::with_capacity(text.len() + 64);
    let mut changes = Vec::new();
    let mut skipped = Vec::new();
    let mut block: Option<usize> = None;

    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        let (content, ending) = split_ending(raw);
        // A byte order mark is kept, and not read as indentation.
        let bom =
            if index == 0 && content.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
        let body = &content[bom..];

        // Content lines of a block scalar are text: blank, or indented past its parent.
        if block.is_some_and(|parent| is_blank(body) || indentation(body) > parent) {
            out.push_str(raw);
            continue;
        }
        let line = scan_line(body);
        block = line.block_scalar;
        let Some(marker) = line.marker else {
            out.push_str(raw);
            continue;
        };
        let edit = match marker {
            Err(problem) => Err(problem),
            Ok((policy, field)) => plan_edit(&line.value, policy, field, &lookup),
        };
        match edit {
            Err(problem) => {
                skipped.push(Skipped { line: number, problem });
                out.push_str(raw);
            }
            Ok(None) => out.push_str(raw),
            Ok(Some((span, written, change))) => {
                let (start, end) = (bom + span.0, bom + span.1);
                out.push_str(&content[..start]);
                out.push_str(&written);
                out.push_str(&content[end..]);
                out.push_str(ending);
                changes.push(Change { line: number, ..change });
            }
        }
    }
    FileUpdate { text: out, changes, skipped }
}

/// The edit of one marked value: the byte span to replace, its new text (with quotes) and the
/// change; `None` when the value already is what the policy selects.
type Edit = Option<((usize, usize), String, Change)>;

fn plan_edit(
    value: &Result<Scalar<'_>, &'static str>,
    policy: PolicyRef,
    field: MarkerField,
    lookup: &impl Fn(&PolicyRef) -> Option<PolicyImage>,
) -> Result<Edit, SkipProblem> {
    let scalar = match value {
        Ok(scalar) => scalar,
        Err(detail) => return Err(SkipProblem::UnsupportedValue { policy, detail }),
    };
    let Some(image) = lookup(&policy) else { return Err(SkipProblem::UnknownPolicy(policy)) };
    let new = new_value(scalar.text, field, &image);
    if !is_safe(&new) {
        return Err(SkipProblem::UnsafeValue { policy });
    }
    if new == scalar.text {
        return Ok(None);
    }
    let written = match scalar.quote {
        Quote::Double => format!("\"{new}\""),
        Quote::Single => format!("'{new}'"),
        Quote::Plain if needs_quotes(&new) => format!("\"{new}\""),
        Quote::Plain => new.clone(),
    };
    let change = Change { line: 0, policy, field, old: scalar.text.to_owned(), new };
    Ok(Some((scalar.span, written, change)))
}

/// The value a marker asks for, given the current one.
fn new_value(current: &str, field: MarkerField, image: &PolicyImage) -> String {
    match field {
        MarkerField::Image => image.reference(),
        MarkerField::Tag if !current.contains(['/', ':', '@']) => image.tag.clone(),
        MarkerField::Tag => {
            let parts = split_reference(current);
            match parts.digest {
                Some(_) => format!("{}:{}@{}", parts.name, image.tag, image.digest),
                None => format!("{}:{}", parts.name, image.tag),
            }
        }
        MarkerField::Name => {
            let parts = split_reference(current);
            let mut value = image.image.clone();
            if let Some(tag) = parts.tag {
                value.push(':');
                value.push_str(tag);
            }
            if let Some(digest) = parts.digest {
                value.push('@');
                value.push_str(digest);
            }
            value
        }
    }
}

/// An image reference in its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReferenceParts<'a> {
    /// The name, with its registry and port: `127.0.0.1:5000/team/app`.
    pub name: &'a str,
    /// The tag, if any.
    pub tag: Option<&'a str>,
    /// The digest, if any.
    pub digest: Option<&'a str>,
}

/// Split `reference` into name, tag and digest: the digest follows the first `@`, the tag the
/// last `:` after the last `/`.
pub fn split_reference(reference: &str) -> ReferenceParts<'_> {
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    let path_start = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[path_start..].rfind(':') {
        Some(colon) => {
            let colon = path_start + colon;
            ReferenceParts { name: &rest[..colon], tag: Some(&rest[colon + 1..]), digest }
        }
        None => ReferenceParts { name: rest, tag: None, digest },
    }
}

/// Whether `value` has only characters of an image reference, so it can be written plain or in
/// either quote style without escaping, and cannot break the YAML around it.
fn is_safe(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/@+".contains(&b))
}

static NON_STRING_PLAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        // null and booleans of YAML 1.1 and 1.2
        r"^(?:~|null|Null|NULL|y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE",
        r"|on|On|ON|off|Off|OFF)$",
        // integers in base 2, 8 and 16, infinities and not-a-number
        r"|^[-+]?0[bBoOxX][0-9a-fA-F_]+$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$",
        // YAML 1.1 base-60 numbers and timestamps (dates)
        r"|^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$|^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}",
    ))
    .expect("valid regex")
});

/// Whether `value`, written plain, would read as something other than this string: a null, a
/// boolean, a number (also with YAML 1.1's `_` separators) or a date.
fn needs_quotes(value: &str) -> bool {
    NON_STRING_PLAIN.is_match(value) || value.replace('_', "").parse::<f64>().is_ok()
}

/// Split a line into its content and its line ending (`\n`, `\r\n` or nothing).
fn split_ending(line: &str) -> (&str, &str) {
    if let Some(content) = line.strip_suffix("\r\n") {
        (content, "\r\n")
    } else if let Some(content) = line.strip_suffix('\n') {
        (content, "\n")
    } else {
        (line, "")
    }
}

fn is_blank(line: &str) -> bool {
    line.bytes().all(|b| b == b' ' || b == b'\t')
}

fn indentation(line: &str) -> usize {
    line.bytes().take_while(|b| *b == b' ').count()
}

/// Quote style of a scalar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quote {
    Plain,
    Single,
    Double,
}

/// A scalar value on a line: its text without quotes, its quote style, and its byte span in the
/// line (quotes included).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Scalar<'a> {
    text: &'a str,
    quote: Quote,
    span: (usize, usize),
}

/// What one line holds, as far as markers are concerned.
#[derive(Debug)]
struct Line<'a> {
    /// The marker, if the line's comment is one.
    marker: Option<Result<(PolicyRef, MarkerField), SkipProblem>>,
    /// The field's value, or why it is none this module edits.
    value: Result<Scalar<'a>, &'static str>,
    /// When the line starts a block scalar: the indentation its content lines exceed.
    block_scalar: Option<usize>,
}

/// The detail of a marker on a line that has no field.
const NO_FIELD: &str = "not the value of a field or list item";

/// Read a line: list item dashes, an optional key, the value and the comment.
fn scan_line(line: &str) -> Line<'_> {
    let bytes = line.as_bytes();
    let is_space = |i: usize| i >= bytes.len() || bytes[i] == b' ' || bytes[i] == b'\t';
    let skip_spaces = |mut i: usize| {
        while i < bytes.len() && (bytes[i] == b' ' || bytes[i] == b'\t') {
            i += 1;
        }
        i
    };

    let mut pos = skip_spaces(0);
    if pos >= bytes.len() || bytes[pos] == b'#' {
        // Blank or a comment line: a commented-out field is not a field.
        return Line { marker: None, value: Err(NO_FIELD), block_scalar: None };
    }
    let mut parent = None;
    while bytes.get(pos) == Some(&b'-') && is_space(pos + 1) {
        parent = Some(pos);
        pos = skip_spaces(pos + 1);
    }

    // The first scalar: a key, or the value of a list item.
    let first_end = match read_scalar(line, pos) {
        Ok((_, end)) => end,
        Err(_) => pos,
    };
    let after = skip_spaces(first_end);
    let value_start = if bytes.get(after) == Some(&b':') && is_space(after + 1) {
        parent = Some(pos);
        skip_spaces(after + 1)
    } else if parent.is_some() {
        pos
    } else {
        // A bare scalar (a continuation line, a document marker) is no field.
        return with_comment(line, skip_to_comment(line, first_end), Err(NO_FIELD), None);
    };

    let (value, end) = match read_scalar(line, value_start) {
        Ok((scalar, end)) => (Ok(scalar), end),
        Err(detail) => (Err(detail), skip_to_comment(line, value_start)),
    };
    let block = match &value {
        Ok(scalar) if scalar.quote == Quote::Plain && is_block_indicator(scalar.text) => parent,
        _ => None,
    };
    // Anything but spaces between the value and the comment means the value is not one scalar.
    let rest = skip_spaces(end);
    let value = if rest < bytes.len() && bytes[rest] != b'#' {
        Err("a value followed by more text on its line")
    } else if matches!(&value, Ok(s) if s.quote == Quote::Plain && s.text.is_empty()) {
        Err("empty")
    } else {
        value
    };
    let value = value.and_then(|scalar| match scalar.text.as_bytes().first() {
        Some(b'|' | b'>') if scalar.quote == Quote::Plain => Err("a block scalar"),
        _ => Ok(scalar),
    });
    with_comment(line, skip_to_comment(line, rest), value, block)
}

/// `|`, `>` and their chomping and indentation indicators.
fn is_block_indicator(text: &str) -> bool {
    let mut chars = text.chars();
    matches!(chars.next(), Some('|' | '>'))
        && chars.as_str().len() <= 2
        && chars.all(|c| c == '+' || c == '-' || ('1'..='9').contains(&c))
}

/// Finish a line: the comment starting at `at` (if any) is read as a marker.
fn with_comment<'a>(
    line: &'a str,
    at: usize,
    value: Result<Scalar<'a>, &'static str>,
    block_scalar: Option<usize>,
) -> Line<'a> {
    let marker = line.get(at..).and_then(|c| c.strip_prefix('#')).and_then(read_marker);
    Line { marker, value, block_scalar }
}

/// Where the comment of a line starts (a `#` after a space), from `from`; the line's length
/// without one. Quotes are not tracked: used only where no quoted scalar is being read.
fn skip_to_comment(line: &str, from: usize) -> usize {
    let bytes = line.as_bytes();
    (from..bytes.len())
        .find(|&i| bytes[i] == b'#' && (i == 0 || bytes[i - 1] == b' ' || bytes[i - 1] == b'\t'))
        .unwrap_or(bytes.len())
}

/// Read the scalar starting at `start`: quoted to its closing quote, plain to the comment or a
/// `: ` mapping indicator. Returns the scalar and where it ends.
fn read_scalar(line: &str, start: usize) -> Result<(Scalar<'_>, usize), &'static str> {
    let bytes = line.as_bytes();
    match bytes.get(start) {
        Some(b'"') => {
            let mut i = start + 1;
            while i < bytes.len() {
                match bytes[i] {
                    b'\\' => return Err("a double-quoted value with escapes"),
                    b'"' => {
                        let scalar = Scalar {
                            text: &line[start + 1..i],
                            quote: Quote::Double,
                            span: (start, i + 1),
                        };
                        return Ok((scalar, i + 1));
                    }
                    _ => i += 1,
                }
            }
            Err("a quoted value that goes on past its line")
        }
        Some(b'\'') => {
            let Some(close) = line[start + 1..].find('\'') else {
                return Err("a quoted value that goes on past its line");
            };
            let close = start + 1 + close;
            if bytes.get(close + 1) == Some(&b'\'') {
                return Err("a single-quoted value with an escaped quote");
            }
            let scalar = Scalar {
                text: &line[start + 1..close],
                quote: Quote::Single,
                span: (start, close + 1),
            };
            Ok((scalar, close + 1))
        }
        None | Some(b'#') => {
            Ok((Scalar { text: "", quote: Quote::Plain, span: (start, start) }, start))
        }
        Some(b'[' | b'{') => Err("a flow collection"),
        Some(b'&') => Err("an anchored value"),
        Some(b'*') => Err("an alias"),
        Some(b'!') => Err("a tagged value"),
        Some(b'`' | b'@' | b'%') => Err("not a valid plain scalar"),
        _ => {
            let mut end = start;
            while end < bytes.len() {
                let spaced = |i: usize| i >= bytes.len() || bytes[i] == b' ' || bytes[i] == b'\t';
                if bytes[end] == b':' && spaced(end + 1) {
                    break;
                }
                if bytes[end] == b'#'
                    && end > start
                    && (bytes[end - 1] == b' ' || bytes[end - 1] == b'\t')
                {
                    break;
                }
                end += 1;
            }
            let text = line[start..end].trim_end_matches([' ', '\t']);
            let end = start + text.len();
            Ok((Scalar { text, quote: Quote::Plain, span: (start, end) }, end))
        }
    }
}

/// The marker in a comment's text (after `#`), if the comment is one: `None` for any other
/// comment, an error for a comment that mentions `$imagepolicy` but is not a valid marker.
fn read_marker(comment: &str) -> Option<Result<(PolicyRef, MarkerField), SkipProblem>> {
    let text = comment.trim();
    if !text.contains(MARKER_KEY) {
        return None;
    }
    let malformed = || SkipProblem::MalformedMarker { marker: shorten(text) };
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let reference = parsed.as_ref().and_then(|v| v.get(MARKER_KEY)).and_then(Value::as_str);
    Some(reference.and_then(parse_marker).ok_or_else(malformed))
}

/// `NAMESPACE:NAME[:tag|:name]`, with a namespace and name that can name an object.
fn parse_marker(text: &str) -> Option<(PolicyRef, MarkerField)> {
    let parts: Vec<&str> = text.split(':').collect();
    let (namespace, name, field) = match parts.as_slice() {
        [namespace, name] => (*namespace, *name, MarkerField::Image),
        [namespace, name, "tag"] => (*namespace, *name, MarkerField::Tag),
        [namespace, name, "name"] => (*namespace, *name, MarkerField::Name),
        _ => return None,
    };
    is_hook_target(namespace, name)
        .then(|| (PolicyRef { namespace: namespace.to_owned(), name: name.to_owned() }, field))
}

fn shorten(text: &str) -> String {
    crate::redact::truncate(text, MAX_QUOTED)
}

/// The commit message of a write-back: a subject, then one line per change,
/// `path:line: old -> new (policy namespace/name)`, files in path order.
pub fn commit_message(changes: &BTreeMap<String, Vec<Change>>) -> String {
    let count: usize = changes.values().map(Vec::len).sum();
    let mut message = format!(
        "Update {count} image reference{} from ImagePolicies\n\n",
        if count == 1 { "" } else { "s" }
    );
    for (path, file_changes) in changes {
        for change in file_changes {
            let part = match change.field {
                MarkerField::Image => "",
                MarkerField::Tag => ", tag only",
                MarkerField::Name => ", name only",
            };
            message.push_str(&format!(
                "{path}:{}: {} -> {} (policy {}{part})\n",
                change.line, change.old, change.new, change.policy
            ));
        }
    }
    message
}

#[cfg(test)]
#[path = "image_update_tests.rs"]
mod tests;
