//! The CodonTransformer vocabulary: 90 merged tokens, the masking table and the
//! amino-acid → codon-token table, kept as data in code.
//!
//! Ids: 0–4 special tokens, 5–24 `x_unk` (the 20 amino acids in alphabetical order),
//! 25 `__unk` (stop with an unknown codon), 26–89 the 64 codons in A<C<G<T order,
//! each prefixed with the amino acid it encodes in the standard code (`_` for stops).

/// Number of tokens in the vocabulary.
pub const VOCAB_SIZE: usize = 90;
/// `[UNK]`: any word outside the vocabulary.
pub const UNK_ID: u32 = 0;
/// `[CLS]`: first token of every sequence.
pub const CLS_ID: u32 = 1;
/// `[SEP]`: last token of every sequence.
pub const SEP_ID: u32 = 2;
/// `[PAD]`: right padding in batches.
pub const PAD_ID: u32 = 3;
/// `[MASK]`: in the vocabulary but never produced (masking uses `x_unk` tokens).
pub const MASK_ID: u32 = 4;
/// Smallest id that the masked-LM collator may select (ids below are special).
pub const FIRST_MASKABLE_ID: u32 = 5;
/// Id of `__unk`, the stop symbol with an unknown codon.
pub const STOP_UNK_ID: u32 = 25;
/// Id of the first codon token (`k_aaa`).
pub const FIRST_CODON_ID: u32 = 26;
/// Id of the last codon token (`f_ttt`).
pub const LAST_CODON_ID: u32 = 89;
/// Longest encoded sequence, `[CLS]` and `[SEP]` included.
pub const MAX_LEN: usize = 2048;
/// Most residues (stop included) that fit in [`MAX_LEN`].
pub const MAX_AMINO_ACIDS: usize = MAX_LEN - 2;
/// The stop symbol of merged sequences.
pub const STOP_SYMBOL: char = '_';

/// The 90 tokens, indexed by id (`TOKEN2INDEX` upstream).
pub const VOCAB: [&str; VOCAB_SIZE] = [
    "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", //
    "a_unk", "c_unk", "d_unk", "e_unk", "f_unk", "g_unk", "h_unk", "i_unk", "k_unk", "l_unk", "m_unk", "n_unk",
    "p_unk", "q_unk", "r_unk", "s_unk", "t_unk", "v_unk", "w_unk", "y_unk", "__unk", //
    "k_aaa", "n_aac", "k_aag", "n_aat", "t_aca", "t_acc", "t_acg", "t_act", //
    "r_aga", "s_agc", "r_agg", "s_agt", "i_ata", "i_atc", "m_atg", "i_att", //
    "q_caa", "h_cac", "q_cag", "h_cat", "p_cca", "p_ccc", "p_ccg", "p_cct", //
    "r_cga", "r_cgc", "r_cgg", "r_cgt", "l_cta", "l_ctc", "l_ctg", "l_ctt", //
    "e_gaa", "d_gac", "e_gag", "d_gat", "a_gca", "a_gcc", "a_gcg", "a_gct", //
    "g_gga", "g_ggc", "g_ggg", "g_ggt", "v_gta", "v_gtc", "v_gtg", "v_gtt", //
    "__taa", "y_tac", "__tag", "y_tat", "s_tca", "s_tcc", "s_tcg", "s_tct", //
    "__tga", "c_tgc", "w_tgg", "c_tgt", "l_tta", "f_ttc", "l_ttg", "f_ttt",
];

/// The special tokens, in id order.
pub const SPECIAL_TOKENS: [&str; 5] = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"];

/// `TOKEN2MASK` upstream: what the collator writes in place of a selected token.
/// A codon token becomes the `x_unk` token of its amino acid; ids 0–25 map to themselves.
pub const TOKEN2MASK: [u32; VOCAB_SIZE] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, //
    13, 16, 13, 16, 21, 21, 21, 21, 19, 20, 19, 20, 12, 12, 15, 12, //
    18, 11, 18, 11, 17, 17, 17, 17, 19, 19, 19, 19, 14, 14, 14, 14, //
    8, 7, 8, 7, 5, 5, 5, 5, 10, 10, 10, 10, 22, 22, 22, 22, //
    25, 24, 25, 24, 20, 20, 20, 20, 25, 6, 23, 6, 14, 9, 14, 9,
];

/// The token of an id, if the id is in the vocabulary.
pub fn token(id: u32) -> Option<&'static str> {
    VOCAB.get(id as usize).copied()
}

/// The id of a (lower-case) token, if it is in the vocabulary.
pub fn token_id(token: &str) -> Option<u32> {
    VOCAB.iter().position(|t| *t == token).map(|i| i as u32)
}

/// Whether `id` is one of the 64 codon tokens.
pub fn is_codon_id(id: u32) -> bool {
    (FIRST_CODON_ID..=LAST_CODON_ID).contains(&id)
}

