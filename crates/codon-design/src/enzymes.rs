//! Recognition sequences of common Type II and Type IIS restriction enzymes (REBASE), for
//! `--avoid-sites`. Names are matched without regard to case.

/// (name, recognition sequence in IUPAC letters, 5'→3' on the top strand).
pub const ENZYMES: &[(&str, &str)] = &[
    // Type IIS, used in Golden Gate and similar assembly.
    ("AarI", "CACCTGC"),
    ("BbsI", "GAAGAC"),
    ("BsaI", "GGTCTC"),
    ("BsmAI", "GTCTC"),
    ("BsmBI", "CGTCTC"),
    ("BspMI", "ACCTGC"),
    ("BspQI", "GCTCTTC"),
    ("BtgZI", "GCGATG"),
    ("Esp3I", "CGTCTC"),
    ("FokI", "GGATG"),
    ("HgaI", "GACGC"),
    ("PaqCI", "CACCTGC"),
    ("SapI", "GCTCTTC"),
    // Type II.
    ("AflII", "CTTAAG"),
    ("AgeI", "ACCGGT"),
    ("ApaI", "GGGCCC"),
    ("AscI", "GGCGCGCC"),
    ("AvrII", "CCTAGG"),
    ("BamHI", "GGATCC"),
    ("BglII", "AGATCT"),
    ("BsrGI", "TGTACA"),
    ("ClaI", "ATCGAT"),
    ("EcoRI", "GAATTC"),
    ("EcoRV", "GATATC"),
    ("HindIII", "AAGCTT"),
    ("HpaI", "GTTAAC"),
    ("KpnI", "GGTACC"),
    ("MfeI", "CAATTG"),
    ("MluI", "ACGCGT"),
    ("NcoI", "CCATGG"),
    ("NdeI", "CATATG"),
    ("NheI", "GCTAGC"),
    ("NotI", "GCGGCCGC"),
    ("NsiI", "ATGCAT"),
    ("PacI", "TTAATTAA"),
    ("PstI", "CTGCAG"),
    ("SacI", "GAGCTC"),
    ("SalI", "GTCGAC"),
    ("ScaI", "AGTACT"),
    ("SfiI", "GGCCNNNNNGGCC"),
    ("SmaI", "CCCGGG"),
    ("SpeI", "ACTAGT"),
    ("SphI", "GCATGC"),
    ("StuI", "AGGCCT"),
    ("XbaI", "TCTAGA"),
    ("XhoI", "CTCGAG"),
    ("XmaI", "CCCGGG"),
];

/// The recognition sequence of an enzyme by name (case-insensitive).
pub fn recognition_site(name: &str) -> Option<&'static str> {
    ENZYMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name.trim())).map(|(_, site)| *site)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_site_is_iupac_and_names_are_unique() {
        let mut names: Vec<String> = ENZYMES.iter().map(|(n, _)| n.to_lowercase()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENZYMES.len());
        assert!(ENZYMES.iter().all(|(_, site)| crate::iupac::Pattern::parse(site).is_some()));
        assert_eq!(recognition_site("bsai"), Some("GGTCTC"));
        assert_eq!(recognition_site("NoSuchI"), None);
    }
}
