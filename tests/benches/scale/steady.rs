//! Steady-state CPU: the controller with N idle Applications (nothing changes in Git or in the
//! cluster), started afresh with a short resync interval so that one measurement window holds
//! exactly one resync of every Application, as production logging would run it.
//!
//! After the start-up pass (every Application reconciled once, counted by
//! `kuvryn_sync_renders_total`), the controller's CPU time (`utime + stime` of
//! `/proc/PID/stat`, every thread) is read over:
//!
//! - a **quiet** stretch right after the pass, before any resync is due: the cost of holding the
//!   watches and timers;
//! - a **resync window** from the end of the pass until the next pass has reconciled every
//!   Application again (at least one resync interval): the cost of one resync of everything.
//!
//! From those, the share of a core at the default resync interval (5 minutes) follows: the quiet
//! rate over 5 minutes plus one pass. The goal (issue 26) is under 5% of a core.
//!
//! The windows are measurements, not synchronisation: the benchmark waits on counters for every
//! event it depends on and only lets wall-clock time pass while it measures.

use std::time::{Duration, Instant};

use anyhow::Result;
use kuvryn_sync_tests::application::Env;
use kuvryn_sync_tests::cluster::wait_for;
use kuvryn_sync_tests::perf::CpuMeter;
use serde_json::json;

use super::push::renders;
use super::{READY_DEADLINE, controller_pid, secs};

/// The controller's default `--application-resync-interval`.
const DEFAULT_RESYNC: Duration = Duration::from_secs(300);
const GOAL_PERCENT: f64 = 5.0;

/// Start the controller with `resync`, wait for its start-up pass over `apps` Applications, and
/// print `scale_steady_cpu`.
pub async fn run(env: &mut Env, apps: usize, resync: Duration) -> Result<()> {
    let interval = format!("{}ms", resync.as_millis());
    let start = Instant::now();
    env.start_controller_with(&["--application-resync-interval", &interval], &[("NO_COLOR", "1")])?;
    let pid = controller_pid()?;
    let pass = wait_renders(env, (0, 0), apps, "the start-up pass").await?;
    let startup = start.elapsed();
    let requests = super::sum(&env.controller_counter("kuvryn_sync_api_requests_total").await?);
    let meter = CpuMeter::start(pid)?;
    // Quiet: a quarter of the interval at most, well before the first resync is due (each
    // Application's falls one interval after its start-up reconcile).
    let quiet_for = (resync / 4).min(Duration::from_secs(10));
    tokio::time::sleep(quiet_for).await;
    let quiet = meter.read()?;
    let quiet_renders = total(renders(env).await?) - total(pass);
    // The resync window: until every Application was reconciled again, and at least one interval.
    wait_renders(env, pass, apps, "the resync pass").await?;
    if let Some(rest) = resync.checked_sub(meter.read()?.wall) {
        tokio::time::sleep(rest).await;
    }
    let window = meter.read()?;
    let reconciles = total(renders(env).await?) - total(pass);
    let sent = super::sum(&env.controller_counter("kuvryn_sync_api_requests_total").await?)
        .saturating_sub(requests);
    let quiet_rate = quiet.cpu.as_secs_f64() / quiet.wall.as_secs_f64();
    let pass_cpu = (window.cpu.as_secs_f64() - quiet_rate * window.wall.as_secs_f64()).max(0.0);
    let at_default = 100.0 * (quiet_rate * DEFAULT_RESYNC.as_secs_f64() + pass_cpu)
        / DEFAULT_RESYNC.as_secs_f64();
    let round2 = |x: f64| (x * 100.0).round() / 100.0;
    println!(
        "{}",
        json!({"bench": "scale_steady_cpu", "apps": apps, "resync_s": secs(resync),
               "startup_pass_s": secs(startup),
               "window_s": secs(window.wall), "cpu_s": secs(window.cpu),
               "cpu_percent_of_core": round2(window.percent_of_core()),
               "reconciles": reconciles,
               "cpu_ms_per_reconcile": round2(1000.0 * pass_cpu / reconciles.max(1) as f64),
               "api_requests_per_reconcile": round2(sent as f64 / reconciles.max(1) as f64),
               "quiet_s": secs(quiet.wall), "quiet_cpu_percent": round2(quiet.percent_of_core()),
               "quiet_reconciles": quiet_renders,
               "default_resync_s": DEFAULT_RESYNC.as_secs(),
               "percent_of_core_at_default_resync": round2(at_default),
               "goal_percent": GOAL_PERCENT})
    );
    Ok(())
}

fn total(counts: (u64, u64)) -> u64 {
    counts.0 + counts.1
}

/// Wait until `apps` renders or cache hits were counted since `since`; returns the counts then.
pub(super) async fn wait_renders(
    env: &Env,
    since: (u64, u64),
    apps: usize,
    what: &str,
) -> Result<(u64, u64)> {
    let goal = total(since) + apps as u64;
    wait_for(&format!("{what}: {apps} reconciles"), READY_DEADLINE, || async {
        let now = renders(env).await?;
        Ok(((total(now) >= goal).then_some(now), format!("{} of {goal}", total(now))))
    })
    .await
}
