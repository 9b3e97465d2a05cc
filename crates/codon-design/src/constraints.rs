//! Constraints on a coding sequence, each able to list where it is violated and by how much.
//!
//! Severities are whole numbers (sites, nucleotides of excess), so a repair that lowers their sum
//! at every step always ends.

use std::collections::HashMap;

use crate::enzymes::recognition_site;
use crate::error::{DesignError, Result};
use crate::iupac::Pattern;

/// One rule the DNA must follow.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    /// No occurrence of a pattern on either strand (`--avoid-sites`, `--avoid-motif`).
    Avoid {
        /// What the pattern is: an enzyme's name, or the motif itself.
        name: String,
        /// The pattern, 5'→3' on the top strand.
        pattern: Pattern,
    },
    /// The GC percentage of every window of `window` nucleotides lies in `[min, max]`.
    GcWindow {
        /// Window length in nucleotides (the whole sequence when it is shorter).
        window: usize,
        /// Lowest GC percentage.
        min: f64,
        /// Highest GC percentage.
        max: f64,
    },
    /// No run of one base longer than this.
    MaxHomopolymer(usize),
    /// No exact repeat longer than this: every substring of this length + 1 occurs once.
    MaxRepeat(usize),
}

/// Where and how badly a constraint is violated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Index of the constraint in the list given to [`violations`].
    pub constraint: usize,
    /// First nucleotide of the violating region (0-based).
    pub start: usize,
    /// One past its last nucleotide.
    pub end: usize,
    /// How much it violates (sites, or nucleotides of excess).
    pub severity: u64,
    /// What it is, for messages: "BsaI site GGTCTC (reverse strand)", say.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at nucleotides {}-{}", self.what, self.start + 1, self.end)
    }
}

