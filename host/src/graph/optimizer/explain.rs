//! How an optimized network explains itself: `--explain` text and a Graphviz graph.

use std::{collections::BTreeMap, fmt::Write};

use backplane_api::{DataType, LayerKind, TensorInfo};

use super::{ExplainDetail, OptimizedNetwork, layer_label};

impl OptimizedNetwork {
    /// Per layer: backend, why, and every refusal, as text ([`ExplainDetail::All`]).
    pub fn explain(&self) -> String {
        self.explain_at(ExplainDetail::All)
    }

    /// Where the layers run and why, in as much detail as asked ([`ExplainDetail`]).
    pub fn explain_at(&self, detail: ExplainDetail) -> String {
        let mut s = String::new();
        for note in &self.notes {
            let _ = writeln!(s, "note: {note}");
        }
        if detail != ExplainDetail::All {
            self.write_summary(&mut s);
        }
        if detail == ExplainDetail::Summary {
            return s;
        }
        for (l, a) in self.network.layers().iter().zip(&self.assignments) {
            if detail == ExplainDetail::Layers && !l.computes() {
                continue;
            }
            let _ = writeln!(
                s,
                "{:<24} {:<22} -> {:<10} {}",
                l.name,
                l.kind().to_string(),
                a.backend,
                a.why
            );
            for r in &a.refusals {
                let _ = writeln!(
                    s,
                    "{:<24} {:<22}    refused by {}: {}",
                    "", "", r.backend, r.reason
                );
            }
            let inputs: Vec<&TensorInfo> = l
                .inputs
                .iter()
                .map(|&t| self.network.tensor_info(t))
                .collect();
            if inputs
                .iter()
                .copied()
                .chain(&l.outputs)
                .any(|t| t.data_type != DataType::Float32)
            {
                let list = |ts: &mut dyn Iterator<Item = &TensorInfo>| {
                    ts.map(type_text).collect::<Vec<_>>().join(", ")
                };
                let _ = writeln!(
                    s,
                    "{:<24} {:<22}    types: [{}] -> [{}]",
                    "",
                    "",
                    list(&mut inputs.iter().copied()),
                    list(&mut l.outputs.iter())
                );
            }
        }
        s
    }

    /// The summary of [`ExplainDetail::Summary`] (also the head of `Layers`).
    fn write_summary(&self, s: &mut String) {
        #[derive(Default)]
        struct Counts {
            compute: usize,
            fused: usize,
            copies: usize,
        }
        let mut per_backend: Vec<(&str, Counts)> = Vec::new();
        let mut other: BTreeMap<String, usize> = BTreeMap::new();
        /// A group of compute layers: backend, what and why, and the names.
        type Group<'a> = ((&'a str, String, String), Vec<&'a str>);
        // In order of first appearance.
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut copies: Vec<String> = Vec::new();
        for (l, a) in self.network.layers().iter().zip(&self.assignments) {
            let at = match per_backend.iter().position(|(b, _)| *b == a.backend) {
                Some(i) => i,
                None => {
                    per_backend.push((&a.backend, Counts::default()));
                    per_backend.len() - 1
                }
            };
            let counts = &mut per_backend[at].1;
            let kind = l.kind();
            if kind == LayerKind::MemCopy {
                counts.copies += 1;
                let from = l
                    .inputs
                    .first()
                    .map_or("?", |t| self.network.layers()[t.layer].name.as_str());
                copies.push(match &a.boundary {
                    Some(b) => format!("{} (of {from}: {b})", l.name),
                    None => format!("{} (of {from}, on {})", l.name, a.backend),
                });
                continue;
            }
            if !l.computes() {
                *other.entry(kind.to_string()).or_default() += 1;
                continue;
            }
            counts.compute += 1;
            let (what, why) = if a.replaced.is_empty() {
                let mut why = a.why.clone();
                for r in &a.refusals {
                    let _ = write!(why, "; refused by {}: {}", r.backend, r.reason);
                }
                (layer_label(&l.descriptor), why)
            } else {
                counts.fused += 1;
                let parts: Vec<&str> = a.replaced.iter().map(|(_, w)| w.as_str()).collect();
                (parts.join(" + "), format!("fused by {}", a.backend))
            };
            let key = (a.backend.as_str(), what, why);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, names)) => names.push(&l.name),
                None => groups.push((key, vec![&l.name])),
            }
        }
        let _ = writeln!(
            s,
            "{:<12} {:>14} {:>13} {:>14}",
            "backend", "compute layers", "fused chains", "memory copies"
        );
        for (backend, c) in &per_backend {
            let _ = writeln!(
                s,
                "{backend:<12} {:>14} {:>13} {:>14}",
                c.compute, c.fused, c.copies
            );
        }
        if !other.is_empty() {
            let parts: Vec<String> = other.iter().map(|(k, n)| format!("{n} {k}")).collect();
            let _ = writeln!(
                s,
                "not computing: {} (listed with --explain=all)",
                parts.join(", ")
            );
        }
        for c in &copies {
            let _ = writeln!(s, "memory copy: {c}");
        }
        let _ = writeln!(s, "\ncompute layers (--explain=layers lists each):");
        for ((backend, what, why), names) in &groups {
            let shown: Vec<&str> = names.iter().take(2).copied().collect();
            let more = if names.len() > 2 { ", …" } else { "" };
            let _ = writeln!(
                s,
                "{backend:<12} {:>4} × {what}: {why} ({}{more})",
                names.len(),
                shown.join(", ")
            );
        }
    }

    /// A Graphviz graph, one colour per backend.
    pub fn to_dot(&self) -> String {
        const COLOURS: [&str; 6] = [
            "lightblue",
            "palegreen",
            "orange",
            "plum",
            "khaki",
            "salmon",
        ];
        let used = self.backends_used();
        let mut s =
            String::from("digraph network {\n  rankdir=TB;\n  node [shape=box, style=filled];\n");
        for (i, (l, a)) in self
            .network
            .layers()
            .iter()
            .zip(&self.assignments)
            .enumerate()
        {
            let colour =
                COLOURS[used.iter().position(|b| *b == a.backend).unwrap_or(0) % COLOURS.len()];
            let label = format!("{}\\n{} on {}", l.name, l.kind(), a.backend).replace('"', "\\\"");
            let _ = writeln!(s, "  n{i} [label=\"{label}\", fillcolor={colour}];");
        }
        for (i, l) in self.network.layers().iter().enumerate() {
            for t in &l.inputs {
                let _ = writeln!(
                    s,
                    "  n{} -> n{i} [label=\"{}\"];",
                    t.layer,
                    self.network.tensor_info(*t)
                );
            }
        }
        s.push_str("}\n");
        s
    }
}

/// A tensor's data type for `--explain`, with its quantisation: `QAsymmU8(0.0235, 128)`,
/// `QSymmS8(per axis 0)`.
fn type_text(t: &TensorInfo) -> String {
    match t.quantization.as_ref().into_option() {
        None => t.data_type.to_string(),
        Some(q) => match q.per_axis.as_ref().into_option() {
            Some(p) => format!("{}(per axis {})", t.data_type, p.axis),
            None => format!("{}({}, {})", t.data_type, q.scale, q.offset),
        },
    }
}
