//! The performance suite's report generator (`scripts/lib/bench_report.py`, run by
//! `scripts/bench`): benchmark output in the shapes the benchmarks print (mixed with cargo's own
//! lines) becomes one JSON figure per line with name, value, unit and N, those lines pass the
//! suite's own check, and the HTML report and its SVG plots are written and well-formed. A line
//! that looks like JSON but is not, or a figure without a value, fails with the line named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

/// Benchmark output as `scripts/bench` collects it: cargo's lines, and one JSON object per
/// measurement in the shapes of tests/benches/*.rs.
const RAW: &str = r#"   Compiling kuvryn-sync-tests v0.1.0
     Running benches/scale.rs (target/release/deps/scale-0123)
{"bench":"scale_apps_ready","apps":100,"objects":400,"created_s":0.4,"applied_s":5.1,"ready_s":6.25,"floor_s":1.5,"ratio":4.17,"api_requests":3100,"api_requests_by_method":{"GET":1500},"floor_requests":400,"request_ratio":7.75,"peak_rss_mib":48.5,"rss_mib":40.1,"log_warnings":0,"goal_ready_s":60.0,"goal_rss_mib":100.0,"goal_ratio":1.5}
{"bench":"scale_push_to_apply","apps":100,"pushes":3,"apply_start_p50_ms":210.5,"apply_start_p99_ms":380.0,"applied_p50_ms":900.0,"applied_p99_ms":1200.0,"apply_start_ms":[210.5,150.0,380.0],"applied_ms":[900.0,800.0,1200.0]}
{"bench":"scale_monorepo_commit","apps":100,"touched":1,"commits":3,"engine_renders":1.0,"cache_hits":99.0,"api_requests":800.0,"api_requests_per_app":8.0,"all_taken_s":2.5,"per_commit":{},"goal_engine_renders":1}
{"bench":"scale_resync_unchanged","apps":100,"objects":400,"restart_s":3.0,"requested_s":2.0,"api_requests":700,"writes":0,"object_writes":0,"revision_writes":0,"status_changes":0,"write_requests":{},"repository_writes":1,"peak_rss_mib":45.0,"log_warnings":0}
{"bench":"scale_steady_cpu","apps":100,"resync_s":60.0,"startup_pass_s":4.0,"window_s":61.0,"cpu_s":1.2,"cpu_percent_of_core":1.97,"reconciles":100,"cpu_ms_per_reconcile":10.5,"api_requests_per_reconcile":7.0,"quiet_s":10.0,"quiet_cpu_percent":0.2,"quiet_reconciles":0,"default_resync_s":300,"percent_of_core_at_default_resync":0.55,"goal_percent":5.0}
{"bench":"scale_apps_ready","apps":1000,"objects":4000,"created_s":4.0,"applied_s":51.0,"ready_s":62.5,"floor_s":15.0,"ratio":4.17,"api_requests":31000,"api_requests_by_method":{},"floor_requests":4000,"request_ratio":7.75,"peak_rss_mib":98.5,"rss_mib":90.1,"log_warnings":0,"goal_ready_s":60.0,"goal_rss_mib":100.0,"goal_ratio":1.5}
{"bench":"scale_apps_ready","apps":1000,"objects":4000,"shards":3,"shard_mode":"automatic","phases":["ready"],"settle_s":8.1,"created_s":4.1,"applied_s":60.0,"ready_s":75.5,"floor_s":14.0,"ratio":5.39,"api_requests":33000,"api_requests_by_method":{},"api_requests_per_replica":{"scale-replica-0":11000,"scale-replica-1":10500,"scale-replica-2":11500},"server_requests_per_replica":{},"api_requests_by_resource":{},"floor_requests":4000,"request_ratio":8.25,"peak_rss_mib":240.0,"peak_rss_mib_per_replica":{"scale-replica-0":80.0,"scale-replica-1":75.0,"scale-replica-2":85.0},"rss_mib":200.0,"apps_per_replica":{"scale-replica-0":350,"scale-replica-1":300,"scale-replica-2":350},"apps_written_by_two":0,"log_warnings":0,"goal_ready_s":60.0,"goal_rss_mib":100.0,"goal_ratio":1.5}
{"bench":"scale_shard_takeover","apps":1000,"shards":3,"killed_share":350,"sample":100,"lease_takeover_s":14.2,"sample_ready_s":31.5,"goal_ready_s":60,"moved_outside_share":0,"requests_after_kill":0,"apps_with_overlapping_writers":0}
{"bench":"render","engine":"kustomize","rounds":20,"ours_ms":55.1,"direct_ms":52.0,"ratio":1.06,"goal_ratio":1.1,"cache_hit_ms":0.012}
{"bench":"render_hardening","engine":"kustomize","pairs":8,"after_ms":55.0}
{"bench":"webhook_admission","endpoint":"/healthz","rate_per_second":500,"requests":2500,"p50_ms":0.4,"p99_ms":1.1,"max_ms":3.0,"errors":0}
{"bench":"webhook_admission","endpoint":"/admit/applications","rate_per_second":500,"requests":2500,"p50_ms":0.6,"p99_ms":1.9,"max_ms":4.0,"errors":0}
{"bench":"webhook_admission","summary":true,"admission_p99_ms":1.9,"baseline_p99_ms":1.1,"p99_ratio_to_baseline":1.73,"goal_p99_ms":5.0,"goal_met":true,"errors":0}
test result: ok. 0 passed
"#;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/lib/bench_report.py")
}

