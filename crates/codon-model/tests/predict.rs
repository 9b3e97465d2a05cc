//! Prediction on the tiny fixture model (random weights, CodonTransformer's vocabulary and
//! organism table): validation, match_protein, sampling, batches and long proteins.

use std::path::PathBuf;

use candle_core::{DType, Device};
use codon_model::bigbird::load_model;
use codon_model::bigbird::model::TOKEN_TYPE_EMBEDDINGS;
use codon_model::vocab::translate_codon;
use codon_model::{OrganismRef, PredictOptions, Predictor};

fn predictor() -> Predictor {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    Predictor::new(load_model(dir, None, &Device::Cpu, DType::F32).unwrap()).unwrap()
}

fn translate(dna: &str) -> String {
    dna.as_bytes().chunks(3).map(|c| translate_codon(c).unwrap()).collect()
}

fn expected_protein(p: &str) -> String {
    let mut p = p.replace('*', "_");
    if !p.ends_with('_') {
        p.push('_');
    }
    p
}

fn sampling(temperature: f64, seed: u64) -> PredictOptions {
    PredictOptions { deterministic: false, temperature, match_protein: true, seed, ..Default::default() }
}

#[test]
fn match_protein_always_translates_back() {
    let p = predictor();
    // The upstream test set, plus internal stops and '*'.
    let proteins = [
        "QQQQQQQQQQQQQQQQ_",
        "KRKRKRKRKRKRKRKR_",
        "PGPGPGPGPGPGPGPG_",
        "DEDEDEDEDEDEDEDEDE_",
        "M_M_M_M_M_",
        "MMMMMMMMMM_",
        "WWWWWWWWWW_",
        "CCCCCCCCCC_",
        "MWCHMWCHMWCH_",
        "Q_QQ_QQQ_QQQQ_",
        "MWMWMWMWMWMW_",
        "CCCHHHMMMWWW_",
        "_",
        "M_",
        "MGWC_",
        "MWLLLMWLLL",
        "M*KV*",
    ];
    for protein in proteins {
        for options in [PredictOptions { match_protein: true, ..Default::default() }, sampling(20.0, 7)] {
            let out = p.predict(protein, "Homo sapiens", &options).unwrap();
            assert_eq!(out.len(), 1);
            let dna = &out[0].predicted_dna;
            assert!(dna.bytes().all(|b| b"ACGT".contains(&b)), "{protein}: {dna}");
            assert_eq!(translate(dna), expected_protein(protein), "{protein}");
        }
    }
}

#[test]
fn predictions_are_acgt_codons_one_per_residue() {
    let p = predictor();
    let out = p.predict("MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVE", 51u32, &PredictOptions::default()).unwrap();
    let dna = &out[0].predicted_dna;
    assert_eq!(dna.len(), 3 * 38);
    assert!(dna.bytes().all(|b| b"ACGT".contains(&b)));
    assert_eq!(out[0].organism, "Escherichia coli general");
    assert_eq!(out[0].processed_input.split(' ').count(), 38);
    // Deterministic calls agree.
    let again =
        p.predict("MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVE", "Escherichia coli general", &PredictOptions::default());
    assert_eq!(again.unwrap(), out);
}

#[test]
fn sampling_is_seeded_and_top_p_narrows_it() {
    let p = predictor();
    let protein = "MFWYMFWYLLLLSSSSRRRR";
    let opts =
        PredictOptions { deterministic: false, temperature: 1.0, num_sequences: 6, seed: 3, ..Default::default() };
    let a = p.predict(protein, 0u32, &opts).unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a, p.predict(protein, 0u32, &opts).unwrap());
    let b = p.predict(protein, 0u32, &PredictOptions { seed: 4, ..opts.clone() }).unwrap();
    assert_ne!(a, b);
    let distinct = |v: &[codon_model::DnaPrediction]| {
        v.iter().map(|d| d.predicted_dna.clone()).collect::<std::collections::BTreeSet<_>>().len()
    };
    assert!(distinct(&a) > 1);
    // top_p → 0 keeps only the most likely codon: sampling equals argmax.
    let greedy = p.predict(protein, 0u32, &PredictOptions::default()).unwrap();
    let narrow = p.predict(protein, 0u32, &PredictOptions { top_p: 1e-9, ..opts }).unwrap();
    assert!(narrow.iter().all(|d| d.predicted_dna == greedy[0].predicted_dna));
}