impl Constraint {
    /// `--avoid-sites` names, comma-separated, from the built-in enzyme table.
    pub fn sites(names: &str) -> Result<Vec<Self>> {
        names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|name| {
                let site = recognition_site(name).ok_or_else(|| DesignError::UnknownEnzyme(name.to_string()))?;
                let pattern = Pattern::parse(site).ok_or_else(|| DesignError::UnknownEnzyme(name.to_string()))?;
                Ok(Constraint::Avoid { name: format!("{name} site {site}"), pattern })
            })
            .collect()
    }

    /// `--avoid-motif SEQ` (IUPAC letters).
    pub fn motif(text: &str) -> Result<Self> {
        let pattern = Pattern::parse(text).ok_or_else(|| DesignError::InvalidMotif(text.to_string()))?;
        Ok(Constraint::Avoid { name: format!("motif {}", text.trim().to_ascii_uppercase()), pattern })
    }

    /// `--gc-window N --gc-min P --gc-max P`.
    pub fn gc_window(window: usize, min: f64, max: f64) -> Result<Self> {
        if window == 0 || !(0.0..=100.0).contains(&min) || !(0.0..=100.0).contains(&max) || min > max {
            return Err(DesignError::InvalidConstraint(format!(
                "GC window {window} with bounds {min}..{max}: the window must be positive and 0 <= min <= max <= 100"
            )));
        }
        Ok(Constraint::GcWindow { window, min, max })
    }

    /// `--max-repeat N`: N from 1 to 63 (k-mers are packed two bits a base).
    pub fn max_repeat(n: usize) -> Result<Self> {
        if !(1..=63).contains(&n) {
            return Err(DesignError::InvalidConstraint(format!("--max-repeat {n}: must be between 1 and 63")));
        }
        Ok(Constraint::MaxRepeat(n))
    }

    /// What the constraint asks, for messages.
    pub fn describe(&self) -> String {
        match self {
            Constraint::Avoid { name, .. } => format!("avoid {name}"),
            Constraint::GcWindow { window, min, max } => format!("GC {min}-{max}% in every {window}-nt window"),
            Constraint::MaxHomopolymer(n) => format!("no homopolymer longer than {n} nt"),
            Constraint::MaxRepeat(n) => format!("no exact repeat longer than {n} nt"),
        }
    }

    /// Append this constraint's violations in `dna` (upper-case A/C/G/T), left to right.
    pub fn violations(&self, index: usize, dna: &[u8], out: &mut Vec<Violation>) {
        let violation =
            |start, end, severity, what: String| Violation { constraint: index, start, end, severity, what };
        match self {
            Constraint::Avoid { name, pattern } => {
                let reverse = pattern.reverse_complement();
                let palindromic = reverse == *pattern;
                for start in 0..(dna.len() + 1).saturating_sub(pattern.len()) {
                    if pattern.matches_at(dna, start) {
                        out.push(violation(start, start + pattern.len(), 1, name.clone()));
                    } else if !palindromic && reverse.matches_at(dna, start) {
                        out.push(violation(start, start + pattern.len(), 1, format!("{name} (reverse strand)")));
                    }
                }
            }
            Constraint::GcWindow { window, min, max } => {
                let w = (*window).min(dna.len());
                if w == 0 {
                    return;
                }
                // Bounds in whole nucleotides for this window length.
                let lowest = (min / 100.0 * w as f64).ceil() as u64;
                let highest = (max / 100.0 * w as f64).floor() as u64;
                let is_gc = |b: u8| u64::from(matches!(b, b'G' | b'C'));
                let mut gc: u64 = dna[..w].iter().map(|&b| is_gc(b)).sum();
                // Consecutive violating windows merge into one region.
                let mut region: Option<(usize, usize, u64)> = None;
                for start in 0..=dna.len() - w {
                    if start > 0 {
                        gc = gc + is_gc(dna[start + w - 1]) - is_gc(dna[start - 1]);
                    }
                    let excess = if gc < lowest { lowest - gc } else { gc.saturating_sub(highest) };
                    match (&mut region, excess) {
                        (Some((_, end, severity)), e) if e > 0 => {
                            *end = start + w;
                            *severity += e;
                        }
                        (None, e) if e > 0 => region = Some((start, start + w, e)),
                        (Some(_), _) => {
                            let (s, e, sev) = region.take().unwrap_or_default();
                            out.push(violation(s, e, sev, self.describe()));
                        }
                        (None, _) => {}
                    }
                }
                if let Some((s, e, sev)) = region {
                    out.push(violation(s, e, sev, self.describe()));
                }
            }
            Constraint::MaxHomopolymer(n) => {
                let mut start = 0;
                while start < dna.len() {
                    let run = dna[start..].iter().take_while(|&&b| b == dna[start]).count();
                    if run > *n {
                        let what = format!("homopolymer {}x{}", dna[start] as char, run);
                        out.push(violation(start, start + run, (run - n) as u64, what));
                    }
                    start += run;
                }
            }
            Constraint::MaxRepeat(n) => {
                let k = n + 1;
                let mut first: HashMap<&[u8], usize> = HashMap::new();
                for start in 0..(dna.len() + 1).saturating_sub(k) {
                    let kmer = &dna[start..start + k];
                    match first.get(kmer) {
                        Some(&at) => out.push(violation(
                            start,
                            start + k,
                            1,
                            format!("repeat of {} nt (also at nucleotide {})", k, at + 1),
                        )),
                        None => {
                            first.insert(kmer, start);
                        }
                    }
                }
            }
        }
    }
}

/// Counts of every k-mer of a sequence, 2 bits a base: what [`Constraint::MaxRepeat`] needs to
/// score a change without rescanning the whole sequence.
#[derive(Debug, Clone, Default)]
pub struct KmerCounts {
    k: usize,
    counts: HashMap<u128, u32>,
}

fn base_bits(b: u8) -> u128 {
    match b {
        b'A' => 0,
        b'C' => 1,
        b'G' => 2,
        _ => 3,
    }
}

fn kmer_key(kmer: &[u8]) -> u128 {
    kmer.iter().fold(0u128, |acc, &b| (acc << 2) | base_bits(b))
}

impl KmerCounts {
    /// Count the k-mers of `dna`.
    pub fn new(k: usize, dna: &[u8]) -> Self {
        let mut counts = HashMap::new();
        for kmer in dna.windows(k) {
            *counts.entry(kmer_key(kmer)).or_insert(0) += 1;
        }
        Self { k, counts }
    }

