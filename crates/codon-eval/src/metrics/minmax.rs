//! %MinMax (`get_min_max_percentage` upstream): how far each window's codon choice sits between
//! the least and the most frequent synonyms.

use crate::dna::Dna;
use crate::error::{EvalError, Result};
use crate::frequencies::CodonFrequencies;

/// Upstream's default window, in codons.
pub const DEFAULT_MINMAX_WINDOW: usize = 18;

/// The %MinMax profile: one value per window of `window` codons starting at codon 0, 1, … n−window,
/// followed by ⌊window/2⌋ `None`s, as upstream returns it (a sequence shorter than the window gives
/// only the `None`s).
///
/// Per window, the actual, maximum, minimum and average synonym frequencies are summed in codon
/// order and divided by the window; the value is %Max = (actual − avg)/(max − avg)·100 when it is
/// ≥ 0, else −%Min = −(avg − actual)/(avg − min)·100. A window made only of amino acids whose
/// synonyms are equally frequent (ATG, TGG, …) has max = avg = min; upstream raises
/// `ZeroDivisionError` there, here its value is 0, the choice being neither above nor below average.
pub fn min_max_profile(dna: &Dna, frequencies: &CodonFrequencies, window: usize) -> Result<Vec<Option<f64>>> {
    if window == 0 {
        return Err(EvalError::InvalidArgument { name: "window", detail: "must be at least 1 codon".into() });
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
