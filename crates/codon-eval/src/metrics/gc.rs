//! GC content (`get_GC_content` upstream).

/// Percentage of G and C, either case, over every character; NaN for an empty text.
///
/// Upstream counts upper-case letters only, and its `lower=True` lower-cases first, so it always
/// gives 0; here case never matters.
pub fn gc_content(dna: &str) -> f64 {
    let gc = dna.bytes().filter(|b| matches!(b.to_ascii_uppercase(), b'G' | b'C')).count();
    gc as f64 / dna.len() as f64 * 100.0
}
