#!/usr/bin/env python3
"""The performance suite's figures and report (scripts/bench).

  bench_report.py figures RAW...      benchmark output -> one JSON line per figure (stdout)
  bench_report.py check FIGURES       every line parses and has name, value, unit, N
  bench_report.py html FIGURES OUTDIR OUTDIR/report.html with inline SVG plots, and each plot
                                      as OUTDIR/<plot>.svg (what docs/performance.md embeds)
  bench_report.py markdown FIGURES    every figure as a Markdown table (for docs/performance.md)
  bench_report.py shards FIGURES      every all-Ready run, one controller beside shards, as a
                                      Markdown table

A `scale_apps_ready` line with `"shards": N` above 1 (several controllers) gives the same figures
tagged with `shards` and `shard_mode`, plus the largest replica's peak RSS and how far the split
was from even; the one-controller plots leave them out, and the `shards-*` plots show them beside
the one-controller runs of the same N (the median of each configuration's runs).

The benchmarks (tests/benches/*.rs) print one JSON object per measurement, keyed by "bench";
`figures` turns each into figures of one shape:

  {"name": ..., "value": ..., "unit": ..., "N": ..., "baseline": ..., "baseline_name": ...,
   "goal": ..., "bench": ..., "detail": ...}

name, value, unit and N are always there (N: the Applications for the scale figures, else the
samples behind the value); baseline (with what it is) and goal only where the benchmark measured
or states one. Lines that are not JSON objects (cargo's own output) are skipped; a line that
starts like one but does not parse is an error naming its file and line.

Python's standard library only, no third-party package: python3 is on every machine this project
runs on (scripts/lib/oci_image.py already needs it), and the plots are a few rectangles and lines
of SVG, which string formatting writes plainly; a Rust binary would add a crate and a build for
the same output.
"""

import html
import json
import math
import os
import sys
import xml.etree.ElementTree as ET

REQUIRED = ("name", "value", "unit", "N")


def fig(name, value, unit, n, bench, baseline=None, baseline_name=None, goal=None, detail=None):
    line = {"name": name, "value": value, "unit": unit, "N": n, "bench": bench}
    if baseline is not None:
        line["baseline"] = baseline
        line["baseline_name"] = baseline_name
    if goal is not None:
        line["goal"] = goal
    if detail:
        line["detail"] = detail
    return line


def scale_ready(r):
    n, b = r["apps"], r["bench"]
    shards = r.get("shards", 1)
    if shards > 1:
        return scale_ready_sharded(r)
    return [
        fig("time_to_all_ready", r["ready_s"], "s", n, b, r["floor_s"],
            "raw server-side apply of the same objects (same run)", r.get("goal_ready_s")),
        fig("api_requests_first_sync", r["api_requests"], "requests", n, b,
            r["floor_requests"], "one apply per object"),
        fig("api_requests_per_application", round(r["api_requests"] / n, 2), "requests", n, b,
            round(r["floor_requests"] / n, 2), "one apply per object"),
        fig("peak_rss", r["peak_rss_mib"], "MiB", n, b, goal=r.get("goal_rss_mib")),
    ]


def scale_ready_sharded(r):
    """The all-Ready phase with several controllers: the same figures, tagged with `shards` and
    `shard_mode` (so that the one-controller plots leave them out), and how even the split was."""
    n, b, shards = r["apps"], r["bench"], r["shards"]
    split = r["apps_per_replica"]
    even = n / shards
    deviation = max(abs(count - even) for count in split.values()) / even * 100
    detail = {"apps_per_replica": split, "peak_rss_mib_per_replica": r["peak_rss_mib_per_replica"],
              "api_requests_per_replica": r["api_requests_per_replica"],
              "apps_written_by_two": r["apps_written_by_two"], "settle_s": r["settle_s"]}
    lines = [
        fig("time_to_all_ready", r["ready_s"], "s", n, b, r["floor_s"],
            "raw server-side apply of the same objects (same run)", detail=detail),
        fig("api_requests_first_sync", r["api_requests"], "requests", n, b,
            r["floor_requests"], "one apply per object", detail=detail),
        fig("api_requests_per_application", round(r["api_requests"] / n, 2), "requests", n, b,
            round(r["floor_requests"] / n, 2), "one apply per object", detail=detail),
        fig("peak_rss", r["peak_rss_mib"], "MiB", n, b, detail=detail),
        fig("peak_rss_largest_replica", max(r["peak_rss_mib_per_replica"].values()), "MiB", n, b,
            detail=detail),
        fig("shard_split_deviation", round(deviation, 1), "% from even", n, b, goal=10,
            detail=detail),
    ]
    for line in lines:
        line["shards"] = shards
        line["shard_mode"] = r["shard_mode"]
    return lines