#[test]
fn validation_errors_match_upstream() {
    let p = predictor();
    let err = |protein: &str, organism: OrganismRef, o: PredictOptions| {
        p.predict(protein, organism, &o).unwrap_err().to_string()
    };
    let ok = PredictOptions::default();
    let ecoli = || OrganismRef::from("Escherichia coli general");
    assert_eq!(err("", ecoli(), ok.clone()), "Protein sequence cannot be empty.");
    for t in [0.0, -0.1, f64::NAN] {
        assert_eq!(
            err("MK", ecoli(), PredictOptions { temperature: t, ..ok.clone() }),
            "Temperature must be a positive float."
        );
    }
    for top_p in [0.0, -0.1, 1.1] {
        assert_eq!(
            err("MK", ecoli(), PredictOptions { top_p, ..ok.clone() }),
            "top_p must be a float between 0 and 1."
        );
    }
    assert_eq!(
        err("MK", ecoli(), PredictOptions { num_sequences: 0, ..ok.clone() }),
        "num_sequences must be a positive integer."
    );
    assert_eq!(
        err("MK", ecoli(), PredictOptions { num_sequences: 3, ..ok.clone() }),
        "Multiple sequences can only be generated in non-deterministic mode."
    );
    assert!(err("MKV", OrganismRef::from("Alien $%#@!"), ok.clone()).starts_with("Invalid organism name: Alien $%#@!."));
    assert!(err("MKV", OrganismRef::Id(164), ok.clone()).starts_with("Invalid organism ID: 164."));
    assert!(err("MKTZZFVLLL?", ecoli(), ok.clone()).starts_with("Invalid characters in protein sequence."));
    assert!(err("MWW/", ecoli(), ok).starts_with("Invalid characters in protein sequence."));
}

#[test]
fn long_proteins_are_predicted_in_windows() {
    let p = predictor();
    let motif = "MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVEALYLVCGERGFFYTPKTRREAEDLQVGQVELGG";
    let protein: String = motif.repeat(40); // 2800 residues + stop
    let out = p.predict(&protein, 59u32, &PredictOptions { match_protein: true, ..Default::default() }).unwrap();
    let dna = &out[0].predicted_dna;
    assert_eq!(dna.len(), 3 * 2801);
    assert_eq!(translate(dna), expected_protein(&protein));
}

#[test]
fn batches_keep_order_and_equal_single_predictions() {
    let p = predictor();
    let items: Vec<(String, OrganismRef)> = vec![
        ("MKV".into(), 51u32.into()),
        ("MALWMRLLPLLALLALWGPDPAAA".into(), "Homo sapiens".into()),
        ("MK?".into(), 51u32.into()),
        ("MW".into(), OrganismRef::Id(200)),
        ("MFWYMFWY".into(), 0u32.into()),
    ];
    let options = PredictOptions { max_batch_tokens: 40, ..Default::default() };
    let batch = p.predict_batch(&items, &options).unwrap();
    assert_eq!(batch.len(), 5);
    for (i, (protein, organism)) in items.iter().enumerate() {
        match (&batch[i], p.predict(protein, organism.clone(), &options)) {
            (Ok(a), Ok(b)) => assert_eq!(a, &b, "item {i}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "item {i}"),
            (a, b) => panic!("item {i}: batch {a:?} vs single {b:?}"),
        }
    }
    assert!(batch[2].is_err() && batch[3].is_err());
}

#[test]
fn requests_with_their_own_options_share_passes_and_equal_their_single_predictions() {
    let p = predictor();
    let argmax = PredictOptions::default();
    let scored = PredictOptions { keep_codon_scores: true, match_protein: true, ..Default::default() };
    let two_samples = PredictOptions { num_sequences: 2, ..sampling(1.0, 3) };
    let other_seed = PredictOptions { num_sequences: 2, ..sampling(1.0, 4) };
    let invalid = PredictOptions { top_p: 0.0, ..sampling(1.0, 5) };
    let requests = [
        ("MALWMRLLPLLALLALWGPDPAAA", "Homo sapiens", &argmax),
        ("MKVLA", "Escherichia coli general", &two_samples),
        ("MKVLA", "Escherichia coli general", &other_seed),
        ("MFWYMFWYKK", "Homo sapiens", &scored),
        ("MKV", "Homo sapiens", &invalid),
        ("MK?", "Homo sapiens", &argmax),
    ];
    let items: Vec<(codon_model::ProteinInput, PredictOptions)> = requests
        .iter()
        .map(|(protein, organism, options)| {
            let input = codon_model::ProteinInput {
                protein: protein.to_string(),
                organism: OrganismRef::parse(organism),
                known_dna: None,
            };
            (input, (*options).clone())
        })
        .collect();
    // A budget that puts several requests in each pass.
    let forward = PredictOptions { max_batch_tokens: 64, ..Default::default() };
    let batched = p.predict_each(&items, &forward).unwrap().results;
    // The same DNA; scores within 1e-5 (another batch pads the rows differently, which moves
    // the f32 sums in their last bits).
    let close = |a: &codon_model::DnaPrediction, b: &codon_model::DnaPrediction| {
        let near = |x: f64, y: f64| x == y || (x - y).abs() <= 1e-5;
        let scores = match (&a.codon_log_probs, &b.codon_log_probs) {
            (Some(x), Some(y)) => {
                x.iter().flatten().zip(y.iter().flatten()).all(|(u, v)| near(f64::from(*u), f64::from(*v)))
            }
            (x, y) => x.is_none() && y.is_none(),
        };
        a.predicted_dna == b.predicted_dna && near(a.score.log_likelihood, b.score.log_likelihood) && scores
    };
    for (i, (protein, organism, options)) in requests.iter().enumerate() {
        match (&batched[i], p.predict(protein, *organism, options)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.len(), b.len(), "request {i}");
                assert!(a.iter().zip(&b).all(|(x, y)| close(x, y)), "request {i}: {a:?} vs {b:?}");
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "request {i}"),
            (a, b) => panic!("request {i}: batched {a:?} vs single {b:?}"),
        }
    }
    // Each request's samples come from its own seed, whatever shares its pass.
    let dna = |i: usize| batched[i].as_ref().unwrap().iter().map(|d| d.predicted_dna.clone()).collect::<Vec<_>>();
    assert_ne!(dna(1), dna(2));
    assert_eq!(batched[1].as_ref().unwrap().len(), 2);
    assert!(batched[3].as_ref().unwrap()[0].codon_log_probs.is_some());
    assert!(batched[4].is_err() && batched[5].is_err());
}

