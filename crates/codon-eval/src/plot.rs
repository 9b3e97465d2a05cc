//! Pictures of the metrics, as SVG drawn with plotters: a sequence's %MinMax profile against its
//! organism's reference band, and the distribution of CSI and GC content per organism.

use std::io::Write;
use std::path::Path;

use plotters::prelude::*;

use crate::error::{EvalError, Result};

/// One %MinMax profile to draw, under a legend name.
#[derive(Debug, Clone, Copy)]
pub struct ProfileSeries<'a> {
    /// The legend entry.
    pub name: &'a str,
    /// The profile, as [`crate::metrics::min_max_profile`] returns it.
    pub values: &'a [Option<f64>],
}

/// A per-window percentile band of many %MinMax profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileBand {
    /// The legend entry.
    pub name: String,
    /// Per window start: (lower, upper), or `None` where no profile has a value.
    pub bounds: Vec<Option<(f64, f64)>>,
}

impl ProfileBand {
    /// The `lower`–`upper` percentile (nearest rank, 0..=100) of the profiles at each window start.
    pub fn from_profiles(name: impl Into<String>, profiles: &[Vec<Option<f64>>], lower: f64, upper: f64) -> Self {
        let len = profiles.iter().map(Vec::len).max().unwrap_or(0);
        let bounds = (0..len)
            .map(|i| {
                let mut at: Vec<f64> =
                    profiles.iter().filter_map(|p| p.get(i).copied().flatten()).filter(|v| v.is_finite()).collect();
                if at.is_empty() {
                    return None;
                }
                at.sort_by(f64::total_cmp);
                let rank = |q: f64| at[((q / 100.0 * at.len() as f64).ceil() as usize).clamp(1, at.len()) - 1];
                Some((rank(lower), rank(upper)))
            })
            .collect();
        Self { name: name.into(), bounds }
    }
}

/// One organism's CSI and GC values, for [`plot_distributions`].
#[derive(Debug, Clone, PartialEq)]
pub struct OrganismValues {
    /// The organism's name.
    pub organism: String,
    /// CSI of each of its sequences.
    pub csi: Vec<f64>,
    /// GC content of each of its sequences.
    pub gc_content: Vec<f64>,
}

/// Which values of an organism a panel shows.
type ValuesOf = fn(&OrganismValues) -> &[f64];

const SERIES_COLORS: [RGBColor; 3] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44)];
const BAND_COLOR: RGBColor = RGBColor(127, 127, 127);

fn plot_error(path: &Path) -> impl Fn(String) -> EvalError + '_ {
    move |detail| EvalError::Plot { path: path.to_path_buf(), detail }
}

/// The legend of every labelled series, boxed, at `position`.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart.configure_series_labels().position(position).background_style(WHITE.mix(0.85)).border_style(BLACK).draw()
}

/// Write an SVG, atomically.
fn write_svg(path: &Path, svg: &str) -> Result<()> {
    codon_files::write_atomically(path, |w| w.write_all(svg.as_bytes()))
        .map_err(|e| EvalError::Plot { path: path.to_path_buf(), detail: e.to_string() })
}

/// An organism's band: the 10th to 90th percentile of its reference sequences' %MinMax
/// profiles; `None` without sequences.
pub fn reference_band(
    sequences: &[crate::Dna],
    reference: &crate::OrganismReference,
    options: &crate::MetricOptions,
) -> Option<ProfileBand> {
    let profiles: Vec<Vec<Option<f64>>> = sequences
        .iter()
        .filter_map(|d| crate::metrics::min_max_profile(d, &reference.frequencies, options.window).ok())
        .collect();
    (!profiles.is_empty()).then(|| {
        ProfileBand::from_profiles(
            format!("reference set, 10th-90th percentile ({} sequences)", profiles.len()),
            &profiles,
            10.0,
            90.0,
        )
    })
}

