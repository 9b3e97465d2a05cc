//! The 164 organisms of CodonTransformer (`ORGANISM2ID` upstream) with lookup by name
//! and by id. Ids are the positions of the names in alphabetical order; the id is the
//! `token_type_id` the model sees at every position.

use crate::error::{Result, VocabError};

/// Number of organisms, equal to the model's `type_vocab_size`.
pub const NUM_ORGANISMS: usize = 164;

/// Organism names indexed by id, spelled exactly as upstream (including the
/// upstream typo `Thermoccoccus kodakarensis`, id 140).
pub const ORGANISMS: [&str; NUM_ORGANISMS] = [
    "Arabidopsis thaliana",
    "Atlantibacter hermannii",
    "Bacillus subtilis",
    "Brenneria goodwinii",
    "Buchnera aphidicola (Schizaphis graminum)",
    "Caenorhabditis elegans",
    "Candidatus Erwinia haradaeae",
    "Candidatus Hamiltonella defensa 5AT (Acyrthosiphon pisum)",
    "Chlamydomonas reinhardtii",
    "Chlamydomonas reinhardtii chloroplast",
    "Citrobacter amalonaticus",
    "Citrobacter braakii",
    "Citrobacter cronae",
    "Citrobacter europaeus",
    "Citrobacter farmeri",
    "Citrobacter freundii",
    "Citrobacter koseri ATCC BAA-895",
    "Citrobacter portucalensis",
    "Citrobacter werkmanii",
    "Citrobacter youngae",
    "Cronobacter dublinensis subsp. dublinensis LMG 23823",
    "Cronobacter malonaticus LMG 23826",
    "Cronobacter sakazakii",
    "Cronobacter turicensis",
    "Danio rerio",
    "Dickeya dadantii 3937",
    "Dickeya dianthicola",
    "Dickeya fangzhongdai",
    "Dickeya solani",
    "Dickeya zeae",
    "Drosophila melanogaster",
    "Edwardsiella anguillarum ET080813",
    "Edwardsiella ictaluri",
    "Edwardsiella piscicida",
    "Edwardsiella tarda",
    "Enterobacter asburiae",
    "Enterobacter bugandensis",
    "Enterobacter cancerogenus",
    "Enterobacter chengduensis",
    "Enterobacter cloacae",
    "Enterobacter hormaechei",
    "Enterobacter kobei",
    "Enterobacter ludwigii",
    "Enterobacter mori",
    "Enterobacter quasiroggenkampii",
    "Enterobacter roggenkampii",
    "Enterobacter sichuanensis",
    "Erwinia amylovora CFBP1430",
    "Erwinia persicina",
    "Escherichia albertii",
    "Escherichia coli O157-H7 str. Sakai",
    "Escherichia coli general",
    "Escherichia coli str. K-12 substr. MG1655",
    "Escherichia fergusonii",
    "Escherichia marmotae",
    "Escherichia ruysiae",
    "Ewingella americana",
    "Hafnia alvei",
    "Hafnia paralvei",
    "Homo sapiens",
    "Kalamiella piersonii",
    "Klebsiella aerogenes",
    "Klebsiella grimontii",
    "Klebsiella michiganensis",
    "Klebsiella oxytoca",
    "Klebsiella pasteurii",
    "Klebsiella pneumoniae subsp. pneumoniae HS11286",
    "Klebsiella quasipneumoniae",
    "Klebsiella quasivariicola",
    "Klebsiella variicola",
    "Kosakonia cowanii",
    "Kosakonia radicincitans",
    "Leclercia adecarboxylata",
    "Lelliottia amnigena",
    "Lonsdalea populi",
    "Moellerella wisconsensis",
    "Morganella morganii",
    "Mus musculus",
    "Nicotiana tabacum",
    "Nicotiana tabacum chloroplast",
    "Obesumbacterium proteus",
    "Pantoea agglomerans",
    "Pantoea allii",
    "Pantoea ananatis PA13",
    "Pantoea dispersa",
    "Pantoea stewartii",
    "Pantoea vagans",
    "Pectobacterium aroidearum",
    "Pectobacterium atrosepticum",
    "Pectobacterium brasiliense",
    "Pectobacterium carotovorum",
    "Pectobacterium odoriferum",
    "Pectobacterium parmentieri",
    "Pectobacterium polaris",
    "Pectobacterium versatile",
    "Photorhabdus laumondii subsp. laumondii TTO1",
    "Plesiomonas shigelloides",
    "Pluralibacter gergoviae",
    "Proteus faecis",
    "Proteus mirabilis HI4320",
    "Proteus penneri",
    "Proteus terrae subsp. cibarius",
    "Proteus vulgaris",
    "Providencia alcalifaciens",
    "Providencia heimbachae",
    "Providencia rettgeri",
    "Providencia rustigianii",
    "Providencia stuartii",
    "Providencia thailandensis",
    "Pseudomonas putida",
    "Pyrococcus furiosus",
    "Pyrococcus horikoshii",
    "Pyrococcus yayanosii",
    "Rahnella aquatilis CIP 78.65 = ATCC 33071",
    "Raoultella ornithinolytica",
    "Raoultella planticola",
    "Raoultella terrigena",
    "Rosenbergiella epipactidis",
    "Rouxiella badensis",
    "Saccharolobus solfataricus",
    "Saccharomyces cerevisiae",
    "Salmonella bongori N268-08",
    "Salmonella enterica subsp. enterica serovar Typhimurium str. LT2",
    "Serratia bockelmannii",
    "Serratia entomophila",
    "Serratia ficaria",
    "Serratia fonticola",
    "Serratia grimesii",
    "Serratia liquefaciens",
    "Serratia marcescens",
    "Serratia nevei",
    "Serratia plymuthica AS9",
    "Serratia proteamaculans",
    "Serratia quinivorans",
    "Serratia rubidaea",
    "Serratia ureilytica",
    "Shigella boydii",
    "Shigella dysenteriae",
    "Shigella flexneri 2a str. 301",
    "Shigella sonnei",
    "Thermoccoccus kodakarensis",
    "Thermococcus barophilus MPT",
    "Thermococcus chitonophagus",
    "Thermococcus gammatolerans",
    "Thermococcus litoralis",
    "Thermococcus onnurineus",
    "Thermococcus sibiricus",
    "Xenorhabdus bovienii str. feltiae Florida",
    "Yersinia aldovae 670-83",
    "Yersinia aleksiciae",
    "Yersinia alsatica",
    "Yersinia enterocolitica",
    "Yersinia frederiksenii ATCC 33641",
    "Yersinia intermedia",
    "Yersinia kristensenii",
    "Yersinia massiliensis CCUG 53443",
    "Yersinia mollaretii ATCC 43969",
    "Yersinia pestis A1122",
    "Yersinia proxima",
    "Yersinia pseudotuberculosis IP 32953",
    "Yersinia rochesterensis",
    "Yersinia rohdei",
    "Yersinia ruckeri",
    "Yokenella regensburgei",
];