#[test]
fn models_without_the_codontransformer_vocabulary_are_rejected() {
    use codon_model::bigbird::{init_weights, BigBirdConfig, BigBirdForMaskedLM};
    let config = BigBirdConfig::from_json(
        r#"{"vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}"#,
    )
    .unwrap();
    let model =
        BigBirdForMaskedLM::from_named(config.clone(), init_weights(&config, 0, &Device::Cpu, DType::F32).unwrap())
            .unwrap();
    let err = Predictor::new(model).err().unwrap().to_string();
    assert!(err.contains("vocab_size 50"), "{err}");
}

fn infill(
    p: &Predictor,
    protein: &str,
    known: &str,
    match_protein: bool,
) -> codon_model::Result<codon_model::DnaPrediction> {
    let input = codon_model::ProteinInput {
        protein: protein.into(),
        organism: "Homo sapiens".into(),
        known_dna: Some(known.into()),
    };
    let options = PredictOptions { match_protein, keep_codon_scores: true, ..Default::default() };
    let mut out = p.predict_batch_with_progress(&[input], &options, &mut |_| {}).unwrap();
    out.pop().unwrap().map(|mut v| v.pop().unwrap())
}

#[test]
fn infill_keeps_known_codons_and_feeds_them_to_the_model() {
    let p = predictor();
    for (known, match_protein) in
        [("ATGNNNGTANNNGCGTGGNNN", true), ("atgnnngtannngcgtgg", false), ("ATGNNNGTANNNGCGTGGTAG", false)]
    {
        let out = infill(&p, "MKVLAW", known, match_protein).unwrap();
        let (dna, upper) = (&out.predicted_dna, known.to_ascii_uppercase());
        for (i, (got, want)) in dna.as_bytes().chunks(3).zip(upper.as_bytes().chunks(3)).enumerate() {
            if want != b"NNN" {
                assert_eq!(got, want, "{known}: known codon {} kept", i + 1);
            }
        }
        assert!(out.processed_input.starts_with("M_ATG K_UNK V_GTA L_UNK A_GCG W_TGG"), "{}", out.processed_input);
        if match_protein {
            assert_eq!(translate(dna), "MKVLAW_");
        }
    }
    for (known, expected) in [
        ("ATGNNNGTA", "9 nucleotides for a protein of 7 residues"),
        ("ATGNNNGTTNNNGCGTGCNNN", "codon 6 (TGC) encodes C but the protein has W there"),
        ("ATGNNXGTANNNGCGTGGNNN", "'X' at position 6"),
        ("ATGNANGTANNNGCGTGGNNN", "codon 2 (NAN) mixes known and unknown bases"),
    ] {
        let err = infill(&p, "MKVLAW", known, true).unwrap_err().to_string();
        assert!(err.contains(expected), "{known}: {err}");
    }
}

