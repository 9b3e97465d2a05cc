//! Codon-usage tables users bring: Kazusa's codon usage database layout
//! (`UUU 17.6(714298)  UCU 15.2(618711) …`, the count in parentheses) and GCG's `.cod` layout
//! (`AmAcid  Codon  Number  /1000  Fraction` columns). U and T are the same base.

use std::path::Path;

use crate::counts::CodonCounts;
use crate::error::{EvalError, Result};
use crate::genetic_code::{codon_index, codon_text};

/// Read the 64 codon counts of a Kazusa or GCG table. Every codon must appear exactly once.
pub fn read_codon_usage(path: &Path) -> Result<CodonCounts> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io { path: path.to_path_buf(), source })?;
    parse_codon_usage(&text).map_err(|(line, detail)| match line {
        0 => EvalError::MalformedFile { path: path.to_path_buf(), detail },
        line => EvalError::Malformed { path: path.to_path_buf(), line, detail },
    })
}

/// [`read_codon_usage`] on text; errors carry a 1-based line (0: the table as a whole).
pub fn parse_codon_usage(text: &str) -> std::result::Result<CodonCounts, (usize, String)> {
    let gcg = text.lines().any(|l| l.split_whitespace().any(|w| w.eq_ignore_ascii_case("AmAcid")));
    let mut counts = [None::<f64>; 64];
    for (i, line) in text.lines().enumerate() {
        let found = if gcg { gcg_line(line) } else { kazusa_line(line) };
        for (codon, count) in found.map_err(|detail| (i + 1, detail))? {
            if !(count.is_finite() && count >= 0.0) {
                return Err((
                    i + 1,
                    format!("codon {}: count {count} is not a non-negative number", codon_text(codon)),
                ));
            }
            if counts[codon].replace(count).is_some() {
                return Err((i + 1, format!("codon {} appears twice", codon_text(codon))));
            }
        }
    }
    let missing: Vec<&str> = (0..64).filter(|&c| counts[c].is_none()).map(codon_text).collect();
    if !missing.is_empty() {
        let layout = if gcg { "GCG" } else { "Kazusa" };
        return Err((0, format!("{layout} codon-usage table lacks {} codons: {}", missing.len(), missing.join(" "))));
    }
    Ok(CodonCounts::from_array(counts.map(|c| c.unwrap_or(0.0))))
}

/// A word that is a codon (U read as T), as its index.
fn as_codon(word: &str) -> Option<usize> {
    let bytes: Vec<u8> =
        word.bytes().map(|b| if b.eq_ignore_ascii_case(&b'U') { b'T' } else { b.to_ascii_uppercase() }).collect();
    codon_index(&bytes)
}

/// Kazusa: each codon is followed, on its line, by its count in parentheses.
fn kazusa_line(line: &str) -> std::result::Result<Vec<(usize, f64)>, String> {
    let spaced = line.replace('(', " ( ").replace(')', " ) ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let mut found = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let Some(codon) = as_codon(word) else { continue };
        let rest = &words[i + 1..];
        let next_codon = rest.iter().position(|w| as_codon(w).is_some()).unwrap_or(rest.len());
        let open = rest[..next_codon].iter().position(|w| *w == "(");
        let count = open.and_then(|o| rest.get(o + 1)).and_then(|w| w.parse::<f64>().ok());
        let count = count.ok_or_else(|| format!("codon {word}: no count in parentheses after it"))?;
        found.push((codon, count));
    }
    Ok(found)
}

/// GCG: a row is `AmAcid Codon Number /1000 Fraction`; other lines are headers or comments.
fn gcg_line(line: &str) -> std::result::Result<Vec<(usize, f64)>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        [_, codon, number, ..] => match as_codon(codon) {
            Some(index) => {
                let count =
                    number.parse::<f64>().map_err(|_| format!("codon {codon}: Number {number:?} is not a number"))?;
                Ok(vec![(index, count)])
            }
            None => Ok(Vec::new()),
        },
        _ => Ok(Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kazusa_text() -> String {
        let mut text = String::from("Homo sapiens [gbpri]: 93487 CDS's (40662582 codons)\n\n");
        for first in "UCAG".chars() {
            for third in "UCAG".chars() {
                let cells: Vec<String> = "UCAG"
                    .chars()
                    .map(|second| {
                        let codon: String = [first, second, third].iter().collect();
                        let n = as_codon(&codon).unwrap();
                        format!("{codon} {:4.1}({:6})", n as f64 / 10.0, 100 + n)
                    })
                    .collect();
                text.push_str(&cells.join("  "));
                text.push('\n');
            }
        }
        text
    }

    #[test]
    fn kazusa_counts_come_from_the_parentheses() {
        let counts = parse_codon_usage(&kazusa_text()).unwrap();
        for c in 0..64 {
            assert_eq!(counts.get(c), 100.0 + c as f64, "{}", codon_text(c));
        }
    }

    #[test]
    fn gcg_counts_come_from_the_number_column() {
        let mut text = String::from("AmAcid  Codon     Number    /1000     Fraction   ..\n\n");
        for c in 0..64 {
            text.push_str(&format!("Xxx     {}     {}.00     1.00      0.50\n", codon_text(c), 7 * c));
        }
        let counts = parse_codon_usage(&text).unwrap();
        assert_eq!(counts.get(63), 441.0);
        assert_eq!(counts.get(0), 0.0);
    }

    #[test]
    fn incomplete_or_repeated_tables_are_refused() {
        let text = kazusa_text().replace("UUU", "NNN");
        let (line, detail) = parse_codon_usage(&text).unwrap_err();
        assert_eq!(line, 0);
        assert!(detail.contains("lacks 1 codons: TTT"), "{detail}");
        let text = kazusa_text().replace("UUC", "UUU");
        assert!(parse_codon_usage(&text).unwrap_err().1.contains("TTT appears twice"));
        let text = kazusa_text().replace("(   100)", "");
        assert!(parse_codon_usage(&text).unwrap_err().1.contains("no count in parentheses"));
    }
}
