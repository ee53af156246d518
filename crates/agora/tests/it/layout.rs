//! The workspace's module graph has no cycles: no module imports a module that imports it
//! back, directly or through others.
//!
//! Each crate's `src/` is read as text. A file is a module (`mod.rs` and `lib.rs` stand for
//! their folder); its edges are the `crate::a::b` paths and the `super::` paths in its code
//! before its `#[cfg(test)] mod tests`, comments left out, each resolved to the longest module
//! path that exists. A module's use of its own ancestors does not count: a folder and the files
//! in it are one part of the design (its `mod.rs` may use them and they may use it), so cycles
//! are looked for between siblings and across folders.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments and its test module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_path(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_owned());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out
}

/// The longest existing module that `path` starts with.
fn resolve(modules: &BTreeSet<Module>, path: &[String]) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| modules.contains(m))
}

fn edges_of(modules: &BTreeSet<Module>, module: &Module, code: &str) -> BTreeSet<Module> {
    let mut paths: Vec<Vec<String>> = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        paths.push(ident_path(&code[i + "crate::".len()..]));
    }
    for (i, _) in code.match_indices("super::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &code[i..];
        let mut base = module.clone();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        if let Some(list) = rest.strip_prefix('{') {
            let list = &list[..list.find('}').unwrap_or(list.len())];
            for name in list.split(',') {
                let mut p = base.clone();
                p.extend(ident_path(name.trim()));
                paths.push(p);
            }
        } else {
            base.extend(ident_path(rest));
            paths.push(base);
        }
    }
    paths
        .iter()
        .filter_map(|p| resolve(modules, p))
        .filter(|t| t != module && !module.starts_with(t))
        .collect()
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct State<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        found: Vec<Vec<Module>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut report = Vec::new();
    let mut crates_read = 0;
    for entry in std::fs::read_dir(&crates).expect("crates/").flatten() {
        let src = entry.path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates_read += 1;
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeSet<Module> = files.iter().map(|f| module_of(&src, f)).collect();
        let mut graph = BTreeMap::new();
        for file in &files {
            let module = module_of(&src, file);
            let text = std::fs::read_to_string(file).expect("readable source");
            let edges = edges_of(&modules, &module, &code(&text));
            graph.insert(module, edges);
        }
        for component in cycles(&graph) {
            let names: Vec<String> = component
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "crate".to_owned()
                    } else {
                        m.join("::")
                    }
                })
                .collect();
            report.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                names.join(" ↔ ")
            ));
        }
    }
    assert!(crates_read >= 8, "read only {crates_read} crates");
    assert!(report.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn a_planted_cycle_is_found() {
    let modules: BTreeSet<Module> = [vec![], vec!["a".to_owned()], vec!["b".to_owned()]]
        .into_iter()
        .collect();
    let a = vec!["a".to_owned()];
    let b = vec!["b".to_owned()];
    let mut graph = BTreeMap::new();
    graph.insert(
        a.clone(),
        edges_of(&modules, &a, &code("use crate::b::Thing; // crate::c")),
    );
    graph.insert(
        b.clone(),
        edges_of(&modules, &b, &code("use super::a::{self, X};")),
    );
    assert_eq!(cycles(&graph), vec![vec![a, b]]);
}