/// Upstream's default organism (id 51), for synthetic batches and preflight predictions.
pub const DEFAULT_ORGANISM: &str = "Escherichia coli general";

/// An organism given by the user: a name or an id. In JSON, a number is an id and a string is
/// read as [`OrganismRef::parse`] reads a CSV field (`"51"` is the id 51, as in the CSV commands).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged, from = "OrganismField")]
pub enum OrganismRef {
    /// An id, 0..164.
    Id(i64),
    /// A name exactly as in [`ORGANISMS`].
    Name(String),
}

impl OrganismRef {
    /// Resolve to an id: a known name, or an id below [`NUM_ORGANISMS`].
    pub fn resolve(&self) -> Result<u32> {
        match self {
            OrganismRef::Id(id) => organism_name(*id).map(|_| *id as u32),
            OrganismRef::Name(name) => organism_id(name),
        }
    }
}

/// An organism as JSON writes it, before a string is parsed.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum OrganismField {
    Id(i64),
    Text(String),
}

impl From<OrganismField> for OrganismRef {
    fn from(field: OrganismField) -> Self {
        match field {
            OrganismField::Id(id) => OrganismRef::Id(id),
            OrganismField::Text(text) => OrganismRef::parse(&text),
        }
    }
}

impl From<&str> for OrganismRef {
    fn from(s: &str) -> Self {
        OrganismRef::Name(s.to_string())
    }
}

