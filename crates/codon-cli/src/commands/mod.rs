//! The `codon` program: one subcommand per job, each in its own module with its flags (`Args`)
//! and its `run`.

pub mod collate;
pub mod common;
pub mod dev;
pub mod evaluate;
pub mod export;
pub mod init_model;
pub mod npu;
pub mod predict;
pub mod prepare_data;
pub mod score;
pub mod serve;
pub mod tokenize;
pub mod train;
pub mod version;

use clap::{CommandFactory, Parser, Subcommand};

/// CodonTransformer on CPUs, Ascend NPUs and NVIDIA GPUs: organism-specific DNA for proteins.
#[derive(Parser)]
#[command(name = "codon", version, long_version = version::long_version(), propagate_version = true)]
#[command(after_help = "Run `codon help SUBCOMMAND` for a worked example of each.")]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The jobs.
#[derive(Subcommand)]
pub enum Command {
    /// Predict organism-specific DNA for proteins (upstream's predict_dna_sequence).
    ///
    /// --input: CSV with `protein_sequence` (or `protein`) and `organism` columns, or FASTA.
    ///
    /// --output: written in the format its extension names: .fasta/.fa/.fna, .jsonl, else CSV.
    #[command(after_help = examples::PREDICT)]
    Predict(predict::Args),
    /// The model's logits, loss and hidden states for tokenized inputs, as safetensors.
    ///
    /// --output: a safetensors file.
    #[command(after_help = examples::SCORE)]
    Score(score::Args),
    /// The model as an ONNX file, for CANN's ATC and ONNX runtimes (docs/onnx.md).
    ///
    /// --output: an ONNX model (full attention; inputs input_ids, attention_mask, token_type_ids;
    /// output logits).
    #[command(after_help = examples::EXPORT)]
    Export(export::Args),
    /// Fine-tune a model (upstream finetune.py's flags).
    ///
    /// --max_epochs: 15 by default (the demo, without --dataset_dir: 6).
    ///
    /// --overwrite: lets the run remove another run's step-<N> folders and state-dict file from
    /// --checkpoint_dir.
    #[command(after_help = examples::FINETUNE)]
    Finetune(train::Args),
    /// Train a model from a random initialisation.
    ///
    /// --max_epochs: 5 by default.
    ///
    /// --overwrite: lets the run remove another run's step-<N> folders and state-dict file from
    /// --checkpoint_dir.
    #[command(after_help = examples::PRETRAIN)]
    Pretrain(train::Args),
    /// Upstream's evaluation metrics (CSI, GC, CFD, %MinMax, …) of coding sequences.
    ///
    /// --input: CSV with `dna`, `organism` (name or id) and optionally `reference_dna` columns, or
    /// FASTA (the organism from each header's [organism=NAME] tag).
    ///
    /// --output: CSV, the input's columns plus the metrics.
    #[command(after_help = examples::EVALUATE)]
    Evaluate(evaluate::Args),
    /// CSV or FASTA genes to the JSONL training format.
    ///
    /// --input: .csv with a `dna` column (and optionally `protein`, `organism`), or FASTA.
    ///
    /// --output: JSONL training records ({"idx", "codons", "organism"}).
    #[command(after_help = examples::PREPARE_DATA)]
    PrepareData(prepare_data::Args),
    /// Proteins to model inputs (token ids).
    ///
    /// --input: JSONL protein records.
    ///
    /// --output: JSONL model inputs.
    #[command(after_help = examples::TOKENIZE)]
    Tokenize(tokenize::Args),
    /// Training records to masked-LM batches.
    ///
    /// --input: JSONL training records ({"idx", "codons", "organism"}).
    ///
    /// --output: JSONL, one batch per line; or, named `*.safetensors`, the first batch as
    /// `score --inputs`.
    #[command(after_help = examples::COLLATE)]
    Collate(collate::Args),
    /// A randomly initialised model in the transformers layout.
    ///
    /// --output: a folder (config.json + model.safetensors), new or empty unless --overwrite,
    /// which replaces the whole folder (all its files, not only a model's).
    #[command(after_help = examples::INIT_MODEL)]
    InitModel(init_model::Args),
    /// The design service: a web page and a JSON API over one loaded model.
    #[command(after_help = examples::SERVE)]
    Serve(serve::Args),
    /// The organisms a model knows, by id.
    #[command(after_help = examples::ORGANISMS)]
    Organisms {
        /// The model whose organism table to list (default: the built-in 164).
        #[command(flatten)]
        model: crate::cli::ModelArg,
    },
    /// Ascend NPUs: the environment, the toolkit, a self-test and a monitor.
    #[command(subcommand, after_help = examples::NPU)]
    Npu(npu::NpuCommand),
    /// A shell completion script, on stdout.
    #[command(after_help = examples::COMPLETIONS)]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Developer tools: timings and counters.
    #[command(subcommand, hide = true)]
    Dev(dev::DevCommand),
}