def scale_resync(r):
    n, b = r["apps"], r["bench"]
    return [
        fig("resync_after_restart", r["restart_s"], "s", n, b),
        fig("resync_unchanged_writes", r["writes"], "writes", n, b, goal=0),
    ]


def scale_push(r):
    n, b = r["apps"], r["bench"]
    detail = {"pushes": r["pushes"]}
    return [
        fig("push_to_apply_start_p50", r["apply_start_p50_ms"], "ms", n, b, detail=detail),
        fig("push_to_apply_start_p99", r["apply_start_p99_ms"], "ms", n, b, detail=detail),
        fig("push_to_applied_p50", r["applied_p50_ms"], "ms", n, b, detail=detail),
        fig("push_to_applied_p99", r["applied_p99_ms"], "ms", n, b, detail=detail),
    ]


def scale_monorepo(r):
    n, b = r["apps"], r["bench"]
    detail = {"commits": r["commits"], "touched": r["touched"]}
    return [
        fig("monorepo_commit_engine_renders", r["engine_renders"], "renders", n, b, n,
            "every Application rendered", r.get("goal_engine_renders"), detail),
        fig("monorepo_commit_cache_hits", r["cache_hits"], "renders", n, b, detail=detail),
        fig("monorepo_commit_all_taken", r["all_taken_s"], "s", n, b, detail=detail),
        fig("monorepo_commit_requests_per_application", round(r["api_requests_per_app"], 2),
            "requests", n, b, detail=detail),
    ]


def scale_steady(r):
    n, b = r["apps"], r["bench"]
    detail = {"resync_s": r["resync_s"], "window_s": r["window_s"],
              "reconciles": r["reconciles"], "quiet_reconciles": r["quiet_reconciles"]}
    return [
        fig("steady_cpu_at_default_resync", r["percent_of_core_at_default_resync"], "% of a core",
            n, b, goal=r["goal_percent"], detail=detail),
        fig("steady_cpu_resync_window", r["cpu_percent_of_core"], "% of a core", n, b,
            detail=detail),
        fig("steady_cpu_quiet", r["quiet_cpu_percent"], "% of a core", n, b, detail=detail),
        fig("steady_cpu_per_reconcile", r["cpu_ms_per_reconcile"], "ms", n, b, detail=detail),
        fig("steady_requests_per_reconcile", r["api_requests_per_reconcile"], "requests", n, b,
            detail=detail),
    ]


def scale_takeover(r):
    """A replica killed after all were Ready: how long until a survivor held its shard Lease,
    and until a sample of its share, changed by a new commit, was Ready (goal: a minute)."""
    n, b = r["apps"], r["bench"]
    detail = {"shards": r["shards"], "killed_share": r["killed_share"], "sample": r["sample"],
              "moved_outside_share": r["moved_outside_share"],
              "requests_after_kill": r["requests_after_kill"],
              "apps_with_overlapping_writers": r["apps_with_overlapping_writers"]}
    lines = [
        fig("shard_takeover_lease", r["lease_takeover_s"], "s", n, b, detail=detail),
        fig("shard_takeover_sample_ready", r["sample_ready_s"], "s", n, b,
            goal=r["goal_ready_s"], detail=detail),
        fig("shard_takeover_overlapping_writers", r["apps_with_overlapping_writers"],
            "Applications", n, b, goal=0, detail=detail),
    ]
    for line in lines:
        line["shards"] = r["shards"]
    return lines


def render(r):
    engine = r["engine"]
    return [
        fig(f"render_{engine}", r["ours_ms"], "ms", r["rounds"], r["bench"], r["direct_ms"],
            f"{engine} engine run directly", round(r["direct_ms"] * r["goal_ratio"], 2)),
        fig(f"render_{engine}_cache_hit", r["cache_hit_ms"], "ms", r["rounds"], r["bench"]),
    ]