/// Draw profiles over an optional band: x is the window's first codon, y is %MinMax.
pub fn plot_minmax(path: &Path, title: &str, series: &[ProfileSeries<'_>], band: Option<&ProfileBand>) -> Result<()> {
    let error = plot_error(path);
    let values = series.iter().flat_map(|s| s.values.iter().flatten().copied());
    let band_values = band.into_iter().flat_map(|b| b.bounds.iter().flatten().flat_map(|&(l, u)| [l, u]));
    // A near-uniform window can give an enormous (even infinite) %MinMax: only finite values count.
    let (lo, hi) = values
        .chain(band_values)
        .filter(|v| v.is_finite())
        .fold((-100.0f64, 100.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let len = series.iter().map(|s| s.values.len()).max().unwrap_or(0).max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (960, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| error(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..len as f64, lo..hi)
            .map_err(|e| error(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("window start (codon)")
            .y_desc("%MinMax")
            .draw()
            .map_err(|e| error(e.to_string()))?;
        if let Some(band) = band {
            let upper = band.bounds.iter().enumerate().filter_map(|(i, b)| b.map(|(_, u)| (i as f64, u)));
            let lower: Vec<(f64, f64)> =
                band.bounds.iter().enumerate().filter_map(|(i, b)| b.map(|(l, _)| (i as f64, l))).collect();
            let outline: Vec<(f64, f64)> = upper.chain(lower.into_iter().rev()).collect();
            chart
                .draw_series(std::iter::once(Polygon::new(outline, BAND_COLOR.mix(0.25).filled())))
                .map_err(|e| error(e.to_string()))?
                .label(band.name.as_str())
                .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], BAND_COLOR.mix(0.25).filled()));
        }
        // Drawn last to first, so the first series (the sequence) lies on top.
        for (i, s) in series.iter().enumerate().rev() {
            let color = &SERIES_COLORS[i % SERIES_COLORS.len()];
            let points =
                s.values.iter().enumerate().filter_map(|(i, v)| v.filter(|v| v.is_finite()).map(|v| (i as f64, v)));
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| error(e.to_string()))?
                .label(s.name)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight).map_err(|e| error(e.to_string()))?;
        root.present().map_err(|e| error(e.to_string()))?;
    }
    write_svg(path, &svg)
}

/// Box plots of CSI and of GC content, one box per organism with each sequence as a dot, in
/// two panels side by side; organisms run down the y axis so long names stay readable.
pub fn plot_distributions(path: &Path, organisms: &[OrganismValues]) -> Result<()> {
    let error = plot_error(path);
    let names: Vec<&str> = organisms.iter().map(|o| o.organism.as_str()).collect();
    let label_width = names.iter().map(|n| n.len() as u32 * 7).max().unwrap_or(60).clamp(60, 320);
    let height = 120 + 40 * names.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1200, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| error(e.to_string()))?;
        let panels = root.split_evenly((1, 2));
        let metrics: [(&str, f32, ValuesOf); 2] =
            [("CSI", 1.0, |o| &o.csi), ("GC content (%)", 100.0, |o| &o.gc_content)];
        for ((metric, top, values_of), (panel, color)) in metrics.into_iter().zip(panels.iter().zip(SERIES_COLORS)) {
            let mut chart = ChartBuilder::on(panel)
                .caption(format!("{metric} per organism"), ("sans-serif", 18))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(label_width)
                .build_cartesian_2d(0f32..top, (0..names.len().max(1) as u32).into_segmented())
                .map_err(|e| error(e.to_string()))?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .y_labels(names.len().max(1))
                .y_label_formatter(&|v| match v {
                    SegmentValue::CenterOf(i) => names.get(*i as usize).map_or(String::new(), |n| n.to_string()),
                    _ => String::new(),
                })
                .x_desc(metric)
                .draw()
                .map_err(|e| error(e.to_string()))?;
            let boxes = organisms.iter().enumerate().filter_map(|(i, o)| {
                let finite: Vec<f64> = values_of(o).iter().copied().filter(|v| v.is_finite()).collect();
                (!finite.is_empty()).then(|| {
                    Boxplot::new_horizontal(SegmentValue::CenterOf(i as u32), &Quartiles::new(&finite))
                        .width(24)
                        .style(color)
                })
            });
            chart
                .draw_series(boxes)
                .map_err(|e| error(e.to_string()))?
                .label(format!("{metric}: quartiles and range"))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.stroke_width(2)));
            let dots = organisms.iter().enumerate().flat_map(|(i, o)| {
                values_of(o).iter().filter(|v| v.is_finite()).map(move |&v| {
                    Circle::new((v as f32, SegmentValue::CenterOf(i as u32)), 3, color.mix(0.5).filled())
                })
            });
            chart
                .draw_series(dots)
                .map_err(|e| error(e.to_string()))?
                .label(format!("{metric} of each sequence"))
                .legend(move |(x, y)| Circle::new((x + 9, y), 3, color.mix(0.5).filled()));
            draw_legend(&mut chart, SeriesLabelPosition::UpperRight).map_err(|e| error(e.to_string()))?;
        }
        root.present().map_err(|e| error(e.to_string()))?;
    }
    write_svg(path, &svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_band_takes_nearest_rank_percentiles_where_profiles_have_values() {
        let profiles =
            vec![vec![Some(1.0), Some(2.0), None], vec![Some(3.0), Some(4.0), None], vec![Some(5.0), None, None]];
        let band = ProfileBand::from_profiles("band", &profiles, 10.0, 90.0);
        assert_eq!(band.bounds, [Some((1.0, 5.0)), Some((2.0, 4.0)), None]);
    }

    #[test]
    fn non_finite_values_and_empty_inputs_still_draw() {
        let dir = tempfile::tempdir().unwrap();
        let values = [Some(f64::INFINITY), Some(3.0), Some(f64::NAN), None];
        let path = dir.path().join("p.svg");
        plot_minmax(&path, "t", &[ProfileSeries { name: "s", values: &values }], None).unwrap();
        plot_minmax(&path, "t", &[ProfileSeries { name: "s", values: &[] }], None).unwrap();
        let organisms = [OrganismValues { organism: "x".into(), csi: vec![f64::NAN], gc_content: vec![] }];
        plot_distributions(&dir.path().join("d.svg"), &organisms).unwrap();
        plot_distributions(&dir.path().join("e.svg"), &[]).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("<svg"));
    }
}
