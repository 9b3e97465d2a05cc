//! `codon`: CodonTransformer's command-line program (`codon --help`).

fn main() {
    codon_cli::commands::main();
}