#[test]
fn codon_scores_are_log_probabilities_of_the_codons_the_prediction_may_choose() {
    let p = predictor();
    let out = infill(&p, "MKVLAW", "NNNNNNNNNNNNGCGNNNNNN", true).unwrap();
    let scores = out.codon_log_probs.as_ref().unwrap();
    assert_eq!(scores.len(), 7);
    for (i, (row, aa)) in scores.iter().zip("MKVLAW_".chars()).enumerate() {
        let finite: Vec<usize> = (0..64).filter(|&c| row[c].is_finite()).collect();
        let synonyms: Vec<usize> = if i == 4 {
            vec![codon_model::vocab::codon_index(b"GCG").unwrap()]
        } else {
            (0..64).filter(|&c| translate_codon(&codon_model::vocab::codon_at(c).unwrap()) == Some(aa)).collect()
        };
        assert_eq!(finite, synonyms, "residue {i} ({aa})");
        assert!(finite.iter().all(|&c| row[c] <= 0.0));
        let best = *finite.iter().max_by(|&&a, &&b| row[a].total_cmp(&row[b]).then(b.cmp(&a))).unwrap();
        assert_eq!(
            out.predicted_dna.as_bytes()[3 * i..3 * i + 3],
            codon_model::vocab::codon_at(best).unwrap(),
            "residue {i}: the prediction is the best-scored codon"
        );
    }
    let plain = p.predict("MKVLAW", "Homo sapiens", &PredictOptions::default()).unwrap();
    assert!(plain[0].codon_log_probs.is_none(), "scores only when asked");
}

#[test]
fn ids_are_checked_against_the_model_before_they_reach_a_device() {
    let p = predictor();
    let c = p.model().config();
    let input = |ids: &[u32], types: &[u32], mask: &[u32]| {
        let encoding = codon_model::BatchEncoding {
            batch_size: 1,
            seq_len: 3,
            input_ids: ids.to_vec(),
            token_type_ids: types.to_vec(),
            attention_mask: mask.to_vec(),
        };
        codon_model::bigbird::ModelInput::from_encoding(&encoding, c, &Device::Cpu).map(|_| ())
    };
    assert!(input(&[1, 40, 2], &[51, 51, 51], &[1, 1, 1]).is_ok());
    let err = input(&[1, 90, 2], &[51, 51, 51], &[1, 1, 1]).unwrap_err().to_string();
    assert!(err.contains("input_ids[0][1] = 90 is outside 0..90"), "{err}");
    let err = input(&[1, 40, 2], &[51, 164, 51], &[1, 1, 1]).unwrap_err().to_string();
    assert!(err.contains("token_type_ids[0][1] = 164 is outside 0..164"), "{err}");
    assert!(input(&[1, 40, 2], &[51, 51, 51], &[1, 2, 1]).is_err());
    assert!(input(&[1, 40], &[51, 51, 51], &[1, 1, 1]).is_err(), "a length that does not fit the shape");
}

#[test]
fn a_sequence_score_is_the_sum_of_renormalised_codon_log_probabilities() {
    use codon_model::predict::SequenceScore;
    use codon_model::vocab::codon_index;
    // Two positions: the first allows GCT and GCC with equal logits (p = 1/2 each); the second
    // allows ATG alone (p = 1), with a logit that is not a log-probability.
    let mut rows = [[f32::NEG_INFINITY; 64]; 2];
    rows[0][codon_index(b"GCT").unwrap()] = 3.0;
    rows[0][codon_index(b"GCC").unwrap()] = 3.0;
    rows[1][codon_index(b"ATG").unwrap()] = -7.5;
    let s = SequenceScore::of(&rows, "GCCATG").unwrap();
    let half = 0.5f64.ln();
    assert!((s.log_likelihood - half).abs() < 1e-12, "{s:?}");
    assert!((s.mean_log_likelihood - half / 2.0).abs() < 1e-12, "{s:?}");
    assert_eq!(s.lowest.iter().map(|&(pos, _)| pos).collect::<Vec<_>>(), [0, 1]);
    // A codon the position does not allow is impossible; a DNA longer than the rows is an error.
    assert_eq!(SequenceScore::of(&rows, "GCAATG").unwrap().log_likelihood, f64::NEG_INFINITY);
    assert!(SequenceScore::of(&rows, "GCCATGTAA").is_err());
    // No stop codon: only the given codons count.
    assert!((SequenceScore::of(&rows, "GCT").unwrap().log_likelihood - half).abs() < 1e-12);
}

