//! codon-ops' modules form no import cycle: no two of them reach into each other (a
//! `crate::other` path, or a name the crate root re-exports from `other`). Doc links count too:
//! a module that names another in its docs depends on it for a reader.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module's source, its files joined (a folder module's files under its name).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let top =
                rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
            if top != "lib" {
                out.entry(top).or_default().push_str(&std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

/// The modules `source` reaches through `crate::NAME`, with re-exported names mapped to their module.
fn reaches(source: &str, modules: &BTreeSet<String>, reexports: &BTreeMap<String, String>) -> BTreeSet<String> {
    source
        .split("crate::")
        .skip(1)
        .flat_map(|rest| {
            // `crate::{a, b::c}` names several at once.
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                None => vec![rest],
            };
            names
                .into_iter()
                .filter_map(|rest| {
                    let name: String =
                        rest.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if modules.contains(&name) {
                        Some(name)
                    } else {
                        reexports.get(&name).cloned()
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn no_two_modules_import_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let sources = modules(&src);
    let names: BTreeSet<String> = sources.keys().cloned().collect();
    // `pub use module::{a, b};` in lib.rs.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut reexports = BTreeMap::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("pub use ")) {
        let (module, items) = line.split_once("::").unwrap();
        for item in items.trim_matches(|c| "{};".contains(c)).split(',') {
            reexports.insert(item.trim().to_string(), module.to_string());
        }
    }
    assert!(reexports.contains_key("layer_norm") && names.contains("attention"), "the scan read nothing");
    let graph: BTreeMap<&String, BTreeSet<String>> =
        sources.iter().map(|(m, s)| (m, reaches(s, &names, &reexports))).collect();
    let mut pairs = Vec::new();
    for (a, deps) in &graph {
        for b in deps.iter().filter(|b| *b != *a) {
            if a.as_str() < b.as_str() && graph.get(b).is_some_and(|d| d.contains(a.as_str())) {
                pairs.push(format!("{a} <-> {b}"));
            }
        }
    }
    assert!(pairs.is_empty(), "modules that import each other: {pairs:?}");
}
