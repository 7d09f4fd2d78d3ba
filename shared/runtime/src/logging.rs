//! Log set-up: one tracing subscriber per process, writing to stderr, text or JSON lines,
//! coloured only on a terminal. The filter is `RUST_LOG` when it is set (so a one-off debugging
//! session can override a deployment's flag without editing it), else `--log-level`, else
//! `info`.

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// A clap value parser for `--log-level`: a level (`error`, `warn`, `info`, `debug`, `trace`) or
/// any `tracing` filter directive list, such as `info,kuvryn_sync_controller=debug`.
pub fn level(text: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(text).map(|_| text.to_owned()).map_err(|err| {
        format!(
            "{err}: use error, warn, info, debug or trace, or directives such as info,kube=debug"
        )
    })
}

/// The filter directives in force: `RUST_LOG` when set and not empty, else `flag`, else `info`.
pub fn directives(rust_log: Option<&str>, flag: Option<&str>) -> String {
    rust_log.filter(|v| !v.trim().is_empty()).or(flag).unwrap_or("info").to_owned()
}

/// Install the global tracing subscriber with the filter [`directives`] chooses.
pub fn init(format: LogFormat, log_level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let rust_log = std::env::var(EnvFilter::DEFAULT_ENV).ok();
    let wanted = directives(rust_log.as_deref(), log_level);
    let filter = EnvFilter::try_new(&wanted).unwrap_or_else(|err| {
        eprintln!("ignoring the log filter {wanted:?} ({err}); logging at info");
        EnvFilter::new("info")
    });
    // Colours only on a terminal: a log file or a collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_then_the_flag_then_info() {
        assert_eq!(directives(Some("debug"), Some("warn")), "debug");
        assert_eq!(directives(Some(" "), Some("warn")), "warn");
        assert_eq!(directives(None, Some("warn")), "warn");
        assert_eq!(directives(None, None), "info");
    }

    #[test]
    fn the_flag_takes_levels_and_directives_and_refuses_nonsense() {
        assert!(level("debug").is_ok());
        assert!(level("info,kube=debug").is_ok());
        assert!(level("loud=[").is_err());
    }
}
