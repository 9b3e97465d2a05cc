//! Sequence complexity (`get_sequence_complexity` upstream): distinct substrings over the most
//! a sequence of that length could have.

/// `(D / (S(n−1) + min(n, 4))) · 100`, where D is the number of distinct non-empty substrings
/// and S(x) = x(x+1)/2 for x ≥ 1, and 1 below (upstream's recursive `sum_up_to`).
///
/// Upstream materialises every substring (O(n³)) and recurses n deep, so DNA of about 1,000
/// nucleotides and more fails with `RecursionError`. Here D comes from a suffix automaton:
/// O(n) time and memory, the same number.
pub fn complexity(text: &str) -> f64 {
    let n = text.len() as u64;
    let distinct = distinct_substrings(text.as_bytes());
    let sum_up_to = |x: u64| if x >= 1 { x * (x + 1) / 2 } else { 1 };
    (distinct as f64 / (sum_up_to(n.saturating_sub(1)) + n.min(4)) as f64) * 100.0
}

/// Distinct non-empty substrings (of bytes): the sum over the suffix automaton's states of
/// `len(state) − len(link(state))`. Transitions are a flat table over the text's own alphabet
/// (4 symbols for DNA), at most 2n states.
fn distinct_substrings(text: &[u8]) -> u64 {
    const NONE: u32 = u32::MAX;
    let mut symbol = [u8::MAX; 256];
    let mut k = 0usize;
    for &b in text {
        if symbol[b as usize] == u8::MAX {
            symbol[b as usize] = k as u8;
            k += 1;
        }
    }
    let capacity = 2 * text.len() + 1;
    let (mut len, mut link): (Vec<u32>, Vec<u32>) = (Vec::with_capacity(capacity), Vec::with_capacity(capacity));
    let mut next: Vec<u32> = Vec::with_capacity(capacity * k);
    // The initial state: the empty string.
    len.push(0);
    link.push(NONE);
    next.extend(std::iter::repeat_n(NONE, k));
    let mut last = 0usize;
    for &b in text {
        let b = symbol[b as usize] as usize;
        let current = len.len();
        len.push(len[last] + 1);
        link.push(0);
        next.extend(std::iter::repeat_n(NONE, k));
        let mut p = last as u32;
        while p != NONE && next[p as usize * k + b] == NONE {
            next[p as usize * k + b] = current as u32;
            p = link[p as usize];
        }
        if p != NONE {
            let q = next[p as usize * k + b] as usize;
            if len[p as usize] + 1 == len[q] {
                link[current] = q as u32;
            } else {
                let clone = len.len();
                len.push(len[p as usize] + 1);
                link.push(link[q]);
                next.extend_from_within(q * k..q * k + k);
                while p != NONE && next[p as usize * k + b] == q as u32 {
                    next[p as usize * k + b] = clone as u32;
                    p = link[p as usize];
                }
                link[q] = clone as u32;
                link[current] = clone as u32;
            }
        }
        last = current;
    }
    (1..len.len()).map(|v| u64::from(len[v] - len[link[v] as usize])).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn brute_force(text: &[u8]) -> u64 {
        let mut seen = BTreeSet::new();
        for i in 0..text.len() {
            for j in i + 1..=text.len() {
                seen.insert(&text[i..j]);
            }
        }
        seen.len() as u64
    }

    #[test]
    fn the_automaton_counts_what_enumeration_counts() {
        let mut x = 12345u64;
        for len in [1usize, 2, 3, 7, 30, 90, 200] {
            let text: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    b"ACGT"[(x >> 62) as usize]
                })
                .collect();
            assert_eq!(distinct_substrings(&text), brute_force(&text), "{}", String::from_utf8_lossy(&text));
        }
        assert_eq!(distinct_substrings(b"AAAAAAAAAA"), 10);
    }
}