def webhook(r):
    if r.get("summary"):
        return [fig("webhook_admission_p99", r["admission_p99_ms"], "ms", None, r["bench"],
                    r["baseline_p99_ms"], "/healthz on the same server and load",
                    r["goal_p99_ms"], {"errors": r["errors"]})]
    endpoint = r["endpoint"].split()[0].strip("/").replace("/", "_")
    detail = {"rate_per_second": r["rate_per_second"], "errors": r["errors"]}
    return [
        fig(f"webhook_{endpoint}_p50", r["p50_ms"], "ms", r["requests"], r["bench"],
            detail=detail),
        fig(f"webhook_{endpoint}_p99", r["p99_ms"], "ms", r["requests"], r["bench"],
            detail=detail),
    ]


def apply_engine(r):
    return [fig("apply_engine_plan_and_apply", r["engine_ms"], "ms", r["objects"], r["bench"],
                r["raw_apply_ms"], "raw server-side apply of the same objects",
                round(r["raw_apply_ms"] * r["goal_ratio"], 2))]


CONVERTERS = {
    "scale_apps_ready": scale_ready,
    "scale_resync_unchanged": scale_resync,
    "scale_push_to_apply": scale_push,
    "scale_monorepo_commit": scale_monorepo,
    "scale_steady_cpu": scale_steady,
    "scale_shard_takeover": scale_takeover,
    "render": render,
    "webhook_admission": webhook,
    "apply_engine_plan_and_apply": apply_engine,
}

def figures(paths):
    out = []
    for path in paths:
        requests = 0
        with open(path, encoding="utf-8") as f:
            for number, text in enumerate(f, 1):
                text = text.strip()
                if not text.startswith("{"):
                    continue
                try:
                    raw = json.loads(text)
                except json.JSONDecodeError as err:
                    raise SystemExit(f"{path}:{number}: not a JSON object ({err}); "
                                     "a benchmark line must be one JSON object per line")
                convert = CONVERTERS.get(raw.get("bench"))
                if convert is None:
                    continue
                try:
                    lines = convert(raw)
                except KeyError as err:
                    raise SystemExit(f"{path}:{number}: bench {raw.get('bench')!r} lacks field "
                                     f"{err}; update scripts/lib/bench_report.py with the bench")
                for line in lines:
                    if line["bench"] == "webhook_admission":
                        if line["N"] is None:
                            line["N"] = requests
                        elif line["name"].endswith("_p99"):
                            requests += line["N"]
                out.extend(lines)
    return out


def check(path):
    """Every line of a figures file parses and has the required fields; returns the figures."""
    result = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except json.JSONDecodeError as err:
                raise SystemExit(f"{path}:{number}: not JSON ({err})")
            missing = [k for k in REQUIRED if k not in line]
            if not isinstance(line, dict) or missing:
                raise SystemExit(f"{path}:{number}: lacks {missing}; every figure has "
                                 f"{', '.join(REQUIRED)}")
            if not isinstance(line["value"], (int, float)) or isinstance(line["value"], bool):
                raise SystemExit(f"{path}:{number}: value must be a number, is "
                                 f"{line['value']!r}")
            result.append(line)
    if not result:
        raise SystemExit(f"{path}: no figures")
    return result


# --- plots -------------------------------------------------------------------------------------

