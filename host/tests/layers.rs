//! The host's layers (`host/src/lib.rs`, "Layers"): every `crate::` and `super::` path in
//! `host/src` is read, resolved to the module it names, and checked:
//!
//! 1. Each top-level module (a folder, or a file beside `lib.rs`) imports only what the line
//!    `Imports: …` of its module doc names (`Imports: nothing.` for a leaf).
//! 2. Those declarations have no circle, so the layers form a stack: nothing imports upward.
//! 3. No circle between files either, inside a folder or across folders.
//!
//! 4. No circle between files in any other crate of the workspace either: the API, the kit,
//!    CpuRef, the example plugins, the conformance kit, the CLI and the bindings.
//!
//! The reading is textual: comments are dropped; a `crate::` path inside a string literal
//! would count (there are none).

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// Every `.rs` file under `dir`, relative to `root`.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("host/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path.strip_prefix(root).expect("under root").to_owned());
        }
    }
}

/// `code` without its inline `mod tests { … }` blocks.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    for range in inline_modules(code).into_iter().rev() {
        let line_start = code[..range.start].rfind('\n').map_or(0, |i| i + 1);
        if code[line_start..range.start]
            .trim_end()
            .ends_with("mod tests")
        {
            out.replace_range(line_start..(range.end + 1).min(code.len()), "");
        }
    }
    out
}

/// The module path of a source file: `plugins/registry.rs` is `["plugins", "registry"]`,
/// `plugins/mod.rs` is `["plugins"]`, `npy_tests.rs` is `["npy", "tests"]`, `lib.rs` (or a
/// binary's `main.rs`) is `[]`.
fn module_of(file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs");
    let root = parts.is_empty() && stem == "main";
    // `x_tests.rs` is `x`'s test module, placed beside it (`#[path = "x_tests.rs"] mod tests;`).
    if let Some(of) = stem.strip_suffix("_tests").filter(|of| !of.is_empty()) {
        parts.push(of.to_owned());
        parts.push("tests".to_owned());
    } else if stem != "mod" && stem != "lib" && !root {
        parts.push(stem.to_owned());
    }
    parts
}

/// `src` without `//` comments (doc comments included) and `/* */` blocks. String literals
/// are kept as they are, and a `//` inside one would cut the line short: harmless here, as
/// only paths are read.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree starting at `text` (just after `crate::` or `super::`) names, each
/// as its segments, flattening `{a::b, c}` groups.
fn paths_of(text: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            while *i < chars.len() && chars[*i].is_whitespace() {
                *i += 1;
            }
            if *i < chars.len() && chars[*i] == '{' {
                *i += 1;
                loop {
                    tree(chars, i, &path, out);
                    while *i < chars.len() && chars[*i].is_whitespace() {
                        *i += 1;
                    }
                    match chars.get(*i) {
                        Some(',') => *i += 1,
                        Some('}') => {
                            *i += 1;
                            return;
                        }
                        _ => return,
                    }
                    while *i < chars.len() && chars[*i].is_whitespace() {
                        *i += 1;
                    }
                    if chars.get(*i) == Some(&'}') {
                        *i += 1;
                        return;
                    }
                }
            }
            let start = *i;
            while *i < chars.len() && (chars[*i].is_alphanumeric() || chars[*i] == '_') {
                *i += 1;
            }
            if start == *i {
                out.push(path);
                return;
            }
            path.push(chars[start..*i].iter().collect());
            if chars.get(*i) == Some(&':') && chars.get(*i + 1) == Some(&':') {
                *i += 2;
            } else {
                out.push(path);
                return;
            }
        }
    }
    let chars: Vec<char> = text.chars().take(4000).collect();
    let mut out = Vec::new();
    tree(&chars, &mut 0, &[], &mut out);
    out
}

/// The byte ranges of the inline modules (`mod name { … }`) in `code`, by brace counting.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut offset = 0;
    for line in code.split_inclusive('\n') {
        let t = line.trim();
        let is_mod = t.ends_with('{')
            && (t.starts_with("mod ")
                || t.starts_with("pub mod ")
                || t.starts_with("pub(crate) mod "));
        if is_mod {
            let open = offset + line.rfind('{').expect("ends with a brace");
            let mut depth = 0usize;
            let close = code[open..]
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(code.len(), |(i, _)| open + i);
            ranges.push(open..close);
        }
        offset += line.len();
    }
    ranges
}