fn report(args: &[&Path]) -> Result<Output> {
    let mut command = Command::new("python3");
    command.arg(script()).args(args);
    command.output().with_context(|| format!("run {command:?} (python3 is needed)"))
}

fn ok(output: &Output) -> Result<String> {
    ensure!(
        output.status.success(),
        "bench_report.py failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout.clone())?)
}

fn figure<'a>(figures: &'a [Value], name: &str, n: u64) -> Result<&'a Value> {
    figures
        .iter()
        .find(|f| f["name"] == name && f["N"] == n)
        .with_context(|| format!("no figure {name} at N = {n}"))
}

#[test]
fn benchmark_lines_become_figures_and_an_html_report_with_svg_plots() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let raw = dir.path().join("raw.log");
    std::fs::write(&raw, RAW)?;
    let text = ok(&report(&[Path::new("figures"), &raw])?)?;
    let figures: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).with_context(|| format!("not JSON: {line}")))
        .collect::<Result<_>>()?;
    for f in &figures {
        for key in ["name", "value", "unit", "N"] {
            ensure!(f.get(key).is_some_and(|v| !v.is_null()), "{key} missing in {f}");
        }
        ensure!(f["value"].is_number(), "value not a number in {f}");
    }
    // A run with three controllers: the same figures, tagged, and how even the split was.
    let sharded = |name: &str| {
        figures
            .iter()
            .find(|f| f["name"] == name && f["N"] == 1000 && f["shards"] == 3)
            .with_context(|| format!("no three-shard figure {name}"))
    };
    assert_eq!(sharded("time_to_all_ready")?["value"], 75.5);
    assert_eq!(sharded("time_to_all_ready")?["shard_mode"], "automatic");
    assert_eq!(sharded("api_requests_per_application")?["value"], 33.0);
    assert_eq!(sharded("peak_rss")?["value"], 240.0, "summed over the replicas");
    assert_eq!(sharded("peak_rss_largest_replica")?["value"], 85.0);
    // 1000 / 3 = 333.3 per replica; 300 is 10.0% below.
    assert_eq!(sharded("shard_split_deviation")?["value"], 10.0);
    // A replica killed: its Lease taken over, a sample of its share Ready again, one writer.
    assert_eq!(sharded("shard_takeover_lease")?["value"], 14.2);
    assert_eq!(sharded("shard_takeover_sample_ready")?["goal"], 60);
    assert_eq!(sharded("shard_takeover_overlapping_writers")?["value"], 0);
    let one = |name: &str| figures.iter().find(|f| f["name"] == name && f["N"] == 1000);
    let one_ready = one("time_to_all_ready").context("the one-controller run")?;
    ensure!(
        one_ready.get("shards").is_none(),
        "the one-controller figure comes first: {one_ready}"
    );
    let ready = figure(&figures, "time_to_all_ready", 100)?;
    assert_eq!((ready["value"].as_f64(), ready["unit"].as_str()), (Some(6.25), Some("s")));
    assert_eq!(ready["baseline"].as_f64(), Some(1.5), "the floor of the same run");
    assert_eq!(figure(&figures, "api_requests_per_application", 1000)?["value"], 31.0);
    assert_eq!(figure(&figures, "push_to_apply_start_p99", 100)?["value"], 380.0);
    assert_eq!(figure(&figures, "monorepo_commit_engine_renders", 100)?["baseline"], 100);
    assert_eq!(figure(&figures, "steady_cpu_at_default_resync", 100)?["goal"], 5.0);
    assert_eq!(figure(&figures, "render_kustomize", 20)?["baseline"], 52.0);
    let admission = figure(&figures, "webhook_admission_p99", 5000)?;
    assert_eq!(admission["baseline"], 1.1, "{admission}");
    ensure!(!text.contains("render_hardening"), "a bench the report does not plot is left out");

    let results = dir.path().join("results.jsonl");
    std::fs::write(&results, &text)?;
    let checked = ok(&report(&[Path::new("check"), &results])?)?;
    assert_eq!(checked.trim(), format!("{} figures parse", figures.len()));
    let out = dir.path().join("report");
    ok(&report(&[Path::new("html"), &results, &out])?)?;
    let page = std::fs::read_to_string(out.join("report.html"))?;
    for plot in [
        "time-to-ready",
        "requests",
        "peak-rss",
        "shards-ready",
        "shards-requests",
        "shards-rss",
        "push-latency",
        "monorepo",
        "steady-cpu",
        "render",
        "webhook",
    ] {
        let svg = std::fs::read_to_string(out.join(format!("{plot}.svg")))
            .with_context(|| format!("{plot}.svg"))?;
        ensure!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{plot}.svg");
        ensure!(page.contains(&format!("<figure id=\"{plot}\"><svg")), "{plot} inline");
    }
    let ready_svg = std::fs::read_to_string(out.join("time-to-ready.svg"))?;
    for shown in ["N = 100", "N = 1,000", "6.25", "raw server-side apply (floor)"] {
        ensure!(ready_svg.contains(shown), "time-to-ready.svg lacks {shown:?}");
    }
    // The one-controller plot leaves the sharded run out; the shards plot shows both.
    ensure!(ready_svg.contains("62.5") && !ready_svg.contains("75.5"), "{ready_svg}");
    let shards_svg = std::fs::read_to_string(out.join("shards-ready.svg"))?;
    for shown in ["1 controller", "3 shards, automatic", "62.5", "75.5"] {
        ensure!(shards_svg.contains(shown), "shards-ready.svg lacks {shown:?}");
    }
    ensure!(page.contains("One controller or shards, every run"), "the runs table");
    let table = ok(&report(&[Path::new("shards"), &results])?)?;
    ensure!(
        table.contains("| 1,000 | 3 shards, automatic | 75.5 | 33 | 240 | 85 | 350 / 300 / 350 |"),
        "{table}"
    );
    ensure!(table.contains("| 1,000 | 1 controller | 62.5 | 31 | 98.5 | 98.5 |  |"), "{table}");
    Ok(())
}

#[test]
fn a_broken_line_or_a_figure_without_a_value_is_refused_with_its_line() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let raw = dir.path().join("raw.log");
    std::fs::write(&raw, "noise\n{\"bench\": \"scale_apps_ready\", \"apps\": \n")?;
    let broken = report(&[Path::new("figures"), &raw])?;
    assert!(!broken.status.success());
    let said = String::from_utf8_lossy(&broken.stderr);
    assert!(said.contains("raw.log:2: not a JSON object"), "{said}");

    let results = dir.path().join("results.jsonl");
    std::fs::write(&results, "{\"name\": \"peak_rss\", \"unit\": \"MiB\", \"N\": 100}\n")?;
    let missing = report(&[Path::new("check"), &results])?;
    assert!(!missing.status.success());
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(said.contains("results.jsonl:1: lacks ['value']"), "{said}");
    Ok(())
}
