//! The training record of the upstream JSONL format.

use serde::{Deserialize, Serialize};

/// One line of a training file: `{"idx": int, "codons": merged tokens, "organism": id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainingRecord {
    /// Index of the record in the source data.
    pub idx: u64,
    /// Merged sequence, e.g. `M_ATG A_GCT __TAA`.
    pub codons: String,
    /// Organism id, 0..164.
    pub organism: u32,
}

impl TrainingRecord {
    /// The line as upstream's `json.dumps` writes it (`", "` and `": "` separators), so files
    /// made by either tool are byte-compatible.
    pub fn to_json_line(&self) -> String {
        let codons = serde_json::to_string(&self.codons).unwrap_or_else(|_| String::from("\"\""));
        format!("{{\"idx\": {}, \"codons\": {}, \"organism\": {}}}", self.idx, codons, self.organism)
    }

    /// Number of merged tokens (whitespace-separated words).
    pub fn num_tokens(&self) -> usize {
        self.codons.split_ascii_whitespace().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_matches_python_json_dumps() {
        let r = TrainingRecord { idx: 0, codons: "M_ATG R_AGG L_TTG L_CTA R_CGA __TAG".into(), organism: 51 };
        assert_eq!(r.to_json_line(), r#"{"idx": 0, "codons": "M_ATG R_AGG L_TTG L_CTA R_CGA __TAG", "organism": 51}"#);
        let back: TrainingRecord = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(back, r);
        assert_eq!(r.num_tokens(), 6);
    }
}
