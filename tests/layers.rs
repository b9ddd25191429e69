//! Every crate's modules form layers: no module reaches back up to one that uses it, at the top
//! of a crate (`crate::module`) or among the submodules of one folder (`super::sibling`). Read
//! from the sources: every such path named outside comments is an edge, and the edges must have
//! no cycle. A parent naming its children and a child naming its parent's items are how Rust
//! nests modules and are not edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates with at most this many modules are read at a glance and not checked.
const HANDFUL: usize = 5;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The workspace's `crates/` folder.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The names `source` follows `prefix` with (`crate::` → `index` in `crate::index::Index`),
/// outside comments.
fn named_after(source: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find(prefix) {
            // A prefix inside a longer name (`mycrate::`) is not the path it looks like.
            let before = rest[..at].chars().next_back();
            let after = &rest[at + prefix.len()..];
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
            rest = after;
        }
    }
    out
}

/// The `.rs` files under `dir`, every depth, in name order.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A module's name from its file: `job.rs` and `job/mod.rs` are `job`.
fn stem(file: &Path) -> String {
    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == "mod" {
        file.parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        name
    }
}

/// A crate's module graphs: `""` → its top-level modules (an edge for each `crate::module` a
/// module's files name), and each folder (relative to `src/`) → its submodules (an edge for each
/// `super::sibling` a submodule's files name).
fn graphs(src: &Path) -> BTreeMap<String, Graph> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut out: BTreeMap<String, Graph> = BTreeMap::new();
    for file in &files {
        let Ok(relative) = file.strip_prefix(src) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let parts: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        // The top-level module this file belongs to.
        let top = parts[0].strip_suffix(".rs").unwrap_or(&parts[0]).to_owned();
        if top != "lib" && top != "main" && top != "bin" {
            let entry = out.entry(String::new()).or_default();
            let edges = entry.entry(top.clone()).or_default();
            edges.extend(
                named_after(&text, "crate::")
                    .into_iter()
                    .filter(|m| *m != top),
            );
        }
        // Among the submodules of the file's folder: a direct child file of a folder (not its
        // `mod.rs`) names its siblings with `super::`.
        let is_mod_file = relative.file_name().is_some_and(|n| n == "mod.rs");
        if parts.len() >= 2 && !is_mod_file {
            let folder = parts[..parts.len() - 1].join("/");
            let me = stem(relative);
            let entry = out.entry(folder).or_default();
            let edges = entry.entry(me.clone()).or_default();
            edges.extend(
                named_after(&text, "super::")
                    .into_iter()
                    .filter(|m| *m != me),
            );
        }
    }
    // Keep only edges to modules of the same graph: `super::Item` names an item of the parent,
    // `crate::Type` a re-export, neither a module of the layer.
    for graph in out.values_mut() {
        let modules: BTreeSet<String> = graph.keys().cloned().collect();
        for edges in graph.values_mut() {
            edges.retain(|m| modules.contains(m));
        }
    }
    out
}

/// A cycle in `graph`, as the modules along it, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
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

/// Every crate of the workspace: its name and its `src/`.
fn workspace_crates() -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(crates_dir()) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file() && p.join("src").is_dir())
        .map(|p| {
            let name = p
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, p.join("src"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_circle() {
    let crates = workspace_crates();
    assert!(
        crates.iter().any(|(name, _)| name == "muster-controller"),
        "no crates found under {}",
        crates_dir().display()
    );
    let mut checked = 0;
    let mut circles = Vec::new();
    for (name, src) in &crates {
        let graphs = graphs(src);
        let modules = graphs.get("").map_or(0, BTreeMap::len);
        if modules <= HANDFUL {
            continue;
        }
        checked += 1;
        for (folder, graph) in &graphs {
            if let Some(found) = cycle(graph) {
                let at = if folder.is_empty() {
                    String::new()
                } else {
                    format!(" (in {folder}/)")
                };
                circles.push(format!("{name}{at}: {}", found.join(" → ")));
            }
        }
    }
    assert!(
        checked >= 6,
        "only {checked} crates had more than a handful of modules"
    );
    assert!(
        circles.is_empty(),
        "modules import each other in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_controllers_index_knows_nothing_of_passes_or_writes() {
    let src = crates_dir().join("muster-controller/src");
    let graphs = graphs(&src);
    let top = &graphs[""];
    assert!(top.contains_key("index") && top.contains_key("plan"));
    // The object conventions it reads: release's domain format and HAMi's annotations (`hami`,
    // which names nothing else of the crate).
    let below: BTreeSet<&str> = ["release", "hami"].into();
    let above: Vec<&String> = top["index"]
        .iter()
        .filter(|m| !below.contains(m.as_str()))
        .collect();
    assert!(above.is_empty(), "index imports {above:?}");
}

#[test]
fn the_controllers_state_names_no_step_of_a_pass() {
    let src = crates_dir().join("muster-controller/src");
    let graphs = graphs(&src);
    let top = &graphs[""];
    assert!(top.contains_key("state"));
    let steps: BTreeSet<&str> = ["plan", "settle", "decide", "queues", "writes", "run"].into();
    for room in [
        "state",
        "ledger",
        "seats",
        "last_pass",
        "kept",
        "preemptors",
    ] {
        let named: Vec<&String> = top[room]
            .iter()
            .filter(|m| steps.contains(m.as_str()))
            .collect();
        assert!(named.is_empty(), "{room} imports {named:?}");
    }
}

#[test]
fn a_cycle_is_found_and_paths_are_read_from_code_only() {
    let mut graph = Graph::new();
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
        named_after(
            "use crate::index::Index; // crate::plan\nlet x = crate::kept::keep(); mycrate::z",
            "crate::"
        ),
        ["index".to_owned(), "kept".to_owned()].into()
    );
}

#[test]
fn sibling_submodules_in_a_circle_are_found() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("temporary folder: {e}"));
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| unreachable!("{e}"));
        }
        std::fs::write(path, text).unwrap_or_else(|e| unreachable!("{e}"));
    };
    write("lib.rs", "mod outer;");
    write("outer.rs", "mod left; mod right; use self::left::L;");
    write("outer/left.rs", "use super::right::R; use super::Parent;");
    write("outer/right.rs", "use super::left::L;");
    let found = graphs(src);
    assert_eq!(
        cycle(&found["outer"]),
        Some(vec!["left".into(), "right".into(), "left".into()])
    );
    write("outer/right.rs", "use super::Parent;");
    assert_eq!(cycle(&graphs(src)["outer"]), None);
}