impl Cli {
    /// Run the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Predict(args) => predict::run(args),
            Command::Score(args) => score::run(args),
            Command::Export(args) => export::run(args),
            Command::Finetune(args) => train::run(train::Mode::Finetune, args),
            Command::Pretrain(args) => train::run(train::Mode::Pretrain, args),
            Command::Evaluate(args) => evaluate::run(args),
            Command::PrepareData(args) => prepare_data::run(args),
            Command::Tokenize(args) => tokenize::run(args),
            Command::Collate(args) => collate::run(args),
            Command::InitModel(args) => init_model::run(args),
            Command::Serve(args) => serve::run(args),
            Command::Organisms { model } => predict::list_organisms(model.as_deref()),
            Command::Npu(command) => npu::run(command),
            Command::Completions { shell } => {
                let mut script = Vec::new();
                clap_complete::generate(shell, &mut Cli::command(), "codon", &mut script);
                crate::outln!("{}", String::from_utf8_lossy(&script).trim_end());
                Ok(())
            }
            Command::Dev(tool) => tool.run(),
        }
    }
}

/// The `codon` program: parse the command line, run the subcommand, exit as the rules say.
pub fn main() {
    std::process::exit(main_from(std::env::args_os()));
}

/// The program run on `args` (its name first), in this process: the exit status it ends with.
/// The Python package's `codon` command is this.
pub fn main_from(args: impl IntoIterator<Item = impl Into<std::ffi::OsString>>) -> i32 {
    match crate::cli::parse_args_from::<Cli>(args.into_iter().map(Into::into)) {
        Ok(cli) => crate::run_main(|| cli.run()),
        Err(status) => status,
    }
}