#[test]
fn scoring_a_prediction_gives_its_own_score_and_samples_come_best_first() {
    let p = predictor();
    let organism = OrganismRef::Name("Escherichia coli general".into());
    // Under match_protein the prediction translates back to its protein, so scoring it runs the
    // same forward pass.
    let options = PredictOptions { match_protein: true, ..Default::default() };
    let predicted = p.predict("MKVLAWQ", organism.clone(), &options).unwrap().remove(0);
    assert!(predicted.score.log_likelihood < 0.0 && predicted.score.lowest.len() == 5, "{:?}", predicted.score);
    let items = [(predicted.predicted_dna.clone(), organism.clone())];
    let rescored = p.score_batch(&items, &options, &mut |_| {}).unwrap().remove(0).unwrap();
    assert!((rescored.log_likelihood - predicted.score.log_likelihood).abs() < 1e-9, "{rescored:?}");
    // argmax maximises the renormalised log-likelihood: any other synonym scores lower.
    let mut other = predicted.predicted_dna.clone();
    let swap = if &other[3..6] == "AAA" { "AAG" } else { "AAA" };
    other.replace_range(3..6, swap);
    let lower = p.score_batch(&[(other, organism.clone())], &options, &mut |_| {}).unwrap().remove(0).unwrap();
    assert!(lower.log_likelihood < predicted.score.log_likelihood, "{lower:?}");
    let samples =
        p.predict("MKVLAWQRST", organism.clone(), &PredictOptions { num_sequences: 6, ..sampling(1.5, 3) }).unwrap();
    let ll: Vec<f64> = samples.iter().map(|s| s.score.log_likelihood).collect();
    assert!(ll.windows(2).all(|w| w[0] >= w[1]), "not best first: {ll:?}");
    assert!(ll.first() > ll.last(), "the samples should differ: {ll:?}");
    let bad = [("ATGTAAAAA".to_string(), organism.clone()), ("ATGAA".to_string(), organism)];
    let errors = p.score_batch(&bad, &PredictOptions::default(), &mut |_| {}).unwrap();
    assert!(errors[0].as_ref().unwrap_err().to_string().contains("stop codon TAA inside"), "{:?}", errors[0]);
    assert!(errors[1].as_ref().unwrap_err().to_string().contains("not a whole number of codons"), "{:?}", errors[1]);
}

#[test]
fn a_protein_with_broken_logits_fails_alone_and_its_pass_mates_are_answered() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bigbird");
    let model = load_model(&dir, None, &Device::Cpu, DType::F32).unwrap();
    // One organism's embedding row made NaN: a protein of that organism gets non-finite
    // logits in its row of the pass.
    let (poisoned, clean) = (7usize, 9);
    let parameters: Vec<(String, candle_core::Tensor)> = model
        .named_parameters()
        .into_iter()
        .map(|(name, t)| {
            if name != TOKEN_TYPE_EMBEDDINGS {
                return (name, t);
            }
            let mut rows = t.to_vec2::<f32>().unwrap();
            rows[poisoned].iter_mut().for_each(|v| *v = f32::NAN);
            (name, candle_core::Tensor::new(rows, &Device::Cpu).unwrap())
        })
        .collect();
    let p = Predictor::new(model.with_parameters(parameters).unwrap()).unwrap();
    let item = |protein: &str, organism: usize| {
        let input = codon_model::ProteinInput {
            protein: protein.to_string(),
            organism: OrganismRef::Id(organism as i64),
            known_dna: None,
        };
        (input, PredictOptions::default())
    };
    let items = [
        item("MKVLAAGW", poisoned),
        // The same length: it shares the pass, but its own row's logits stay finite.
        item("MKVLAAGF", clean),
        // Other lengths: passes of their own.
        item("MKVLAAGWMKVLAAGWMKVLAAGW", clean),
        item("MALWMRLLPLLALLALWGPDPAAAMKVLAAGW", clean),
    ];
    let predicted = p.predict_each(&items, &PredictOptions::default()).unwrap();
    assert_eq!(predicted.pass_sizes, [2, 1, 1]);
    let results = predicted.results;
    let error = results[0].as_ref().unwrap_err().to_string();
    assert!(error.contains("non-finite logits") && error.contains("MKVLAAGW"), "{error}");
    for i in 1..4 {
        let dna = &results[i].as_ref().unwrap()[0].predicted_dna;
        assert_eq!(dna.len(), 3 * (items[i].0.protein.len() + 1), "protein {i}");
    }
}