/// The codon (upper case, e.g. `b"ATG"`) of a codon token id.
pub fn codon_of(id: u32) -> Option<[u8; 3]> {
    if !is_codon_id(id) {
        return None;
    }
    let t = VOCAB[id as usize].as_bytes();
    Some([t[2].to_ascii_uppercase(), t[3].to_ascii_uppercase(), t[4].to_ascii_uppercase()])
}

/// The upper-case codon of an index 0..64 (A<C<G<T order): the inverse of [`codon_index`].
pub fn codon_at(index: usize) -> Option<[u8; 3]> {
    u32::try_from(index).ok().filter(|&i| i < 64).and_then(|i| codon_of(FIRST_CODON_ID + i))
}

/// Index 0..64 of an upper-case ACGT codon in A<C<G<T order, or `None` for anything else.
pub fn codon_index(codon: &[u8]) -> Option<usize> {
    if codon.len() != 3 {
        return None;
    }
    codon.iter().try_fold(0usize, |acc, b| {
        let v = match b {
            b'A' => 0,
            b'C' => 1,
            b'G' => 2,
            b'T' => 3,
            _ => return None,
        };
        Some(acc * 4 + v)
    })
}

/// The amino acid (upper case, `_` for stop) that an ACGT codon encodes in the
/// standard genetic code (NCBI tables 1 and 11 translate identically).
pub fn translate_codon(codon: &[u8]) -> Option<char> {
    codon_index(codon).map(|i| VOCAB[FIRST_CODON_ID as usize + i].as_bytes()[0].to_ascii_uppercase() as char)
}

/// `AMINO_ACID_TO_INDEX` upstream: the codon-token ids that encode an amino acid
/// (upper case; `_` gives the three stops; `*` and unknown letters give none).
pub fn codon_ids_for(amino_acid: char) -> &'static [u32] {
    const TABLE: [(char, &[u32]); 21] = [
        ('A', &[62, 63, 64, 65]),
        ('C', &[83, 85]),
        ('D', &[59, 61]),
        ('E', &[58, 60]),
        ('F', &[87, 89]),
        ('G', &[66, 67, 68, 69]),
        ('H', &[43, 45]),
        ('I', &[38, 39, 41]),
        ('K', &[26, 28]),
        ('L', &[54, 55, 56, 57, 86, 88]),
        ('M', &[40]),
        ('N', &[27, 29]),
        ('P', &[46, 47, 48, 49]),
        ('Q', &[42, 44]),
        ('R', &[34, 36, 50, 51, 52, 53]),
        ('S', &[35, 37, 78, 79, 80, 81]),
        ('T', &[30, 31, 32, 33]),
        ('V', &[70, 71, 72, 73]),
        ('W', &[84]),
        ('Y', &[75, 77]),
        ('_', &[74, 76, 82]),
    ];
    TABLE.iter().find(|(aa, _)| *aa == amino_acid).map_or(&[], |(_, ids)| ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codon_tokens_follow_acgt_order() {
        let bases = ['a', 'c', 'g', 't'];
        for i in 0..64 {
            let codon: String = [bases[i / 16], bases[(i / 4) % 4], bases[i % 4]].iter().collect();
            assert_eq!(&VOCAB[26 + i][2..], codon, "codon {i}");
        }
    }

    #[test]
    fn token2mask_maps_codons_to_their_amino_acid_unk() {
        for id in 0..VOCAB_SIZE as u32 {
            let masked = TOKEN2MASK[id as usize];
            if is_codon_id(id) {
                let aa = &VOCAB[id as usize][..1];
                assert_eq!(VOCAB[masked as usize], format!("{aa}_unk"));
            } else {
                assert_eq!(masked, id);
            }
        }
    }

    #[test]
    fn amino_acid_table_matches_token_prefixes() {
        for aa in "ACDEFGHIKLMNPQRSTVWY_".chars() {
            let expected: Vec<u32> = (FIRST_CODON_ID..=LAST_CODON_ID)
                .filter(|&id| VOCAB[id as usize].starts_with(aa.to_ascii_lowercase()))
                .collect();
            assert_eq!(codon_ids_for(aa), expected.as_slice(), "{aa}");
        }
        assert!(codon_ids_for('*').is_empty());
        assert_eq!(
            codon_ids_for('_').len()
                + (0..20).map(|i| codon_ids_for("ACDEFGHIKLMNPQRSTVWY".as_bytes()[i] as char).len()).sum::<usize>(),
            64
        );
    }

    #[test]
    fn translation_uses_the_standard_code() {
        assert_eq!(translate_codon(b"ATG"), Some('M'));
        assert_eq!(translate_codon(b"TGA"), Some('_'));
        assert_eq!(translate_codon(b"TGG"), Some('W'));
        assert_eq!(translate_codon(b"AGG"), Some('R'));
        assert_eq!(translate_codon(b"ATN"), None);
        assert_eq!(codon_of(40), Some(*b"ATG"));
        assert_eq!(codon_of(25), None);
    }
}