    /// How the repeat severity (occurrences beyond the first, summed over k-mers) changes when
    /// `dna[from..to]` is replaced by `new[from..to]` (same length, everything else equal).
    pub fn severity_change(&self, old: &[u8], new: &[u8], from: usize, to: usize) -> i64 {
        let k = self.k;
        let first = from.saturating_sub(k - 1);
        let last = to.min((old.len() + 1).saturating_sub(k));
        let mut delta: HashMap<u128, i64> = HashMap::new();
        for start in first..last {
            *delta.entry(kmer_key(&old[start..start + k])).or_insert(0) -= 1;
            *delta.entry(kmer_key(&new[start..start + k])).or_insert(0) += 1;
        }
        let excess = |n: i64| (n - 1).max(0);
        delta
            .iter()
            .map(|(key, d)| {
                let n = i64::from(self.counts.get(key).copied().unwrap_or(0));
                excess(n + d) - excess(n)
            })
            .sum()
    }
}

impl Constraint {
    /// The repeat constraint's k, when it is one.
    pub fn repeat_k(&self) -> Option<usize> {
        match self {
            Constraint::MaxRepeat(n) => Some(n + 1),
            _ => None,
        }
    }

    /// The severity of this constraint's violations that a change of `dna[from..to]` can affect:
    /// sites starting within reach, GC windows overlapping it, runs touching it. For
    /// [`Constraint::MaxRepeat`], which is global, this is 0: use [`KmerCounts`].
    pub fn local_severity(&self, dna: &[u8], from: usize, to: usize) -> u64 {
        let n = dna.len();
        match self {
            Constraint::Avoid { pattern, .. } => {
                let reverse = pattern.reverse_complement();
                let first = from.saturating_sub(pattern.len() - 1);
                let last = to.min((n + 1).saturating_sub(pattern.len()));
                (first..last).filter(|&s| pattern.matches_at(dna, s) || reverse.matches_at(dna, s)).count() as u64
            }
            Constraint::GcWindow { window, min, max } => {
                let w = (*window).min(n);
                if w == 0 {
                    return 0;
                }
                let lowest = (min / 100.0 * w as f64).ceil() as u64;
                let highest = (max / 100.0 * w as f64).floor() as u64;
                let first = from.saturating_sub(w - 1);
                let last = to.min(n - w + 1);
                let is_gc = |b: u8| u64::from(matches!(b, b'G' | b'C'));
                let mut gc: u64 = dna[first..first + w].iter().map(|&b| is_gc(b)).sum();
                let mut total = 0;
                for start in first..last {
                    if start > first {
                        gc = gc + is_gc(dna[start + w - 1]) - is_gc(dna[start - 1]);
                    }
                    total += if gc < lowest { lowest - gc } else { gc.saturating_sub(highest) };
                }
                total
            }
            Constraint::MaxHomopolymer(max) => {
                let mut start = from.saturating_sub(1);
                while start > 0 && dna[start - 1] == dna[start] {
                    start -= 1;
                }
                let mut end = (to + 1).min(n);
                while end < n && end > 0 && dna[end] == dna[end - 1] {
                    end += 1;
                }
                let mut total = 0;
                let mut i = start;
                while i < end {
                    let run = dna[i..].iter().take_while(|&&b| b == dna[i]).count();
                    total += run.saturating_sub(*max) as u64;
                    i += run;
                }
                total
            }
            Constraint::MaxRepeat(_) => 0,
        }
    }
}

