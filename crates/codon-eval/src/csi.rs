//! The codon similarity index: CAI against weights from an organism's reference sequences,
//! with the semantics of the `CAI-PyPI` 2.0.1 package that upstream calls.
//!
//! That package's default genetic code, which upstream never overrides, is NCBI table 11
//! ("Bacterial, Archaeal and Plant Plastid"); table 1 would give the same numbers, since the
//! two share their sense codons and stops.

use crate::counts::CodonCounts;
use crate::dna::Dna;
use crate::error::{EvalError, Result};
use crate::genetic_code::{amino_acid, families, family_of, is_stop};

/// The count given to a sense codon the reference never uses (`RSCU` in CAI-PyPI).
const UNSEEN_CODON_COUNT: f64 = 0.5;

/// Relative adaptiveness `w` of each sense codon: its RSCU over the largest RSCU of its synonyms.
#[derive(Debug, Clone, PartialEq)]
pub struct CsiWeights([f64; 64]);

impl CsiWeights {
    /// `relative_adaptiveness(sequences)`: RSCU with unseen sense codons counted as 0.5, then
    /// w = RSCU / max over synonyms. Stop codons get no weight.
    pub fn from_counts(counts: &CodonCounts) -> Result<Self> {
        if counts.is_empty() {
            return Err(EvalError::EmptyReference { what: "for CSI weights".into() });
        }
        let mut count = [0.0; 64];
        for (c, slot) in count.iter_mut().enumerate() {
            let n = counts.get(c);
            *slot = if n == 0.0 && !is_stop(c) { UNSEEN_CODON_COUNT } else { n };
        }
        let mut rscu = [0.0; 64];
        for codons in families().iter().filter(|codons| !is_stop(codons[0] as usize)) {
            let total: f64 = codons.iter().map(|&c| count[c as usize]).sum();
            // `count / ((1/n) * total)`, as CAI-PyPI writes it: `count / (total / n)` differs in
            // the last bit for some codons.
            let expected = (1.0 / codons.len() as f64) * total;
            for &c in codons {
                rscu[c as usize] = count[c as usize] / expected;
            }
        }
        let mut weights = [0.0; 64];
        for codons in families().iter().filter(|codons| !is_stop(codons[0] as usize)) {
            let max = codons.iter().map(|&c| rscu[c as usize]).fold(f64::NEG_INFINITY, f64::max);
            for &c in codons {
                weights[c as usize] = rscu[c as usize] / max;
            }
        }
        Ok(Self(weights))
    }

    /// Weights as upstream passes them around (`get_CSI_weights`' result), by codon index; a stop
    /// codon's entry is ignored.
    pub fn from_weights(weights: [f64; 64]) -> Self {
        Self(weights)
    }

    /// The weight of a sense codon index; `None` for a stop.
    pub fn weight(&self, codon: usize) -> Option<f64> {
        (!is_stop(codon)).then(|| self.0[codon % 64])
    }

    /// `CAI(sequence, weights)`: the geometric mean of `w` over the codons, skipping ATG and TGG
    /// (their amino acids have one codon) and stop codons wherever they are. NaN when no codon
    /// is left, as upstream (scipy's `gmean` of nothing).
    pub fn csi(&self, dna: &Dna) -> f64 {
        let logs: Vec<f64> = dna
            .codons()
            .iter()
            .map(|&c| c as usize)
            .filter(|&c| !is_stop(c) && families()[family_of(c)].len() > 1)
            .map(|c| self.0[c].ln())
            .collect();
        if logs.is_empty() {
            return f64::NAN;
        }
        // numpy's mean: a pairwise sum started from 0.0, divided by n.
        ((0.0 + pairwise_sum(&logs)) / logs.len() as f64).exp()
    }
}

/// numpy's float64 `add.reduce`: left to right below 8 items, eight interleaved accumulators up
/// to 128, and halves (cut at a multiple of 8) beyond. The last bits of CSI depend on it.
fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        a.iter().fold(0.0, |acc, &v| acc + v)
    } else if n <= 128 {
        let mut r = [0.0; 8];
        r.copy_from_slice(&a[..8]);
        let whole = n - n % 8;
        for block in a[8..whole].chunks_exact(8) {
            for (acc, &v) in r.iter_mut().zip(block) {
                *acc += v;
            }
        }
        let mut sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &v in &a[whole..] {
            sum += v;
        }
        sum
    } else {
        let half = n / 2;
        let half = half - half % 8;
        pairwise_sum(&a[..half]) + pairwise_sum(&a[half..])
    }
}

/// The codons CSI skips although they carry a weight: the single-codon families' ATG and TGG.
pub fn single_codon_families() -> impl Iterator<Item = (&'static str, char)> {
    families()
        .iter()
        .filter(|codons| codons.len() == 1)
        .map(|codons| (crate::genetic_code::codon_text(codons[0] as usize), amino_acid(codons[0] as usize)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_groups_like_numpy() {
        // With 1e16 + 1 + 1..., left-to-right loses every 1.0; interleaved accumulators keep some.
        let mut a = vec![1.0; 16];
        a[0] = 1e16;
        let left_to_right = a.iter().fold(0.0, |acc, &v| acc + v);
        assert_eq!(left_to_right, 1e16);
        // r0 = 1e16 + 1 = 1e16 (lost), r1..r7 = 2 each: 1e16 + 14.
        assert_eq!(pairwise_sum(&a), 1e16 + 14.0);
    }

    #[test]
    fn single_codon_families_are_atg_and_tgg() {
        let skipped: Vec<_> = single_codon_families().collect();
        assert_eq!(skipped, [("ATG", 'M'), ("TGG", 'W')]);
    }
}
