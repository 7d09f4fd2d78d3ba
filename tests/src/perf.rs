//! Small measurement helpers shared by the benchmarks: a process's CPU time from
//! `/proc/PID/stat`, and percentiles of a sample.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// Clock ticks a second, as `/proc/PID/stat` counts `utime` and `stime` (`getconf CLK_TCK`;
/// 100 on every Linux this project runs on, used when `getconf` is missing).
pub fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100)
}

/// `utime + stime` of process `pid` (all its threads), in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    parse_cpu_ticks(&stat).with_context(|| format!("/proc/{pid}/stat: {stat:?}"))
}

/// `utime` (field 14) plus `stime` (field 15) of a `/proc/PID/stat` line. The command name (field
/// 2) may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, i.e. index 11 here.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// CPU used by a process over a wall-clock window.
#[derive(Clone, Copy, Debug)]
pub struct CpuWindow {
    pub cpu: Duration,
    pub wall: Duration,
}

impl CpuWindow {
    /// The share of one core used over the window, in percent.
    pub fn percent_of_core(&self) -> f64 {
        100.0 * self.cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9)
    }
}

/// A running CPU measurement of process `pid`, started by [`CpuMeter::start`].
#[derive(Clone, Copy, Debug)]
pub struct CpuMeter {
    pid: u32,
    ticks: u64,
    at: Instant,
    per_second: u64,
}

impl CpuMeter {
    pub fn start(pid: u32) -> Result<Self> {
        Ok(CpuMeter {
            pid,
            ticks: cpu_ticks(pid)?,
            at: Instant::now(),
            per_second: clock_ticks_per_second(),
        })
    }

    /// The CPU used since the start.
    pub fn read(&self) -> Result<CpuWindow> {
        let ticks = cpu_ticks(self.pid)?.saturating_sub(self.ticks);
        Ok(CpuWindow {
            cpu: Duration::from_secs_f64(ticks as f64 / self.per_second as f64),
            wall: self.at.elapsed(),
        })
    }
}

/// The `p` quantile (0..=1) of `values` by the nearest rank; NaN for no values.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
    sorted[index]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_counted_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (kuvryn (sync) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 9 0 12345 1000000 2000 18446744073709551615";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(parse_cpu_ticks("4242 (short) S 1"), None, "too few fields");
    }

    /// Spinning shows as CPU time: the meter reaches 100 ms of CPU within a deadline however
    /// busy the machine is (a shared core may give this thread only part of the wall time).
    #[test]
    fn this_process_uses_some_cpu_while_it_spins() {
        let meter = CpuMeter::start(std::process::id()).expect("own stat");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut x = 0u64;
        let window = loop {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            let window = meter.read().expect("own stat");
            if window.cpu >= Duration::from_millis(100) || Instant::now() > deadline {
                break window;
            }
        };
        assert!(window.cpu >= Duration::from_millis(100), "{window:?}");
        assert!(window.percent_of_core() > 0.0 && window.wall >= window.cpu / 2, "{window:?}");
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let values = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(percentile(&values, 0.5), 3.0);
        assert_eq!(percentile(&values, 0.99), 5.0);
        assert_eq!(percentile(&values, 0.0), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
