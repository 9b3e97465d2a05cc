//! Every `codon` command that README.md and docs/*.md show in a shell block is one the program
//! accepts as written: the subcommand exists and its flags and values parse (optional `[…]` parts
//! left out, the first of `a|b` alternatives taken). Running them is the other tests' work; this
//! catches a renamed flag or subcommand that the docs still show.

use clap::Parser;
use codon_cli::commands::Cli;

/// The `codon …` command lines of the shell blocks of `text`, continuation lines joined.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = line.trim_start() == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.trim();
        if let Some(command) = current.as_mut() {
            command.push(' ');
            command.push_str(line.trim_end_matches('\\'));
        } else if let Some(rest) = line.strip_prefix("cargo run --release -- ") {
            current = Some(format!("codon {}", rest.trim_end_matches('\\')));
        } else if line.starts_with("codon ") {
            current = Some(line.trim_end_matches('\\').to_string());
        }
        if !line.ends_with('\\') {
            out.extend(current.take());
        }
    }
    out
}

/// A documented line as arguments: comments, `[optional]` parts and all but the first of `a|b`
/// alternatives removed.
fn arguments(command: &str) -> Vec<String> {
    let mut text = command.to_string();
    while let Some(open) = text.rfind('[') {
        let Some(close) = text[open..].find(']') else { break };
        text.replace_range(open..open + close + 1, "");
    }
    let words = shlex::split(&text).unwrap_or_else(|| panic!("cannot split {command:?}"));
    words
        .into_iter()
        .take_while(|w| !w.starts_with('#'))
        .map(|w| if w.starts_with('-') { w } else { w.split('|').next().unwrap_or_default().to_string() })
        .collect()
}

#[test]
fn every_documented_command_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    let mut more: Vec<_> = std::fs::read_dir(root.join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    more.sort();
    docs.extend(more.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")));
    let mut checked = 0;
    let mut failures = Vec::new();
    for doc in &docs {
        for command in commands(&std::fs::read_to_string(doc).unwrap()) {
            checked += 1;
            if let Err(e) = Cli::try_parse_from(arguments(&command)) {
                let why = e.to_string().lines().next().unwrap_or_default().to_string();
                failures.push(format!("{}: {command}\n    {why}", doc.display()));
            }
        }
    }
    assert!(checked > 30, "only {checked} commands found");
    assert!(
        failures.is_empty(),
        "{} of {checked} documented commands do not parse:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_renamed_flag_is_caught() {
    assert_eq!(commands("```sh\ncodon predict --protein MKV \\\n    --organism 51   # one\n```\n").len(), 1);
    assert!(Cli::try_parse_from(arguments("codon predict --protein MKV --organism \"E. coli\" [--seed 1]")).is_ok());
    assert!(Cli::try_parse_from(arguments("codon predict --protien MKV")).is_err());
    assert!(Cli::try_parse_from(arguments("codon npu env --watch 60")).is_err());
}