COLOURS = ["#2563eb", "#9ca3af", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6"]
WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 60


def nice_max(value):
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        top = step * 10 ** exponent
        if top >= value:
            return top
    return 10 ** (exponent + 1)


def fmt(value):
    if value is None:
        return "–"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def bar_chart(title, unit, categories, series, goal=None, goal_label="goal"):
    """A grouped bar chart: `series` is [(name, [value or None per category])]."""
    values = [v for _, vs in series for v in vs if v is not None]
    top = nice_max(max(values + ([goal] if goal is not None else []) + [0]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    y = lambda v: TOP + plot_h - plot_h * v / top  # noqa: E731
    e = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{e(title)}" '
             'font-family="sans-serif" font-size="12">',
             f'<title>{e(title)}</title>',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
             f'<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{e(title)}</text>']
    for i in range(5):
        v = top * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                     'stroke="#e5e7eb"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    parts.append(f'<text x="14" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {TOP + plot_h / 2:.0f})">{e(unit)}</text>')
    group_w = plot_w / max(len(categories), 1)
    bar_w = min(48.0, group_w * 0.8 / max(len(series), 1))
    for c, category in enumerate(categories):
        x0 = LEFT + c * group_w + (group_w - bar_w * len(series)) / 2
        for s, (name, vs) in enumerate(series):
            v = vs[c]
            if v is None:
                continue
            x = x0 + s * bar_w
            parts.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bar_w - 2:.1f}" '
                         f'height="{TOP + plot_h - y(v):.1f}" fill="{COLOURS[s % len(COLOURS)]}">'
                         f'<title>{e(name)} {e(str(category))}: {fmt(v)} {e(unit)}</title></rect>')
            parts.append(f'<text x="{x + bar_w / 2 - 1:.1f}" y="{y(v) - 4:.1f}" '
                         f'text-anchor="middle" font-size="11">{fmt(v)}</text>')
        parts.append(f'<text x="{LEFT + (c + 0.5) * group_w:.1f}" y="{TOP + plot_h + 18}" '
                     f'text-anchor="middle">{e(str(category))}</text>')
    if goal is not None:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(goal):.1f}" '
                     f'y2="{y(goal):.1f}" stroke="#dc2626" stroke-dasharray="6 4"/>')
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{y(goal) - 5:.1f}" text-anchor="end" '
                     f'fill="#dc2626">{e(goal_label)} {fmt(goal)}</text>')
    lx = LEFT
    for s, (name, _) in enumerate(series):
        parts.append(f'<rect x="{lx}" y="{HEIGHT - 22}" width="12" height="12" '
                     f'fill="{COLOURS[s % len(COLOURS)]}"/>')
        parts.append(f'<text x="{lx + 16}" y="{HEIGHT - 12}">{e(name)}</text>')
        lx += 24 + 7 * len(name)
    parts.append("</svg>")
    svg = "\n".join(parts)
    ET.fromstring(svg)  # well-formed, or fail here rather than in a browser
    return svg


def by_name(figs, name):
    """The one-controller figures called `name`, by N (sharded runs have plots of their own)."""
    return {f["N"]: f for f in figs if f["name"] == name and f.get("shards", 1) == 1}


def label(f):
    """A figure's name, with its controllers when there were several."""
    return f["name"] if f.get("shards", 1) == 1 else f"{f['name']} ({shard_config(f)})"


def shard_config(f):
    shards = f.get("shards", 1)
    if shards == 1:
        return "1 controller"
    return f"{shards} shards, {f.get('shard_mode', 'automatic')}"


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def shard_plot(figs, title, name, unit):
    """One controller beside several, per N: the median of the runs of each configuration (the
    table beside it lists every run)."""
    rows = [f for f in figs if f["name"] == name]
    if not any(f.get("shards", 1) > 1 for f in rows):
        return None
    sizes = sorted({f["N"] for f in rows})
    configs = sorted({shard_config(f) for f in rows}, key=lambda c: (c != "1 controller", c))
    series = []
    for config in configs:
        values = []
        for n in sizes:
            runs = [f["value"] for f in rows if f["N"] == n and shard_config(f) == config]
            values.append(round(median(runs), 2) if runs else None)
        series.append((config, values))
    runs = max(sum(1 for f in rows if f["N"] == n and shard_config(f) == c)
               for n in sizes for c in configs)
    if runs > 1:
        title += f" (median of up to {runs} runs)"
    return bar_chart(title, unit, [f"N = {n:,}" for n in sizes], series)


SHARD_COLUMNS = [("time_to_all_ready", "time to all Ready (s)"),
                 ("api_requests_per_application", "requests per Application"),
                 ("peak_rss", "peak RSS, sum (MiB)"),
                 ("peak_rss_largest_replica", "largest replica (MiB)")]


def shard_runs(figs):
    """Every all-Ready run, in the order run: (N, configuration, {figure name: value}, split)."""
    runs = []
    for f in figs:
        if f["name"] == "time_to_all_ready":
            runs.append((f["N"], shard_config(f), {}, (f.get("detail") or {}).get(
                "apps_per_replica")))
        if runs and f["name"] in dict(SHARD_COLUMNS) and f["N"] == runs[-1][0] \
                and shard_config(f) == runs[-1][1]:
            runs[-1][2][f["name"]] = f["value"]
    if not any(config != "1 controller" for _, config, _, _ in runs):
        return []
    for _, config, values, _ in runs:
        if config == "1 controller" and "peak_rss" in values:
            values["peak_rss_largest_replica"] = values["peak_rss"]
    return runs