/// A worked example for each subcommand, shown by `codon help SUBCOMMAND`.
mod examples {
    pub const PREDICT: &str = "Examples:
  codon predict --protein MALWMRLLPLLALLALWGPDPAAA --organism \"Escherichia coli general\"
  codon predict --model ./my-model --input proteins.fasta --output genes.csv --match-protein
  codon predict --input proteins.csv --output genes.fasta --avoid-sites EcoRI,BamHI --gc-window 50 --gc-min 0.3 --gc-max 0.7
  codon predict --score genes.csv --output scores.csv";
    pub const SCORE: &str = "Example:
  codon collate --input train.jsonl --batch-size 2 --output inputs.safetensors
  codon score --model ./my-model --inputs inputs.safetensors --output scores.safetensors";
    pub const EXPORT: &str = "Examples:
  codon export --format onnx --model ./my-model --output codon.onnx
  atc --framework=5 --model=codon.onnx --output=codon --soc_version=Ascend910B3 \\
      --input_shape=\"input_ids:1,-1;attention_mask:1,-1;token_type_ids:1,-1\" --dynamic_dims=\"128,128,128;512,512,512\"";
    pub const FINETUNE: &str = "Examples:
  codon finetune                     # the bundled demo: a small model, a few seconds on the CPU
  codon prepare-data --input genes.csv --output train.jsonl
  codon finetune --dataset_dir train.jsonl --checkpoint_dir ckpt --batch_size 6 --max_epochs 15 --device npu:0";
    pub const PRETRAIN: &str = "Example:
  codon pretrain --dataset_dir train.jsonl --checkpoint_dir ckpt --config config.json --device npu:0";
    pub const EVALUATE: &str = "Example:
  codon evaluate --input genes.csv --reference train.jsonl --output metrics.csv";
    pub const PREPARE_DATA: &str = "Example:
  codon prepare-data --input genes.csv --output train.jsonl";
    pub const TOKENIZE: &str = "Example:
  codon tokenize --input crates/codon-cli/demo/proteins.jsonl --output tokens.jsonl";
    pub const COLLATE: &str = "Example:
  codon collate --input train.jsonl --batch-size 6 --seed 123 --output batches.jsonl";
    pub const INIT_MODEL: &str = "Example:
  codon init-model --output model-random
  codon predict --model model-random --protein MALWMRLL --organism \"Escherichia coli general\"";
    pub const SERVE: &str = "Examples:
  codon serve --model adibvafa/CodonTransformer --port 8080          # http://127.0.0.1:8080/
  codon serve --device npu:0 --host 0.0.0.0 --host-name design.lab.example.org --api-key \"$KEY\"";
    pub const ORGANISMS: &str = "Examples:
  codon organisms | grep -i coli
  codon organisms --model ./model-taught-more";
    pub const NPU: &str = "Examples:
  codon npu env --device npu:0
  codon npu check-toolkit /usr/local/Ascend/ascend-toolkit/latest
  codon npu selftest --device npu:0 --report npu-selftest.json
  codon npu watch 60";
    pub const COMPLETIONS: &str = "Example:
  codon completions bash > ~/.local/share/bash-completion/completions/codon";
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every flag of `command` and its subcommands, by id and spelled each way (long names and
    /// their aliases), is declared once: a second declaration would shadow the first without a word
    /// (clap checks this only in debug builds, and the suite runs in release).
    fn check_spellings(command: &clap::Command, path: &str, clashes: &mut Vec<String>) {
        let mut seen = std::collections::HashMap::new();
        let mut ids = std::collections::HashSet::new();
        for arg in command.get_arguments() {
            if !ids.insert(arg.get_id().to_string()) {
                clashes.push(format!("{path}: two flags have the id {}", arg.get_id()));
            }
            let longs = arg.get_long().into_iter().chain(arg.get_all_aliases().into_iter().flatten());
            for long in longs {
                if let Some(first) = seen.insert(long.to_string(), arg.get_id().to_string()) {
                    clashes.push(format!("{path}: --{long} is both {first} and {}", arg.get_id()));
                }
            }
        }
        for sub in command.get_subcommands() {
            check_spellings(sub, &format!("{path} {}", sub.get_name()), clashes);
        }
    }

    /// The long name of each `#[arg(...)]` declaration in `source`: its `long = "NAME"`, or for a
    /// bare `long` the field's name in kebab-case.
    fn declared_longs(source: &str) -> Vec<String> {
        let mut longs = Vec::new();
        let mut rest = source;
        while let Some(start) = rest.find("#[arg(") {
            rest = &rest[start + "#[arg(".len()..];
            let Some(end) = rest.find(")]\n") else { break };
            let (attrs, after) = (&rest[..end], &rest[end..]);
            if let Some(named) = attrs.split("long = \"").nth(1) {
                longs.push(named.split('"').next().unwrap_or_default().to_string());
            } else if attrs.split([',', ' ', '(', '\n']).any(|word| word == "long") {
                // The field's name: the first line after the attribute that is not a doc line.
                let field = after.lines().skip(1).map(str::trim).find(|l| !l.starts_with("///"));
                let name = field.and_then(|l| l.trim_start_matches("pub ").split(':').next()).unwrap_or_default();
                longs.push(name.replace('_', "-"));
            }
        }
        longs
    }

    #[test]
    fn each_flag_is_declared_in_one_place_in_the_source() {
        let mut declared: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        let mut folders = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap().map(Result::unwrap) {
                let path = entry.path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    for long in declared_longs(&std::fs::read_to_string(&path).unwrap()) {
                        declared.entry(long).or_default().push(path.display().to_string());
                    }
                }
            }
        }
        assert!(declared.len() > 80, "the scan found only {} flags", declared.len());
        let twice: Vec<_> = declared.iter().filter(|(_, files)| files.len() > 1).collect();
        assert!(twice.is_empty(), "flags declared more than once (flatten one shared type instead): {twice:#?}");
    }

    #[test]
    fn the_scan_finds_named_and_bare_long_flags() {
        let source = "#[arg(long, alias = \"x_y\")]\n    /// Doc.\n    pub x_y: bool,\n#[arg(id = \"a\", long = \"batch_size\")]\n    b: usize,\n#[arg(short)]\n    c: u8,\n";
        assert_eq!(declared_longs(source), ["x-y", "batch_size"]);
    }

    /// A shared flag with a const-generic default has each command's own default, not the first
    /// command's (clap's `default_value_t` caches it in a static the instantiations share).
    #[test]
    fn shared_flags_keep_each_commands_default() {
        let cli = Cli::command();
        let default_of = |path: &[&str], id: &str| {
            let command = path.iter().fold(&cli, |c, name| c.find_subcommand(name).expect(name));
            let arg = command.get_arguments().find(|a| a.get_id() == id).expect(id);
            arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect::<Vec<_>>().join(",")
        };
        let expected = [
            (&["finetune"][..], "seed", "123"),
            (&["collate"], "seed", "123"),
            (&["predict"], "seed", "0"),
            (&["dev", "serve-load"], "seed", "1"),
            (&["finetune"], "num_workers", "5"),
            (&["collate"], "num_workers", "2"),
            (&["dev", "forward-timing"], "length", "502"),
            (&["dev", "op-timing"], "length", "2048"),
            (&["dev", "train-step-timing"], "length", "1024"),
            (&["dev", "step-counters"], "length", "256"),
            (&["dev", "forward-timing"], "repeats", "3"),
            (&["dev", "op-timing"], "repeats", "5"),
            (&["npu", "env"], "device", "npu:0"),
            (&["dev", "step-counters"], "device", "npu-sim:0"),
            (&["predict"], "device", "cpu"),
        ];
        let wrong: Vec<String> = expected
            .iter()
            .filter(|(path, id, want)| default_of(path, id) != *want)
            .map(|(path, id, want)| format!("{} --{id}: {} (want {want})", path.join(" "), default_of(path, id)))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn every_subcommand_declares_each_flag_once() {
        let mut clashes = Vec::new();
        check_spellings(&Cli::command(), "codon", &mut clashes);
        assert!(clashes.is_empty(), "{clashes:#?}");
        Cli::command().debug_assert();
    }
}