/// The modules of the crate (each as its segments) and what each file's paths resolve to.
struct Sources {
    /// Module path -> the modules its file names (the longest module prefix of each path).
    imports: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    /// Top-level module -> its module doc.
    docs: BTreeMap<String, String>,
}

fn read_sources() -> Sources {
    read_crate(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), false)
}

/// Whether a file holds only tests: `tests.rs`, `*_tests.rs`, `test_support.rs`.
fn test_file(file: &Path) -> bool {
    let stem = file
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    stem == "tests" || stem.ends_with("_tests") || stem == "test_support"
}

/// The sources of the crate whose `src/` folder is `root`; without its tests (test files and
/// inline `mod tests { … }`) when `without_tests`.
fn read_crate(root: &Path, without_tests: bool) -> Sources {
    let root = root.to_owned();
    let mut files = Vec::new();
    rust_files(&root, &root, &mut files);
    if without_tests {
        files.retain(|f| !test_file(f));
    }
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(f)).collect();
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| modules.contains(p))
    };
    let mut imports = BTreeMap::new();
    let mut docs = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let src = fs::read_to_string(root.join(file)).expect("a readable source file");
        if module.len() == 1 {
            let doc: String = src
                .lines()
                .take_while(|l| l.starts_with("//!"))
                .map(|l| l.trim_start_matches("//!").trim())
                .collect::<Vec<_>>()
                .join(" ");
            docs.insert(module[0].clone(), doc);
        }
        let mut code = strip_comments(&src);
        if without_tests {
            code = without_test_modules(&code);
        }
        // Inline modules (`mod tests { … }`): `super` inside one is the file's own module.
        let inline = inline_modules(&code);
        let mut names = BTreeSet::new();
        for (keyword, is_super) in [("crate::", false), ("super::", true)] {
            for (at, _) in code.match_indices(keyword) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let base: Vec<String> = if !is_super {
                    Vec::new()
                } else if inline.iter().any(|r| r.contains(&at)) {
                    module.clone()
                } else {
                    // The parent: `plugins/mod.rs` is `plugins`, whose parent is the root.
                    module[..module.len().saturating_sub(1)].to_vec()
                };
                for path in paths_of(&code[at + keyword.len()..]) {
                    let full: Vec<String> = base.iter().cloned().chain(path).collect();
                    match resolve(&full) {
                        // An item of the crate root: a re-export, which would hide the
                        // module it comes from.
                        Some(target) if target.is_empty() => {
                            names.insert(vec![format!("(the crate root's {})", full.join("::"))]);
                        }
                        Some(target) if target != module => {
                            names.insert(target);
                        }
                        _ => {}
                    }
                }
            }
        }
        imports.insert(module, names);
    }
    Sources { imports, docs }
}

/// The names in backquotes after `Imports:` in a module doc, up to the sentence's end (`.`);
/// `Imports: nothing.` is none.
fn declared(doc: &str) -> Option<BTreeSet<String>> {
    let at = doc.find("Imports:")?;
    let list = &doc[at + "Imports:".len()..];
    let list = &list[..list
        .find(". ")
        .or_else(|| list.find('.'))
        .unwrap_or(list.len())];
    Some(
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// The first circle in `graph`, if any, as the nodes along it.
fn find_circle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        state: &mut BTreeMap<N, bool>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        match state.get(node) {
            Some(true) => return None,
            Some(false) => {
                let from = stack.iter().position(|n| n == node).expect("on the stack");
                let mut circle = stack[from..].to_vec();
                circle.push(node.clone());
                return Some(circle);
            }
            None => {}
        }
        state.insert(node.clone(), false);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(node.clone(), true);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut state, &mut Vec::new()))
}