def shard_table(figs):
    """One controller or several: every run as a Markdown table (empty when no sharded run)."""
    runs = shard_runs(figs)
    if not runs:
        return ""
    lines = ["| N | controllers | " + " | ".join(label for _, label in SHARD_COLUMNS)
             + " | Applications per replica |",
             "|---:|---|" + "---:|" * len(SHARD_COLUMNS) + "---|"]
    for n, config, values, split in runs:
        cells = " | ".join(fmt(values.get(name)) for name, _ in SHARD_COLUMNS)
        shares = " / ".join(str(v) for v in split.values()) if split else ""
        lines.append(f"| {n:,} | {config} | {cells} | {shares} |")
    return "\n".join(lines)


def scale_plot(figs, title, name, unit, with_baseline=None, goal=None):
    rows = by_name(figs, name)
    if not rows:
        return None
    sizes = sorted(rows)
    series = [("Kuvryn Sync", [rows[n]["value"] for n in sizes])]
    if with_baseline:
        series.append((with_baseline, [rows[n].get("baseline") for n in sizes]))
    return bar_chart(title, unit, [f"N = {n:,}" for n in sizes], series, goal)


def pair_plot(figs, title, unit, names, labels, sizes_from):
    rows = [by_name(figs, n) for n in names]
    sizes = sorted(by_name(figs, sizes_from))
    if not sizes:
        return None
    series = [(label, [r.get(n, {}).get("value") for n in sizes]) for label, r in zip(labels, rows)]
    return bar_chart(title, unit, [f"N = {n:,}" for n in sizes], series)


def named_plot(figs, title, unit, prefix, baseline_label):
    rows = [f for f in figs if f["name"].startswith(prefix)]
    if not rows:
        return None
    cats = [f["name"][len(prefix):] for f in rows]
    series = [("Kuvryn Sync", [f["value"] for f in rows])]
    if any("baseline" in f for f in rows):
        series.append((baseline_label, [f.get("baseline") for f in rows]))
    return bar_chart(title, unit, cats, series)


def plots(figs):
    steady_goal = next((f.get("goal") for f in figs if f["name"] == "steady_cpu_at_default_resync"),
                       None)
    admission = [f for f in figs if f["name"] == "webhook_admission_p99"]
    endpoints = [f for f in figs if f["name"].startswith("webhook_") and f["name"].endswith("_p99")
                 and f["name"] != "webhook_admission_p99"]
    return [
        ("time-to-ready", scale_plot(figs, "Time to all Ready", "time_to_all_ready", "seconds",
                                     "raw server-side apply (floor)")),
        ("requests", scale_plot(figs, "API requests per Application, first sync",
                                "api_requests_per_application", "requests",
                                "floor: one apply per object")),
        ("peak-rss", scale_plot(figs, "Controller peak RSS", "peak_rss", "MiB")),
        ("shards-ready", shard_plot(figs, "One controller or shards: time to all Ready",
                                    "time_to_all_ready", "seconds")),
        ("shards-requests", shard_plot(figs, "One controller or shards: requests per Application",
                                       "api_requests_per_application", "requests")),
        ("shards-rss", shard_plot(figs, "One controller or shards: peak RSS, all replicas",
                                  "peak_rss", "MiB")),
        ("push-latency", pair_plot(figs, "Push → apply start, through the receiver", "ms",
                                   ["push_to_apply_start_p50", "push_to_apply_start_p99",
                                    "push_to_applied_p99"],
                                   ["apply start p50", "apply start p99", "applied p99"],
                                   "push_to_apply_start_p50")),
        ("monorepo", pair_plot(figs, "A commit touching 1 Application: renders", "renders",
                               ["monorepo_commit_engine_renders", "monorepo_commit_cache_hits"],
                               ["engine renders", "cache hits"],
                               "monorepo_commit_engine_renders")),
        ("steady-cpu", scale_plot(figs, "Steady-state controller CPU at the default 5 m resync",
                                  "steady_cpu_at_default_resync", "% of one core",
                                  goal=steady_goal)),
        ("render", named_plot(render_only(figs), "Render: ours vs the engine run directly "
                              "(median)", "ms", "render_", "engine directly")),
        ("webhook", bar_chart("Webhook p99 at 500 requests/s", "ms",
                              [f["name"][len("webhook_"):-len("_p99")] for f in endpoints],
                              [("p99", [f["value"] for f in endpoints])],
                              admission[0].get("goal") if admission else None, "admission goal")
         if endpoints else None),
    ]