/// Every violation of every constraint.
pub fn violations(constraints: &[Constraint], dna: &[u8]) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        c.violations(i, dna, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(c: &Constraint, dna: &str) -> Vec<(usize, usize, u64)> {
        let mut out = Vec::new();
        c.violations(0, dna.as_bytes(), &mut out);
        out.into_iter().map(|v| (v.start, v.end, v.severity)).collect()
    }

    #[test]
    fn sites_are_found_on_both_strands_once() {
        let bsai = Constraint::sites("BsaI").unwrap().pop().unwrap();
        // GGTCTC forward at 2, GAGACC (reverse strand) at 10.
        assert_eq!(found(&bsai, "AAGGTCTCAAGAGACCAA"), [(2, 8, 1), (10, 16, 1)]);
        let ecori = Constraint::sites("EcoRI").unwrap().pop().unwrap();
        assert_eq!(found(&ecori, "TTGAATTCTT"), [(2, 8, 1)], "a palindrome counts once");
        assert!(matches!(Constraint::sites("BsaI,Nope"), Err(DesignError::UnknownEnzyme(n)) if n == "Nope"));
    }

    #[test]
    fn gc_windows_merge_and_measure_excess_in_nucleotides() {
        let c = Constraint::gc_window(4, 25.0, 75.0).unwrap();
        // Windows: GGGG (4 GC, max 3: excess 1), GGGA (3), GGAA, ... -> one region of one window.
        assert_eq!(found(&c, "GGGGAAAA"), [(0, 4, 1), (4, 8, 1)]);
        assert_eq!(found(&c, "GCATGCAT"), []);
        assert!(Constraint::gc_window(0, 10.0, 20.0).is_err() && Constraint::gc_window(10, 60.0, 40.0).is_err());
    }

    #[test]
    fn local_severities_change_as_the_global_ones_do() {
        let constraints = [
            Constraint::sites("BsaI,EcoRI").unwrap().remove(0),
            Constraint::motif("GAATTC").unwrap(),
            Constraint::gc_window(7, 30.0, 60.0).unwrap(),
            Constraint::MaxHomopolymer(2),
            Constraint::MaxRepeat(4),
        ];
        let mut x = 99u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as usize
        };
        for _ in 0..300 {
            let n = 30 + next() % 30;
            let old: Vec<u8> = (0..n).map(|_| b"ACGGT"[next() % 5]).collect();
            let (from, len) = (next() % (n - 3), 1 + next() % 3);
            let mut new = old.clone();
            for b in &mut new[from..from + len] {
                *b = b"ACGT"[next() % 4];
            }
            for (i, c) in constraints.iter().enumerate() {
                let total = |dna: &[u8]| {
                    let mut out = Vec::new();
                    c.violations(i, dna, &mut out);
                    out.iter().map(|v| v.severity as i64).sum::<i64>()
                };
                let local = match c.repeat_k() {
                    Some(k) => KmerCounts::new(k, &old).severity_change(&old, &new, from, from + len),
                    None => {
                        c.local_severity(&new, from, from + len) as i64
                            - c.local_severity(&old, from, from + len) as i64
                    }
                };
                assert_eq!(
                    local,
                    total(&new) - total(&old),
                    "{}: {} -> {}",
                    c.describe(),
                    String::from_utf8_lossy(&old),
                    String::from_utf8_lossy(&new)
                );
            }
        }
    }

    #[test]
    fn homopolymers_and_repeats() {
        assert_eq!(found(&Constraint::MaxHomopolymer(3), "AAAAACCCGTTTT"), [(0, 5, 2), (9, 13, 1)]);
        assert_eq!(found(&Constraint::MaxRepeat(3), "ACGTTTACGT"), [(6, 10, 1)]);
        assert_eq!(found(&Constraint::MaxRepeat(3), "AAAAA"), [(1, 5, 1)], "overlapping copies repeat too");
    }
}

/// The synthesis constraints a user asks for, as command-line flags or a request's fields give
/// them: the one place both become [`Constraint`]s (messages name the flags; the service turns
/// them into its fields' names).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConstraintSpec {
    /// Restriction enzymes whose sites to avoid on both strands, by name.
    pub avoid_sites: Vec<String>,
    /// Motifs to avoid on both strands, in IUPAC letters.
    pub avoid_motifs: Vec<String>,
    /// Window length (nucleotides) and the lowest and highest GC percentage in every window.
    pub gc_window: Option<(usize, f64, f64)>,
    /// Longest run of one base.
    pub max_homopolymer: Option<usize>,
    /// Longest exact repeat.
    pub max_repeat: Option<usize>,
}

impl ConstraintSpec {
    /// The constraints asked for, each checked (none: no repair).
    pub fn constraints(&self) -> Result<Vec<Constraint>> {
        let mut out = Constraint::sites(&self.avoid_sites.join(","))?;
        for motif in &self.avoid_motifs {
            out.push(Constraint::motif(motif)?);
        }
        if let Some((window, min, max)) = self.gc_window {
            out.push(Constraint::gc_window(window, min, max)?);
        }
        if let Some(n) = self.max_homopolymer {
            if n == 0 {
                return Err(DesignError::InvalidConstraint(format!("--max-homopolymer {n}: must be at least 1")));
            }
            out.push(Constraint::MaxHomopolymer(n));
        }
        if let Some(n) = self.max_repeat {
            out.push(Constraint::max_repeat(n)?);
        }
        Ok(out)
    }
}
