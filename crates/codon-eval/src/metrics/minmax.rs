//! %MinMax (`get_min_max_percentage` upstream): how far each window's codon choice sits between
//! the least and the most frequent synonyms.

use crate::dna::Dna;
use crate::error::{EvalError, Result};
use crate::frequencies::CodonFrequencies;

/// Upstream's default window, in codons.
pub const DEFAULT_MINMAX_WINDOW: usize = 18;

/// The longest window, in codons. Upstream pads the profile with ⌊window/2⌋ `None`s whatever the
/// sequence's length, so a window of 2⁴⁰ would ask for terabytes; a longer window is refused.
pub const MAX_MINMAX_WINDOW: usize = 1_000_000;

/// The %MinMax profile: one value per window of `window` codons starting at codon 0, 1, … n−window,
/// followed by ⌊window/2⌋ `None`s, as upstream returns it (a sequence shorter than the window gives
/// only the `None`s).
///
/// Per window, the actual, maximum, minimum and average synonym frequencies are summed in codon
/// order and divided by the window; the value is %Max = (actual − avg)/(max − avg)·100 when it is
/// ≥ 0, else −%Min = −(avg − actual)/(avg − min)·100. A window made only of amino acids whose
/// synonyms are equally frequent (ATG, TGG, …) has max = avg = min; upstream raises
/// `ZeroDivisionError` there, here its value is 0, the choice being neither above nor below average.
/// A window of 0 or over [`MAX_MINMAX_WINDOW`] is [`EvalError::InvalidArgument`].
pub fn min_max_profile(dna: &Dna, frequencies: &CodonFrequencies, window: usize) -> Result<Vec<Option<f64>>> {
    if window == 0 {
        return Err(EvalError::InvalidArgument { name: "window", detail: "must be at least 1 codon".into() });
    }
    if window > MAX_MINMAX_WINDOW {
        return Err(EvalError::InvalidArgument {
            name: "window",
            detail: format!("{window} codons: at most {MAX_MINMAX_WINDOW}"),
        });
    }
    let codons = dna.codons();
    let windows = (codons.len() + 1).saturating_sub(window);
    let mut profile = Vec::with_capacity(windows + window / 2);
    let w = window as f64;
    for start in 0..windows {
        let (mut actual, mut max, mut min, mut avg) = (0.0, 0.0, 0.0, 0.0);
        for &c in &codons[start..start + window] {
            let c = c as usize;
            actual += frequencies.frequency(c);
            max += frequencies.synonym_max(c);
            min += frequencies.synonym_min(c);
            avg += frequencies.synonym_mean(c);
        }
        let (actual, max, min, avg) = (actual / w, max / w, min / w, avg / w);
        let percent_max = if max == avg { 0.0 } else { ((actual - avg) / (max - avg)) * 100.0 };
        let value = if percent_max >= 0.0 {
            percent_max
        } else if avg == min {
            0.0
        } else {
            -(((avg - actual) / (avg - min)) * 100.0)
        };
        profile.push(Some(value));
    }
    profile.extend(std::iter::repeat_n(None, window / 2));
    Ok(profile)
}

/// The mean of a profile's values, its `None`s left out; `None` when it has no value. Upstream has
/// no such function (its `None`s break `np.mean`); this is the definition used by `evaluate`.
pub fn profile_mean(profile: &[Option<f64>]) -> Option<f64> {
    let values: Vec<f64> = profile.iter().flatten().copied().collect();
    (!values.is_empty()).then(|| values.iter().fold(0.0, |acc, v| acc + v) / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_past_the_bound_is_refused_rather_than_allocated() {
        let dna = Dna::parse("ATGGCTGCC").unwrap();
        let frequencies = CodonFrequencies::from_frequencies([1.0 / 64.0; 64]);
        // 2⁶² codons was a "capacity overflow" panic, 2⁴⁰ an abort on terabytes.
        for window in [MAX_MINMAX_WINDOW + 1, 1 << 40, 1 << 62, usize::MAX] {
            let err = min_max_profile(&dna, &frequencies, window).unwrap_err();
            assert!(matches!(err, EvalError::InvalidArgument { name: "window", .. }), "{err}");
        }
        let profile = min_max_profile(&dna, &frequencies, MAX_MINMAX_WINDOW).unwrap();
        assert_eq!(profile.len(), MAX_MINMAX_WINDOW / 2);
        assert!(profile.iter().all(Option::is_none));
    }
}
