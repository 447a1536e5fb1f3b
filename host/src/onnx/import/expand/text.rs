//! `TfIdfVectorizer` on integer tokens, as comparisons, products and sums: for each n-gram of
//! the pool (of a size from `min_gram_length` to `max_gram_length`) and each distance `d`
//! between its tokens (1 to `max_skip_count + 1`; unigrams once, at distance 1), the row's
//! windows `x[:, i], x[:, i + d], ...` are compared with the n-gram token by token and the
//! matches counted; the mode turns each n-gram's count into its value (`TF` the count, `IDF`
//! its weight (or 1) where the count is positive, `TFIDF` the count times its weight (or the
//! count); the weights are per n-gram, in the pool's order, as the operator's definition and
//! onnxruntime have them), which lands in the output column `ngram_indexes` gives it (the
//! values of n-grams sharing a column add up). The output is float, `[B, columns]`
//! for a `[B, C]` input and `[columns]` for a `[C]` one. String tokens (`pool_strings`) are
//! left out, as strings are.

use super::{Expansion, int, rearrange::first_output};
use crate::onnx::import::{
    Importer, NResult, Node,
    attributes::{attr_floats, attr_int, attr_ints, attr_string},
    invalid,
    queue::Pending,
    unsupported,
};

impl Importer {
    /// `TfIdfVectorizer` of integer tokens.
    pub(in crate::onnx::import) fn tfidf_vectorizer(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let pool = attr_ints(n, "pool_int64s")?.ok_or_else(|| {
            unsupported("TfIdfVectorizer of string tokens (pool_strings): strings are left out")
        })?;
        let counts =
            attr_ints(n, "ngram_counts")?.ok_or_else(|| invalid("ngram_counts is required"))?;
        let indexes =
            attr_ints(n, "ngram_indexes")?.ok_or_else(|| invalid("ngram_indexes is required"))?;
        let (lo, hi) = (
            attr_int(n, "min_gram_length")?
                .ok_or_else(|| invalid("min_gram_length is required"))?,
            attr_int(n, "max_gram_length")?
                .ok_or_else(|| invalid("max_gram_length is required"))?,
        );
        let skips = attr_int(n, "max_skip_count")?.unwrap_or(0);
        let mode = attr_string(n, "mode")?.ok_or_else(|| invalid("mode is required"))?;
        let weights = attr_floats(n, "weights")?;
        if lo < 1 || hi < lo || skips < 0 || indexes.iter().any(|&i| i < 0) {
            return Err(invalid(format!(
                "gram lengths {lo}..={hi}, max_skip_count {skips}, ngram_indexes {indexes:?}"
            )));
        }
        let columns = indexes.iter().max().map_or(0, |&m| m + 1);
        super::check_elements(columns, "TfIdfVectorizer's output")?;
        let (xn, xv) = self.req(n, 0)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let (rows, len, flat) = match xs.as_slice() {
            [c] => (1, *c, true),
            [b, c] => (*b, *c, false),
            s => {
                return Err(invalid(format!(
                    "the input must be [C] or [B, C], got {s:?}"
                )));
            }
        };
        // The pool's n-grams: (size, tokens, output column, ordinal), in the pool's order.
        let mut grams: Vec<(i64, Vec<i64>, usize, usize)> = Vec::new();
        let mut ordinal = 0usize;
        for (size, window) in counts.iter().enumerate() {
            let size = size as i64 + 1;
            let start = usize::try_from(*window).map_err(|_| invalid("ngram_counts"))?;
            let end = counts
                .get(size as usize)
                .map_or(pool.len(), |&e| usize::try_from(e).unwrap_or(usize::MAX))
                .min(pool.len());
            for tokens in pool
                .get(start..end)
                .unwrap_or(&[])
                .chunks_exact(size as usize)
            {
                let column = *indexes
                    .get(ordinal)
                    .ok_or_else(|| invalid("fewer ngram_indexes than n-grams"))?;
                if (lo..=hi).contains(&size) {
                    grams.push((size, tokens.to_vec(), column as usize, ordinal));
                }
                ordinal += 1;
            }
        }
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let x = if flat {
            e.reshape(&xn, &[1, len])
        } else {
            xn.clone()
        };
        let float = || int("to", 1);
        let zero = e.f32s(&[0.0], &[]);
        let zeros = e.f32s(&vec![0.0; rows as usize], &[rows, 1]);
        let mut per_column: Vec<Option<String>> = vec![None; columns as usize];
        if let Some(w) = weights.as_ref().filter(|w| !w.is_empty())
            && w.len() < ordinal
        {
            return Err(invalid(format!(
                "{} weights for {ordinal} n-grams",
                w.len()
            )));
        }
        let weight = |k: usize| weights.as_ref().filter(|w| !w.is_empty()).map(|w| w[k]);
        if !matches!(mode.as_str(), "TF" | "IDF" | "TFIDF") {
            return Err(invalid(format!("mode {mode:?}: TF, IDF or TFIDF")));
        }
        for (size, tokens, column, k) in &grams {
            let mut count: Option<String> = None;
            let distances = if *size == 1 { 1 } else { skips + 1 };
            for d in 1..=distances {
                let width = len - (size - 1) * d;
                if width <= 0 {
                    continue;
                }
                let mut matched: Option<String> = None;
                for (j, &t) in tokens.iter().enumerate() {
                    let at = j as i64 * d;
                    let window = e.slice(&x, &[at], &[at + width], &[1]);
                    let token = e.i64s(&[t], &[]);
                    let token = e.op("CastLike", &[&token, &x], Vec::new());
                    let eq = e.op("Equal", &[&window, &token], Vec::new());
                    let eq = e.op("Cast", &[&eq], vec![float()]);
                    matched = Some(match matched {
                        None => eq,
                        Some(m) => e.op("Mul", &[&m, &eq], Vec::new()),
                    });
                }
                let Some(m) = matched else { continue };
                let c = e.reduce("ReduceSum", &m, &[1], true);
                count = Some(match count {
                    None => c,
                    Some(sum) => e.op("Add", &[&sum, &c], Vec::new()),
                });
            }
            let Some(count) = count else { continue };
            let value = match (mode.as_str(), weight(*k)) {
                ("IDF", w) => {
                    let positive = e.op("Greater", &[&count, &zero], Vec::new());
                    let w = e.f32s(&[w.unwrap_or(1.0)], &[]);
                    e.op("Where", &[&positive, &w, &zero], Vec::new())
                }
                ("TFIDF", Some(w)) => {
                    let w = e.f32s(&[w], &[]);
                    e.op("Mul", &[&count, &w], Vec::new())
                }
                _ => count,
            };
            let slot = &mut per_column[*column];
            *slot = Some(match slot.take() {
                None => value,
                Some(v) => e.op("Add", &[&v, &value], Vec::new()),
            });
        }
        let cols: Vec<String> = per_column
            .into_iter()
            .map(|c| c.unwrap_or_else(|| zeros.clone()))
            .collect();
        let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
        let y = if refs.len() == 1 {
            refs[0].to_owned()
        } else {
            e.op("Concat", &refs, vec![int("axis", 1)])
        };
        let y = if flat { e.reshape(&y, &[columns]) } else { y };
        e.bind(&y, &out);
        Ok(e.finish())
    }
}
