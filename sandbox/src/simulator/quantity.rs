//! Resource quantities as the scheduler counts them: CPU in millicores, everything else in units
//! (<https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The value of a quantity scaled by `scale` (1000 for CPU millicores, 1 for bytes and counts),
/// rounded up like `Quantity.MilliValue`/`Value`; `None` when it does not parse.
pub fn scaled(q: &Quantity, scale: i128) -> Option<i64> {
    let s = q.0.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'));
    let (num, suffix) = match split {
        // `1e3` and `1E3` are decimal exponents, `1Ei` and `1E` are suffixes.
        Some(i) if matches!(&s[i..i + 1], "e" | "E") && s[i + 1..].parse::<i32>().is_ok() => {
            let exp: i32 = s[i + 1..].parse().ok()?;
            return apply(&s[..i], 10i128.checked_pow(exp.unsigned_abs())?, exp < 0, scale);
        }
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let (mult, divide): (i128, bool) = match suffix {
        "" => (1, false),
        "n" => (1_000_000_000, true),
        "u" => (1_000_000, true),
        "m" => (1_000, true),
        "k" => (1_000, false),
        "M" => (1_000_000, false),
        "G" => (1_000_000_000, false),
        "T" => (1_000_000_000_000, false),
        "P" => (1_000_000_000_000_000, false),
        "E" => (1_000_000_000_000_000_000, false),
        "Ki" => (1 << 10, false),
        "Mi" => (1 << 20, false),
        "Gi" => (1 << 30, false),
        "Ti" => (1 << 40, false),
        "Pi" => (1 << 50, false),
        "Ei" => (1 << 60, false),
        _ => return None,
    };
    apply(num, mult, divide, scale)
}

fn apply(num: &str, mult: i128, divide: bool, scale: i128) -> Option<i64> {
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let neg = int.starts_with('-');
    let int = int.trim_start_matches(['+', '-']);
    let digits = format!("{int}{frac}");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mantissa: i128 = digits.parse().ok()?;
    let denom = 10i128.checked_pow(frac.len() as u32)?;
    let (n, d) =
        if divide { (mantissa * scale, denom * mult) } else { (mantissa * mult * scale, denom) };
    let v = (n + d - 1) / d;
    i64::try_from(if neg { -v } else { v }).ok()
}

/// CPU in millicores.
pub fn milli_cpu(q: &Quantity) -> i64 {
    scaled(q, 1000).unwrap_or(0)
}

/// Bytes (or a plain count).
pub fn value(q: &Quantity) -> i64 {
    scaled(q, 1).unwrap_or(0)
}