impl From<u32> for OrganismRef {
    fn from(id: u32) -> Self {
        OrganismRef::Id(id as i64)
    }
}

/// The id of an organism name (exact match). An unknown name is an error that suggests close names.
pub fn organism_id(name: &str) -> Result<u32> {
    ORGANISMS.binary_search(&name).map(|i| i as u32).map_err(|_| unknown_name(name, &ORGANISMS))
}

/// The name of an organism id. An id outside 0..164 is an error.
pub fn organism_name(id: i64) -> Result<&'static str> {
    usize::try_from(id).ok().and_then(|i| ORGANISMS.get(i).copied()).ok_or(VocabError::UnknownOrganismId { id })
}

impl OrganismRef {
    /// A command-line or CSV organism field: an integer is an id, anything else a name (trimmed).
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        match text.parse::<i64>() {
            Ok(id) => OrganismRef::Id(id),
            Err(_) => OrganismRef::Name(text.to_string()),
        }
    }
}

/// Resolve a command-line or CSV organism field against the built-in organisms.
pub fn parse_organism(text: &str) -> Result<u32> {
    OrganismRef::parse(text).resolve()
}

/// The most characters of an unknown name an error repeats.
const SHOWN_NAME_CHARS: usize = 100;

/// The error for a name not in `known`: the name cut to [`SHOWN_NAME_CHARS`], with close names.
fn unknown_name<S: AsRef<str>>(name: &str, known: &[S]) -> VocabError {
    let shown = match name.char_indices().nth(SHOWN_NAME_CHARS) {
        Some((cut, _)) => format!("{}… ({} bytes)", &name[..cut], name.len()),
        None => name.to_string(),
    };
    VocabError::UnknownOrganismName { name: shown, suggestions: close_names(name, known) }
}

/// Up to three of `known` closest to `name` (case-insensitive Jaro-Winkler, then substring
/// matches). A name over twice the longest known one's length is close to none: comparing it
/// would cost time in proportion to its length, for every known name.
fn close_names<S: AsRef<str>>(name: &str, known: &[S]) -> Vec<String> {
    let longest = known.iter().map(|k| k.as_ref().len()).max().unwrap_or(0);
    if name.len() > 2 * longest {
        return Vec::new();
    }
    let query = name.to_lowercase();
    let mut scored: Vec<(f64, &str)> = known
        .iter()
        .map(|candidate| {
            let candidate = candidate.as_ref();
            let lower = candidate.to_lowercase();
            let mut score = strsim::jaro_winkler(&query, &lower);
            if !query.is_empty() && lower.contains(&query) {
                score += 1.0;
            }
            (score, candidate)
        })
        .filter(|(score, _)| *score > 0.75)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(3).map(|(_, n)| n.to_string()).collect()
}

/// The organisms a model knows, by id: the built-in 164, or the table stored beside a model that
/// was taught more (`organisms.json`, a JSON list of names whose index is the id). A stored table
/// starts with the built-in names in their order, so every built-in id keeps its meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrganismTable {
    names: Vec<String>,
}

impl Default for OrganismTable {
    fn default() -> Self {
        Self { names: ORGANISMS.iter().map(|n| n.to_string()).collect() }
    }
}

impl OrganismTable {
    /// The file name of a stored table in a model directory.
    pub const FILE: &'static str = "organisms.json";