def render_only(figs):
    return [f for f in figs if not (f["name"].startswith("render_")
                                    and f["name"].endswith("_cache_hit"))]


def write_html(figs, outdir):
    os.makedirs(outdir, exist_ok=True)
    made = []
    for slug, svg in plots(figs):
        if svg is None:
            continue
        with open(os.path.join(outdir, f"{slug}.svg"), "w", encoding="utf-8") as f:
            f.write(svg + "\n")
        made.append((slug, svg))
    e = html.escape
    rows = "\n".join(
        f"<tr><td>{e(label(f))}</td><td>{e(str(f['N']))}</td><td class=n>{fmt(f['value'])}</td>"
        f"<td>{e(f['unit'])}</td><td class=n>{fmt(f.get('baseline'))}</td>"
        f"<td>{e(f.get('baseline_name') or '')}</td><td class=n>{fmt(f.get('goal'))}</td></tr>"
        for f in figs)
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Kuvryn Sync performance</title>
<style>body{{font-family:sans-serif;max-width:1320px;margin:2em auto;color:#111}}
.plots{{display:flex;flex-wrap:wrap;gap:16px}} figure{{margin:0;border:1px solid #e5e7eb}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border-bottom:1px solid #e5e7eb;
padding:3px 8px;text-align:left}} td.n{{text-align:right;font-variant-numeric:tabular-nums}}
</style></head><body>
<h1>Kuvryn Sync performance</h1>
<p>{len(figs)} figures from <code>scripts/bench</code>. Bars show our figure beside the floor or
engine measured in the same run; a dashed line marks a goal.</p>
<div class="plots">
{"".join(f'<figure id="{slug}">{svg}</figure>' for slug, svg in made)}
</div>
{shard_html(figs)}
<h2>Every figure</h2>
<table><tr><th>name</th><th>N</th><th>value</th><th>unit</th><th>baseline</th>
<th>baseline is</th><th>goal</th></tr>
{rows}
</table></body></html>
"""
    with open(os.path.join(outdir, "report.html"), "w", encoding="utf-8") as f:
        f.write(page)
    return [slug for slug, _ in made]


def shard_html(figs):
    runs = shard_runs(figs)
    if not runs:
        return ""
    e = html.escape
    head = "".join(f"<th>{e(label)}</th>" for _, label in SHARD_COLUMNS)
    rows = "\n".join(
        f"<tr><td class=n>{n:,}</td><td>{e(config)}</td>"
        + "".join(f"<td class=n>{fmt(values.get(name))}</td>" for name, _ in SHARD_COLUMNS)
        + f"<td>{e(' / '.join(str(v) for v in split.values()) if split else '')}</td></tr>"
        for n, config, values, split in runs)
    return (f"<h2>One controller or shards, every run</h2>\n<table><tr><th>N</th>"
            f"<th>controllers</th>{head}<th>Applications per replica</th></tr>\n{rows}\n"
            "</table>")


def markdown(figs):
    lines = ["| figure | N | value | unit | baseline | baseline is | goal |",
             "|---|---:|---:|---|---:|---|---:|"]
    for f in figs:
        lines.append(f"| {label(f)} | {f['N']} | {fmt(f['value'])} | {f['unit']} | "
                     f"{fmt(f.get('baseline')) if 'baseline' in f else ''} | "
                     f"{f.get('baseline_name') or ''} | "
                     f"{fmt(f.get('goal')) if 'goal' in f else ''} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) >= 2 and argv[0] == "figures":
        for line in figures(argv[1:]):
            print(json.dumps(line, sort_keys=True))
        return 0
    if len(argv) == 2 and argv[0] == "check":
        print(f"{len(check(argv[1]))} figures parse")
        return 0
    if len(argv) == 3 and argv[0] == "html":
        made = write_html(check(argv[1]), argv[2])
        print(f"{argv[2]}/report.html with {len(made)} plots: {', '.join(made)}")
        return 0
    if len(argv) == 2 and argv[0] == "markdown":
        print(markdown(check(argv[1])))
        return 0
    if len(argv) == 2 and argv[0] == "shards":
        print(shard_table(check(argv[1])) or "no run with several controllers")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
