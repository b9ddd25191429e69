//! The controller's modules form layers: the index at the bottom, the pass on top, and no
//! module reaching back up to one that uses it. Read from the sources: every `crate::module`
//! a module names outside comments is an edge, and the edges must have no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module a source file belongs to: `src/job/tests.rs` and `src/job/mod.rs` are `job`.
fn module_of(relative: &Path) -> Option<String> {
    let mut parts = relative.iter().map(|p| p.to_string_lossy().into_owned());
    let first = parts.next()?;
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (name != "lib" && name != "main").then_some(name)
}

/// The modules `source` names as `crate::module`, outside comments.
fn named(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Module → the modules it names.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(!files.is_empty(), "no sources under {}", src.display());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = file.strip_prefix(&src).ok().and_then(module_of) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(named(&text).into_iter().filter(|m| *m != module));
    }
    graph
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn modules_import_no_module_above_them() {
    let graph = edges();
    assert!(graph.contains_key("index") && graph.contains_key("plan"));
    let found = cycle(&graph).map(|c| c.join(" → "));
    assert!(
        found.is_none(),
        "the modules import each other in a circle: {}",
        found.unwrap_or_default()
    );
}

#[test]
fn the_index_knows_nothing_of_passes_or_writes() {
    let graph = edges();
    // The object conventions: Muster's own labels and annotations (`release`) and HAMi's
    // (`hami`, which names nothing else of the crate).
    let below: BTreeSet<&str> = ["release", "hami"].into();
    let index = &graph["index"];
    let above: Vec<&String> = index
        .iter()
        .filter(|m| !below.contains(m.as_str()))
        .collect();
    assert!(above.is_empty(), "index imports {above:?}");
}

#[test]
fn a_cycle_is_found() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    graph.entry("c".into()).or_default().clear();
    assert_eq!(cycle(&graph), None);
    assert_eq!(
        named("use crate::index::Index; // crate::plan\nlet x = crate::kept::keep();"),
        ["index".to_owned(), "kept".to_owned()].into()
    );
}
