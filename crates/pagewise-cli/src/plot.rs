//! `--plot FILE.svg|FILE.png`: GB/s by size for pagewise and glibc.
//!
//! Text is laid out (and, in PNG, drawn) with a TrueType font found on the
//! system (DejaVu or Liberation Sans) through `ab_glyph`, so that the build
//! needs neither font-kit nor fontconfig; without such a font the plot is
//! refused with a message that says so.

use crate::format::usage;
use anyhow::{bail, Context};
use pagewise::units::format_bytes_exact;
use pagewise_bench::memcpy::{Op, Report, Residency};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 600;

/// Fonts tried for PNG output, in order.
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
];

enum Format {
    Svg,
    Png,
}

fn format_of(path: &Path) -> anyhow::Result<Format> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(usage(format!(
            "--plot {}: the file name must end in .svg or .png",
            path.display()
        ))),
    }
}

/// Checks, before a long run, the file name and that the plot can be written
/// there: nothing but a regular file this user may write is there, or, where
/// nothing is yet, its folder exists and takes new files (the plotting
/// library opens the path itself, after the run). Creates nothing.
pub fn check_path(path: &Path) -> anyhow::Result<()> {
    format_of(path)?;
    pagewise::host::user_files::check_output(path)
        .with_context(|| format!("--plot {}", path.display()))
}

/// A drawing backend's error in words: the SVG backend's is an I/O error;
/// the PNG backend's shows only its `Debug` form, so its cause is taken out.
trait BackendCause {
    fn in_words(&self) -> String;
}

impl BackendCause for std::io::Error {
    fn in_words(&self) -> String {
        self.to_string()
    }
}

impl BackendCause for plotters_bitmap::BitMapBackendError {
    fn in_words(&self) -> String {
        use plotters_bitmap::BitMapBackendError as E;
        match self {
            E::IOError(e) => e.to_string(),
            E::ImageError(e) => e.to_string(),
            other => format!("{other:?}"),
        }
    }
}

/// A plotting library error as one clause: the cause itself (`No such file
/// or directory (os error 2)`), not plotters' nesting of it
/// ("backend error: Drawing backend error: …", or a `Debug` form).
fn drawing_error<E: std::error::Error + Send + Sync + BackendCause>(
    e: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    use plotters::drawing::DrawingAreaErrorKind::BackendError;
    use plotters_backend::DrawingErrorKind;
    match e {
        BackendError(DrawingErrorKind::DrawingError(cause)) => {
            anyhow::anyhow!("{}", cause.in_words())
        }
        BackendError(DrawingErrorKind::FontError(cause)) => anyhow::anyhow!("the font: {cause}"),
        other => anyhow::anyhow!("{other}"),
    }
}

fn register_font() -> anyhow::Result<()> {
    let bytes = FONTS
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .with_context(|| {
            format!(
                "plots need a TrueType font and none was found (looked for {}); install fonts-dejavu-core",
                FONTS.join(", ")
            )
        })?;
    // plotters keeps the font for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow::anyhow!("the system font could not be loaded for the plot's text"))?;
    Ok(())
}

/// Draws the report's aligned rows (hot and cold) as GB/s by size. An error
/// is one line that names the file: `cannot write the plot PATH: CAUSE` (or
/// `cannot draw …` for one before the file is written).
pub fn draw(path: &Path, op: Op, report: &Report) -> anyhow::Result<()> {
    register_font()?;
    let drawn = |e: anyhow::Error| e.context(format!("cannot draw the plot {}", path.display()));
    let written = |e: anyhow::Error| e.context(format!("cannot write the plot {}", path.display()));
    match format_of(path)? {
        Format::Svg => {
            let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
            chart(&root, op, report).map_err(drawn)?;
            root.present().map_err(drawing_error).map_err(written)?;
        }
        Format::Png => {
            let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
            chart(&root, op, report).map_err(drawn)?;
            root.present().map_err(drawing_error).map_err(written)?;
        }
    }
    Ok(())
}

/// Points as (log2 of bytes, GB/s): the x axis is linear in log2 so that its
/// ticks fall on powers of two.
type Series = Vec<(f64, f64)>;

fn series(report: &Report, hot: bool) -> (Series, Series) {
    let rows = report.rows.iter().filter(|r| {
        r.src_offset % 64 == 0
            && r.dst_offset % 64 == 0
            && r.threads == 1
            && (r.residency != Residency::Cold) == hot
    });
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for r in rows {
        let x = (r.bytes as f64).log2();
        ours.push((x, r.gbps));
        theirs.push((x, r.glibc_gbps));
    }
    (ours, theirs)
}

fn chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    op: Op,
    report: &Report,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static + BackendCause,
{
    let err = drawing_error::<DB::ErrorType>;
    root.fill(&WHITE).map_err(err)?;
    let (hot_ours, hot_glibc) = series(report, true);
    let (cold_ours, cold_glibc) = series(report, false);
    let all: Vec<&(f64, f64)> = hot_ours
        .iter()
        .chain(&hot_glibc)
        .chain(&cold_ours)
        .chain(&cold_glibc)
        .collect();
    if all.is_empty() {
        bail!("no aligned fixed-size rows to plot");
    }
    let x_min = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .floor();
    let x_max = all
        .iter()
        .map(|p| p.0)
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        .max(x_min + 1.0);
    let y_max = all.iter().map(|p| p.1).fold(1.0f64, f64::max) * 1.1;
    let (ours_name, theirs_name) = match op {
        Op::Memcpy => ("pagewise copy", "glibc memcpy"),
        Op::Memset => ("pagewise fill", "glibc memset"),
    };
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("{} vs {}: GB/s by size (aligned)", ours_name, theirs_name),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(56)
        .build_cartesian_2d(x_min..x_max, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("bytes per call")
        .y_desc("GB/s (10^9 bytes/s)")
        .x_labels(((x_max - x_min) as usize + 1).min(16))
        .x_label_formatter(&|x| {
            if x.fract().abs() < 1e-9 && *x >= 0.0 && *x < 63.0 {
                format_bytes_exact(1u64 << (*x as u32))
            } else {
                String::new()
            }
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    let lines: [(&Series, String, RGBColor, bool); 4] = [
        (&hot_ours, format!("{ours_name}, hot"), BLUE, false),
        (&hot_glibc, format!("{theirs_name}, hot"), RED, false),
        (&cold_ours, format!("{ours_name}, cold"), BLUE, true),
        (&cold_glibc, format!("{theirs_name}, cold"), RED, true),
    ];
    for (points, label, color, cold) in lines {
        if points.is_empty() {
            continue;
        }
        let style = if cold {
            color.mix(0.5).stroke_width(2)
        } else {
            color.stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 3, color.mix(if cold { 0.5 } else { 1.0 }).filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(err)?;
    Ok(())
}