#[test]
fn every_top_level_module_imports_only_what_it_declares() {
    let sources = read_sources();
    let mut undeclared = Vec::new();
    for (module, names) in &sources.imports {
        let Some(top) = module.first() else { continue };
        let doc = sources.docs.get(top).map_or("", String::as_str);
        let Some(allowed) = declared(doc) else {
            undeclared.push(format!("{top}: its module doc has no `Imports:` line"));
            continue;
        };
        for name in names {
            let other = &name[0];
            if other != top && !allowed.contains(other) {
                undeclared.push(format!(
                    "{} imports {} (not in {top}'s `Imports:` line)",
                    module.join("::"),
                    name.join("::")
                ));
            }
        }
    }
    undeclared.sort();
    undeclared.dedup();
    assert!(undeclared.is_empty(), "{}", undeclared.join("\n"));
}

#[test]
fn the_declared_layers_form_a_stack() {
    let sources = read_sources();
    let graph: BTreeMap<String, BTreeSet<String>> = sources
        .docs
        .iter()
        .filter(|(m, _)| m.as_str() != "lib")
        .map(|(m, doc)| (m.clone(), declared(doc).unwrap_or_default()))
        .collect();
    for (module, allowed) in &graph {
        for name in allowed {
            assert!(
                graph.contains_key(name),
                "{module} declares `{name}`, which is not a top-level module"
            );
        }
    }
    assert_eq!(find_circle(&graph), None, "a circle between layers");
}

/// The import graph between the files of a crate, without a folder's edges to its own files
/// (a `mod.rs` re-exporting them) and a file's edges to its folder's `mod.rs`.
fn file_graph(sources: &Sources) -> BTreeMap<String, BTreeSet<String>> {
    let graph: BTreeMap<String, BTreeSet<String>> = sources
        .imports
        .iter()
        .filter(|(m, _)| !m.is_empty())
        .map(|(m, names)| {
            let names = names
                .iter()
                // A folder's `mod.rs` re-exporting its own files is not an import.
                .filter(|n| !n.starts_with(m))
                .map(|n| n.join("::"))
                .collect();
            (m.join("::"), names)
        })
        .collect();
    // A file importing its folder's `mod.rs` (for a re-export) and that `mod.rs` declaring
    // the file is not a circle either: the folder's own edges to its children are dropped.
    graph
        .iter()
        .map(|(m, names)| {
            let names = names
                .iter()
                .filter(|n| !m.starts_with(&format!("{n}::")))
                .cloned()
                .collect();
            (m.clone(), names)
        })
        .collect()
}

#[test]
fn no_circle_between_files() {
    assert_eq!(
        find_circle(&file_graph(&read_sources())),
        None,
        "an import circle between files"
    );
}

/// Every other crate of the workspace: no import circle between its files (tests aside: a
/// test module may use its crate's test helpers).
#[test]
fn no_circle_between_files_in_any_crate() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let crates = [
        "backend-api",
        "backend-api/kit",
        "backends/reference",
        "plugins-example/acme-cpufast",
        "plugins-example/acme-gpucl",
        "host/conformance",
        "host/cli",
        "bindings/c",
        "bindings/python",
    ];
    let mut circles = Vec::new();
    for name in crates {
        let src = top.join(name).join("src");
        assert!(src.is_dir(), "{} is not a folder", src.display());
        if let Some(circle) = find_circle(&file_graph(&read_crate(&src, true))) {
            circles.push(format!("{name}: {}", circle.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The reader itself: a group, nested groups, `self` and a plain path.
#[test]
fn use_trees_are_flattened() {
    let paths = paths_of("{a::{b, c::D}, e, f::{self, G}};");
    let flat: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(flat, ["a::b", "a::c::D", "e", "f::self", "f::G"]);
    assert_eq!(paths_of("x::y(1)")[0], ["x", "y"]);
    assert_eq!(
        declared("Holds things. Imports: `sys`, `report`. More."),
        Some(["report".to_owned(), "sys".to_owned()].into())
    );
    assert_eq!(declared("A leaf. Imports: nothing."), Some(BTreeSet::new()));
    let mut g = BTreeMap::new();
    g.insert(1, BTreeSet::from([2]));
    g.insert(2, BTreeSet::from([3]));
    g.insert(3, BTreeSet::from([1]));
    assert_eq!(find_circle(&g), Some(vec![1, 2, 3, 1]));
    g.get_mut(&3).expect("node 3").clear();
    assert_eq!(find_circle(&g), None);
}
