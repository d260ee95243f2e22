//! `dtxn sweep`: `dtxn bench` over a grid of options (`--vary coroutines=1,2,4,8 --vary
//! protocol=ford`), one CSV of every point, and plots (PNG and SVG): committed/s against the
//! first varied option, latency against throughput (the papers' curves), abort rate.

use crate::bench::args::{config_argv, parse_bench, BenchArgs};
use crate::bench::report::{csv_header, BenchReport};
use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Clone, clap::Args)]
pub struct SweepArgs {
    /// An option and the values it takes, e.g. `coroutines=1,2,4,8`, or a protocol switch,
    /// e.g. `rcc.hybrid=0,28,511` (repeatable: the grid is every combination; the first one
    /// is the plots' x axis).
    #[arg(long = "vary", value_name = "OPTION=V1,V2,...", required = true)]
    pub vary: Vec<String>,
    /// Directory for sweep.csv, sweep.png and sweep.svg.
    #[arg(long, default_value = "sweep")]
    pub out: PathBuf,
    /// Every `dtxn bench` option: what stays fixed.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// One point of the grid: the varied options' values, and what bench measured.
struct Point {
    values: Vec<(String, String)>,
    report: BenchReport,
}

/// `--vary` as (option, values), checked against bench's options.
fn axes(vary: &[String]) -> Result<Vec<(String, Vec<String>)>> {
    let cmd = crate::bench::args::bench_command();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for v in vary {
        let (k, vals) = v
            .split_once('=')
            .ok_or_else(|| anyhow!("--vary '{v}': expected OPTION=V1,V2,..."))?;
        let k = k.trim();
        // A protocol switch (`--set KEY=VALUE`), e.g. `rcc.hybrid`, or a bench option.
        let switch = k.contains('.');
        let key = if switch {
            k.to_string()
        } else {
            k.trim_start_matches("--").replace('_', "-")
        };
        let known = if switch {
            crate::bench::args::switches().contains(&key)
        } else {
            cmd.get_arguments()
                .any(|a| a.get_long() == Some(key.as_str()))
        };
        if !known || ["config", "json", "csv", "record", "tally-out"].contains(&key.as_str()) {
            bail!("--vary '{k}': not a bench option that can vary (see dtxn bench --help)");
        }
        if out.iter().any(|(o, _)| *o == key) {
            bail!("--vary '{key}' is given twice");
        }
        let vals: Vec<String> = vals
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if vals.is_empty() {
            bail!("--vary '{key}': no values");
        }
        // Every value parsed as bench would, before the first point runs (a switch's values
        // are checked with each point's protocol configuration, below).
        for x in vals.iter().filter(|_| !switch) {
            if !takes_value(&key) {
                if x != "true" && x != "false" {
                    bail!("--vary {v}: --{key} is a switch: its values are true and false");
                }
                continue;
            }
            let argv = ["bench".to_string(), format!("--{key}"), x.clone()];
            if let Err(e) = cmd.clone().try_get_matches_from(argv) {
                bail!("--vary {v}: {}", crate::one_line(&e));
            }
        }
        out.push((key, vals));
    }
    Ok(out)
}

/// The command line after `sweep`, without the sweep's own options.
fn base_argv() -> Vec<OsString> {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let at = argv
        .iter()
        .position(|x| x == "sweep")
        .map_or(argv.len(), |i| i + 1);
    let mut out = Vec::new();
    let mut skip = false;
    for a in &argv[at..] {
        if skip {
            skip = false;
            continue;
        }
        let s = a.to_string_lossy();
        let own = ["--vary", "--out", "--csv", "--record"];
        if own.contains(&s.as_ref()) {
            skip = true;
            continue;
        }
        if own.iter().any(|o| s.starts_with(&format!("{o}="))) || s == "--json" {
            continue;
        }
        out.push(a.clone());
    }
    out
}

pub fn run(a: SweepArgs) -> Result<ExitCode> {
    if a.bench.tally_out.is_some() {
        bail!("--tally-out is an option of a single dtxn bench run, not of a sweep");
    }
    let single = [
        ("--csv", a.bench.csv.is_some()),
        ("--record", a.bench.record.is_some()),
        ("--json", a.bench.json),
    ];
    if let Some((flag, _)) = single.iter().find(|(_, given)| *given) {
        bail!(
            "{flag} is an option of a single dtxn bench run, not of a sweep (it writes \
             sweep.csv, sweep.png and sweep.svg in --out)"
        );
    }
    let axes = axes(&a.vary)?;
    let mut grid: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, vals) in &axes {
        grid = grid
            .into_iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut p = p.clone();
                    p.push((k.clone(), v.clone()));
                    p
                })
            })
            .collect();
    }
    let config = match &a.bench.config {
        Some(p) => config_argv(p)?,
        None => Vec::new(),
    };
    let base = base_argv();
    crate::backend::check_new_dir("--out", &a.out)?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create {}", a.out.display()))?;
    for f in ["sweep.csv", "sweep.png", "sweep.svg"] {
        crate::bench::check_writable("--out", &a.out.join(f))?;
    }
    // Every point's options are checked before the first one runs.
    let mut parsed = Vec::with_capacity(grid.len());
    for p in &grid {
        let mut argv: Vec<OsString> = vec!["bench".into()];
        argv.extend(config.iter().map(OsString::from));
        argv.extend(base.iter().cloned());
        for (k, v) in p {
            if k.contains('.') {
                argv.push("--set".into());
                argv.push(format!("{k}={v}").into());
                continue;
            }
            let flag = format!("--{k}");
            match v.as_str() {
                "true" if !takes_value(k) => argv.push(flag.into()),
                "false" if !takes_value(k) => {}
                _ => {
                    argv.push(flag.into());
                    argv.push(v.into());
                }
            }
        }
        let b = parse_bench(argv).with_context(|| describe(p))?;
        b.txn_config().with_context(|| describe(p))?;
        parsed.push(b);
    }
    let mut points = Vec::with_capacity(grid.len());
    let bar = crate::progress::bar(!a.bench.quiet, grid.len() as u64);
    for (i, (values, b)) in grid.into_iter().zip(parsed).enumerate() {
        let label = describe(&values);
        bar.set_message(label.clone());
        let report = crate::bench::run(&b, false).with_context(|| label.clone())?;
        bar.inc(1);
        if !a.bench.quiet {
            bar.suspend(|| {
                eprintln!(
                    "[{}/{}] {label}: {} committed/s, abort rate {:.2}%, p50 {:.1} us ({} time)",
                    i + 1,
                    points.capacity(),
                    crate::bench::report::thousands(report.all.committed_per_s),
                    100.0 * report.all.abort_rate,
                    report.all.latency_us.p50,
                    report.time
                )
            });
        }
        points.push(Point { values, report });
    }
    bar.finish_and_clear();
    let csv = a.out.join("sweep.csv");
    // Varied options come first, as `vary_<option>` columns.
    let columns = |v: &[(String, String)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, x)| (format!("vary_{}", k.replace('-', "_")), x.clone()))
            .collect()
    };
    let mut text = String::new();
    text.push_str(&csv_header(&columns(&points[0].values)));
    text.push('\n');
    for p in &points {
        text.push_str(&p.report.csv_rows(&columns(&p.values)));
    }
    std::fs::write(&csv, text).with_context(|| format!("cannot write {}", csv.display()))?;
    let png = a.out.join("sweep.png");
    let svg = a.out.join("sweep.svg");
    plot(&points, &axes, &png, true)?;
    plot(&points, &axes, &svg, false)?;
    println!(
        "{} points: {}, {}, {}",
        points.len(),
        csv.display(),
        png.display(),
        svg.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn takes_value(key: &str) -> bool {
    crate::bench::args::bench_command()
        .get_arguments()
        .find(|a| a.get_long() == Some(key))
        .is_some_and(|a| a.get_action().takes_values())
}

fn describe(values: &[(String, String)]) -> String {
    values
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Text needs a font: plotters draws with a TrueType file found on the system (DejaVu or
/// Liberation, as Debian ships them), loaded once.
pub(crate) fn ensure_font() -> Result<()> {
    static FONT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    FONT.get_or_init(|| {
        let candidates = [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
            "/System/Library/Fonts/Supplemental/Arial.ttf",
        ];
        for c in candidates {
            if let Ok(bytes) = std::fs::read(c) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err("no TrueType font found for the plots' text (install fonts-dejavu-core)".into())
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// The x position of each point: the index of its value of the first varied option among
/// that option's values. The axis is categorical, labelled with the values themselves: a
/// few numbers (`coroutines=1,2,4,8`, powers of two) read better evenly spaced than on a
/// linear axis, and no tick falls between two values (`0.6000000000000001`).
fn xs(points: &[Point], axes: &[(String, Vec<String>)]) -> Vec<u32> {
    let vals = &axes[0].1;
    points
        .iter()
        .map(|p| vals.iter().position(|x| *x == p.values[0].1).unwrap_or(0) as u32)
        .collect()
}

/// Series: one per combination of the options varied after the first.
fn series(points: &[Point]) -> Vec<(String, Vec<usize>)> {
    let mut out: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let name = describe(&p.values[1..]);
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(i),
            None => out.push((name, vec![i])),
        }
    }
    out
}

fn plot(points: &[Point], axes: &[(String, Vec<String>)], path: &Path, png: bool) -> Result<()> {
    ensure_font()?;
    let size = (1500, 480);
    if png {
        let root = BitMapBackend::new(path, size).into_drawing_area();
        draw(root, points, axes)
    } else {
        let root = SVGBackend::new(path, size).into_drawing_area();
        draw(root, points, axes)
    }
    .with_context(|| format!("cannot draw {}", path.display()))
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    points: &[Point],
    axes: &[(String, Vec<String>)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e:?}");
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled(&title(points, axes), ("sans-serif", 20))
        .map_err(err)?;
    let series = series(points);
    // The legend has a strip of its own under the panels: it never covers data.
    let legend = series.len() > 1;
    let (panels_area, legend_area) = if legend {
        let (_, h) = root.dim_in_pixel();
        let rows = series.len().div_ceil(4) as u32;
        root.split_vertically(h.saturating_sub(10 + 22 * rows))
    } else {
        let (_, h) = root.dim_in_pixel();
        root.split_vertically(h)
    };
    let panels = panels_area.split_evenly((1, 3));
    let x = xs(points, axes);
    let labels = &axes[0].1;
    let xname = &axes[0].0;
    // One segment per value (an integer range includes its end; one value gets an empty
    // segment after it, a range of one integer draws oddly).
    let xr = (0..labels.len().saturating_sub(1).max(1) as u32).into_segmented();
    let label_x = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    let tput: Vec<f64> = points
        .iter()
        .map(|p| p.report.all.committed_per_s)
        .collect();
    let aborts: Vec<f64> = points
        .iter()
        .map(|p| 100.0 * p.report.all.abort_rate)
        .collect();
    let p50: Vec<f64> = points.iter().map(|p| p.report.all.latency_us.p50).collect();
    let p99: Vec<f64> = points.iter().map(|p| p.report.all.latency_us.p99).collect();
    let top = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max) * 1.1 + 1e-9;
    // Panel 1: committed/s against the first varied option.
    // Panel 3: abort rate against it.
    for (panel, ys, yname) in [
        (&panels[0], &tput, "committed/s"),
        (&panels[2], &aborts, "abort rate %"),
    ] {
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(xr.clone(), 0.0..top(ys))
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(labels.len() + 1)
            .x_desc(xname.as_str())
            .y_desc(yname)
            .x_label_formatter(&label_x)
            .y_label_formatter(&|v| short(*v))
            .draw()
            .map_err(err)?;
        for (si, (_, idx)) in series.iter().enumerate() {
            let color = color(si);
            let pts: Vec<(SegmentValue<u32>, f64)> = idx
                .iter()
                .map(|&i| (SegmentValue::CenterOf(x[i]), ys[i]))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(err)?;
            chart
                .draw_series(
                    pts.iter()
                        .map(|p| Circle::new(p.clone(), 4, color.filled())),
                )
                .map_err(err)?;
        }
    }
    // Panel 2: latency against throughput, p50 solid and p99 dashed-looking (hollow points).
    let mut chart = ChartBuilder::on(&panels[1])
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..top(&tput), 0.0..top(&p99))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_desc("committed/s")
        .y_desc("latency us (p50 filled, p99 hollow)")
        .x_label_formatter(&|v| short(*v))
        .y_label_formatter(&|v| short(*v))
        .draw()
        .map_err(err)?;
    for (si, (_, idx)) in series.iter().enumerate() {
        let color = color(si);
        for (ys, filled) in [(&p50, true), (&p99, false)] {
            let pts: Vec<(f64, f64)> = idx.iter().map(|&i| (tput[i], ys[i])).collect();
            chart
                .draw_series(LineSeries::new(
                    pts.clone(),
                    color.stroke_width(if filled { 2 } else { 1 }),
                ))
                .map_err(err)?;
            let style = if filled {
                color.filled()
            } else {
                color.stroke_width(2)
            };
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, style)))
                .map_err(err)?;
        }
    }
    if legend {
        draw_legend(&legend_area, &series).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One entry per series (a colored line and its name), four to a row, in their own strip.
/// The colors of the series (matplotlib's tab10: distinct, none too pale on white).
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(series: usize) -> RGBAColor {
    COLORS[series % COLORS.len()].to_rgba()
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    series: &[(String, Vec<usize>)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, _) = area.dim_in_pixel();
    let cell = (w as i32 - 80) / 4;
    for (si, (name, _)) in series.iter().enumerate() {
        let color = color(si);
        let (col, row) = ((si % 4) as i32, (si / 4) as i32);
        let (x, y) = (80 + col * cell, 8 + row * 22);
        area.draw(&PathElement::new(
            vec![(x, y + 8), (x + 24, y + 8)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(
            name.clone(),
            (x + 32, y),
            ("sans-serif", 15).into_font(),
        ))?;
    }
    Ok(())
}

/// The title: what every point shares (the workload and backend unless varied, the other
/// fixed options), and the clock.
fn title(points: &[Point], axes: &[(String, Vec<String>)]) -> String {
    let c = &points[0].report.config;
    let varied = |k: &str| axes.iter().any(|(a, _)| a == k);
    let clock = if points[0].report.time == "virtual" {
        "virtual time"
    } else {
        "wall time"
    };
    let backend = format!("{:?}", c.backend).to_lowercase();
    let mut t = match (varied("workload"), varied("backend")) {
        (false, false) => format!("{} on {backend}", c.workload),
        (false, true) => c.workload.clone(),
        (true, false) => backend,
        (true, true) => String::new(),
    };
    let fixed = describe_fixed(points, axes);
    if !fixed.is_empty() {
        if !t.is_empty() {
            t.push_str(", ");
        }
        t.push_str(&fixed);
    }
    format!("{t} ({clock})")
}

/// What did not vary, for the title.
fn describe_fixed(points: &[Point], axes: &[(String, Vec<String>)]) -> String {
    let c = &points[0].report.config;
    let varied = |k: &str| axes.iter().any(|(a, _)| a == k);
    let mut parts = Vec::new();
    if !varied("protocol") {
        parts.push(c.protocol.clone());
    }
    for (k, v) in [
        ("threads", c.threads),
        ("coroutines", c.coroutines),
        ("compute-nodes", c.compute_nodes),
    ] {
        if !varied(k) {
            parts.push(format!("{k} {v}"));
        }
    }
    parts.join(", ")
}

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}