    /// The built-in 164.
    pub fn builtin() -> Self {
        Self::default()
    }

    /// A table from names: the built-in ones first, in order, then new ones, none twice.
    pub fn from_names(names: Vec<String>) -> Result<Self> {
        if names.len() < NUM_ORGANISMS || names.iter().zip(ORGANISMS).any(|(a, b)| a != b) {
            return Err(VocabError::OrganismTable(format!(
                "an organism table must start with the {NUM_ORGANISMS} built-in organisms in their order"
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = names.iter().find(|n| !seen.insert(n.as_str())) {
            return Err(VocabError::OrganismTable(format!("organism {twice:?} appears twice in the organism table")));
        }
        if let Some(blank) = names.iter().position(|n| n.trim().is_empty() || n.trim() != n) {
            return Err(VocabError::OrganismTable(format!(
                "organism {blank}: a name must be non-empty, without surrounding spaces"
            )));
        }
        Ok(Self { names })
    }

    /// The table stored in a model directory, or the built-in one when the model has none (a
    /// checkpoint file: the table beside it).
    pub fn for_model(model: &std::path::Path) -> Result<Self> {
        let dir = if model.is_dir() { model } else { codon_files::parent_dir(model) };
        let path = dir.join(Self::FILE);
        if !path.exists() {
            return Ok(Self::builtin());
        }
        let io = |source| VocabError::Io { path: path.clone(), source };
        let text = std::fs::read_to_string(&path).map_err(io)?;
        let names: Vec<String> = serde_json::from_str(&text).map_err(|e| {
            VocabError::OrganismTable(format!("{}: not a JSON list of organism names: {e}", path.display()))
        })?;
        Self::from_names(names)
    }

    /// Write the table into a model directory, atomically.
    pub fn save(&self, dir: &std::path::Path) -> Result<()> {
        let text = serde_json::to_string_pretty(&self.names).map_err(|e| VocabError::OrganismTable(e.to_string()))?;
        Ok(codon_files::write_atomically(&dir.join(Self::FILE), |w| std::io::Write::write_all(w, text.as_bytes()))?)
    }

    /// Number of organisms (the `type_vocab_size` a model needs).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Never true: a table holds at least the built-in organisms.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every name, by id.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The name of an id.
    pub fn name(&self, id: i64) -> Result<&str> {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.names.get(i))
            .map(String::as_str)
            .ok_or(VocabError::UnknownOrganismId { id })
    }

    /// The id of a name (exact match); an unknown name suggests close ones from this table.
    pub fn id(&self, name: &str) -> Result<u32> {
        self.names.iter().position(|n| n == name).map(|i| i as u32).ok_or_else(|| unknown_name(name, &self.names))
    }

    /// Resolve a name or an id.
    pub fn resolve(&self, organism: &OrganismRef) -> Result<u32> {
        match organism {
            OrganismRef::Id(id) => self.name(*id).map(|_| *id as u32),
            OrganismRef::Name(name) => self.id(name),
        }
    }

    /// This table with one more organism, and its id (the next free one).
    pub fn with_organism(&self, name: &str) -> Result<(Self, u32)> {
        // A number would be read as an id, and a name that differs only in case as the other organism.
        if name.trim().parse::<i64>().is_ok() {
            return Err(VocabError::OrganismTable(format!(
                "new organism {name:?}: a number names an organism id; give the organism a name"
            )));
        }
        if let Some(known) = self.names.iter().find(|n| n.to_lowercase() == name.trim().to_lowercase()) {
            return Err(VocabError::OrganismTable(format!(
                "new organism {name:?}: the model already knows {known:?} (names are compared without case)"
            )));
        }
        let mut names = self.names.clone();
        names.push(name.to_string());
        let table = Self::from_names(names)?;
        Ok((table, (self.names.len()) as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_organism_is_neither_a_number_nor_a_known_name_in_other_case() {
        let table = OrganismTable::builtin();
        let err = table.with_organism("42").unwrap_err().to_string();
        assert!(err.contains("a number names an organism id"), "{err}");
        let err = table.with_organism("homo sapiens").unwrap_err().to_string();
        assert!(err.contains("already knows \"Homo sapiens\""), "{err}");
        let (taught, id) = table.with_organism("Nova organism").unwrap();
        assert_eq!((id as usize, taught.len()), (NUM_ORGANISMS, NUM_ORGANISMS + 1));
    }

    #[test]
    fn names_are_sorted_and_unique_so_ids_match_upstream() {
        assert!(ORGANISMS.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(organism_id("Arabidopsis thaliana").unwrap(), 0);
        assert_eq!(organism_id("Escherichia coli general").unwrap(), 51);
        assert_eq!(organism_id("Homo sapiens").unwrap(), 59);
        assert_eq!(organism_id("Mus musculus").unwrap(), 77);
        assert_eq!(organism_id("Saccharomyces cerevisiae").unwrap(), 120);
        assert_eq!(organism_id("Thermoccoccus kodakarensis").unwrap(), 140);
        assert_eq!(organism_id("Yokenella regensburgei").unwrap(), 163);
        for (id, name) in ORGANISMS.iter().enumerate() {
            assert_eq!(organism_name(id as i64).unwrap(), *name);
        }
    }

    #[test]
    fn unknown_name_suggests_close_names() {
        let err = organism_id("Escherichia coli").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("Invalid organism name: Escherichia coli. Please use a valid organism name or ID."),
            "{msg}"
        );
        assert!(msg.contains("Escherichia coli general"), "{msg}");
        let err = organism_id("homo sapiens").unwrap_err().to_string();
        assert!(err.contains("Did you mean: Homo sapiens"), "{err}");
        let err = organism_id("zzzzqqqq").unwrap_err().to_string();
        assert!(!err.contains("Did you mean"), "{err}");
    }

    #[test]
    fn long_unknown_names_are_cut_and_compared_with_nothing() {
        // Jaro-Winkler suggested Homo sapiens for this; a megabyte of name took seconds per lookup.
        let err = organism_id(&"Homo sapiens".repeat(20)).unwrap_err().to_string();
        assert!(!err.contains("Did you mean"), "{err}");
        let huge = "x".repeat(1 << 20);
        for err in [organism_id(&huge).unwrap_err(), OrganismTable::builtin().id(&huge).unwrap_err()] {
            let msg = err.to_string();
            assert!(msg.len() < 300 && msg.contains("… (1048576 bytes)"), "{}", &msg[..300.min(msg.len())]);
        }
    }

    #[test]
    fn unknown_id_is_an_error() {
        for id in [164, -1, 1000] {
            let msg = organism_name(id).unwrap_err().to_string();
            assert_eq!(msg, format!("Invalid organism ID: {id}. Please use a valid organism name or ID."));
        }
    }

    #[test]
    fn parse_organism_accepts_ids_and_names() {
        assert_eq!(parse_organism("51").unwrap(), 51);
        assert_eq!(parse_organism(" Homo sapiens ").unwrap(), 59);
        assert!(parse_organism("164").is_err());
        let r: OrganismRef = serde_json::from_str("\"Homo sapiens\"").unwrap();
        assert_eq!(r.resolve().unwrap(), 59);
        let r: OrganismRef = serde_json::from_str("0").unwrap();
        assert_eq!(r.resolve().unwrap(), 0);
        let r: OrganismRef = serde_json::from_str("\"51\"").unwrap();
        assert_eq!(r, OrganismRef::Id(51), "a quoted id is an id, as in a CSV field");
        let empty = parse_organism(" ").unwrap_err().to_string();
        assert!(empty.starts_with("No organism given (the name is empty)"), "{empty}");
        assert!(parse_organism("Homo sapien")
            .unwrap_err()
            .to_string()
            .starts_with("Invalid organism name: Homo sapien."));
    }
}
