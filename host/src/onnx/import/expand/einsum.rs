//! `Einsum` as `Transpose`, `Reshape`, `ReduceSum`, `Mul` and `MatMul`:
//!
//! 1. the equation is parsed (spaces ignored; `...` stands for the leading dimensions an
//!    operand has beyond its letters, given letters of their own; without `->` the output is
//!    the letters seen once, in alphabetical order, after the ellipsis's);
//! 2. a letter repeated within an operand takes the diagonal: the operand times an identity
//!    mask over the two axes, summed over the second;
//! 3. letters that no other operand and not the output has are summed away;
//! 4. operands are combined left to right: the letters both have and later operands or the
//!    output need are batch axes, those both have and nothing later needs are contracted, the
//!    rest are each side's own: `[batch, own, contracted] · [batch, contracted, own]` by one
//!    `MatMul`, reshaped back to letters;
//! 5. the result is transposed to the output's order.

use std::collections::HashMap;

use super::Expansion;
use crate::onnx::import::{
    Importer, NResult, Node, attributes::attr_string, invalid, queue::Pending, unsupported,
};

/// An operand while the expansion is built: its value name and the letter of each axis.
#[derive(Debug, Clone)]
struct Term {
    name: String,
    letters: Vec<char>,
}

/// The letters of each input and of the output, the ellipsis's axes given characters of a
/// private-use range that no equation can hold.
fn parse(eq: &str, ranks: &[usize]) -> NResult<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_owned(), Some(r.to_owned())),
        None => (eq.clone(), None),
    };
    let parts: Vec<&str> = lhs.split(',').collect();
    if parts.len() != ranks.len() {
        return Err(invalid(format!(
            "the equation has {} operands, the node {}",
            parts.len(),
            ranks.len()
        )));
    }
    // The ellipsis's axes: letters from a private range, the same for every operand
    // (right-aligned, as numpy broadcasts them).
    let private = |k: usize| char::from_u32(0xE000 + k as u32).unwrap_or('\u{E000}');
    let mut ellipsis_rank = 0;
    let mut inputs = Vec::with_capacity(parts.len());
    for (part, &rank) in parts.iter().zip(ranks) {
        let letters: Vec<char> = part.replace("...", "").chars().collect();
        if letters.iter().any(|c| !c.is_ascii_alphabetic()) {
            return Err(invalid(format!("operand {part:?} of the equation")));
        }
        let mut v = Vec::with_capacity(rank);
        if let Some((before, after)) = part.split_once("...") {
            let e = rank
                .checked_sub(letters.len())
                .ok_or_else(|| invalid(format!("operand {part:?} for rank {rank}")))?;
            ellipsis_rank = ellipsis_rank.max(e);
            v.extend(before.chars());
            // Right-aligned: the last of the ellipsis's axes is the same letter everywhere.
            v.extend((0..e).map(|k| private(k + 64 - e)));
            v.extend(after.chars());
        } else {
            if letters.len() != rank {
                return Err(invalid(format!("operand {part:?} for rank {rank}")));
            }
            v.extend(letters);
        }
        inputs.push(v);
    }
    let ellipsis: Vec<char> = (0..ellipsis_rank)
        .map(|k| private(k + 64 - ellipsis_rank))
        .collect();
    let output = match rhs {
        Some(r) => {
            let mut v = Vec::new();
            if let Some((before, after)) = r.split_once("...") {
                v.extend(before.chars());
                v.extend(ellipsis.iter().copied());
                v.extend(after.chars());
            } else {
                v.extend(r.chars());
            }
            if v.iter().any(|c| c.is_ascii() && !c.is_ascii_alphabetic()) {
                return Err(invalid(format!("the output {r:?} of the equation")));
            }
            v
        }
        None => {
            let mut counts: HashMap<char, usize> = HashMap::new();
            for c in inputs.iter().flatten().filter(|c| c.is_ascii()) {
                *counts.entry(*c).or_default() += 1;
            }
            let mut once: Vec<char> = counts
                .into_iter()
                .filter(|&(_, k)| k == 1)
                .map(|(c, _)| c)
                .collect();
            once.sort_unstable();
            ellipsis.iter().copied().chain(once).collect()
        }
    };
    Ok((inputs, output))
}

impl Importer {
    /// `Einsum`.
    pub(in crate::onnx::import) fn einsum(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let eq = attr_string(n, "equation")?.ok_or_else(|| invalid("equation is required"))?;
        let mut names = Vec::new();
        let mut shapes = Vec::new();
        for i in 0..n.proto.input.len() {
            let (name, v) = self.req(n, i)?;
            shapes.push(self.shape(&v)?);
            names.push(name);
        }
        let ranks: Vec<usize> = shapes.iter().map(Vec::len).collect();
        let (inputs, output) = parse(&eq, &ranks)?;
        // Every letter's extent (1 broadcasts, as numpy's einsum allows).
        let mut dims: HashMap<char, i64> = HashMap::new();
        for (letters, shape) in inputs.iter().zip(&shapes) {
            for (&c, &d) in letters.iter().zip(shape) {
                let d = i64::from(d);
                let e = dims.entry(c).or_insert(d);
                if *e != d && d != 1 {
                    if *e == 1 {
                        *e = d;
                    } else {
                        return Err(invalid(format!("letter {c} is {e} and {d} long")));
                    }
                }
            }
        }
        if let Some(c) = output.iter().find(|c| !dims.contains_key(c)) {
            return Err(invalid(format!("output letter {c} is in no operand")));
        }
        let out_name = crate::onnx::import::expand::rearrange::first_output(n)?;
        let mut e = Expansion::new(self, n);
        let mut terms: Vec<Term> = Vec::new();
        for (name, letters) in names.iter().zip(&inputs) {
            terms.push(diagonals(&mut e, name, letters, &dims)?);
        }
        let needed_after = |k: usize, terms: &[Term]| -> Vec<char> {
            let mut v: Vec<char> = output.clone();
            for t in &terms[k..] {
                v.extend(t.letters.iter().copied());
            }
            v
        };
        // Sum away the letters only one operand has and nothing needs.
        for k in 0..terms.len() {
            let mut others: Vec<char> = output.clone();
            for (j, t) in terms.iter().enumerate() {
                if j != k {
                    others.extend(t.letters.iter().copied());
                }
            }
            terms[k] = sum_out(&mut e, &terms[k], &others);
        }
        let mut acc = terms[0].clone();
        for k in 1..terms.len() {
            let later = needed_after(k + 1, &terms);
            acc = combine(&mut e, &acc, &terms[k], &later, &dims)?;
        }
        // What is left beyond the output is summed; then the output's order.
        let acc = sum_out(&mut e, &acc, &output);
        if acc.letters.len() != output.len() {
            return Err(unsupported(format!(
                "Einsum {eq:?}: output letters broadcast"
            )));
        }
        let perm: Vec<i64> = output
            .iter()
            .map(|c| acc.letters.iter().position(|l| l == c).unwrap_or(0) as i64)
            .collect();
        let y = if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
            acc.name
        } else {
            e.transpose(&acc.name, &perm)
        };
        e.bind(&y, &out_name);
        Ok(e.finish())
    }
}

/// The operand with each repeated letter reduced to its diagonal.
fn diagonals(
    e: &mut Expansion,
    name: &str,
    letters: &[char],
    dims: &HashMap<char, i64>,
) -> NResult<Term> {
    let mut t = Term {
        name: name.to_owned(),
        letters: letters.to_vec(),
    };
    while let Some((p, q)) = repeated(&t.letters) {
        let d = dims[&t.letters[p]];
        super::check_elements(d * d, "a diagonal's mask")?;
        let mut values = vec![0f32; (d * d) as usize];
        for i in 0..d as usize {
            values[i * d as usize + i] = 1.0;
        }
        let mut shape = vec![1i64; t.letters.len()];
        shape[p] = d;
        shape[q] = d;
        let eye = e.f32s(&values, &shape);
        let eye = e.op("CastLike", &[&eye, &t.name], Vec::new());
        let masked = e.op("Mul", &[&t.name, &eye], Vec::new());
        let name = e.reduce("ReduceSum", &masked, &[q as i64], false);
        let mut letters = t.letters.clone();
        letters.remove(q);
        t = Term { name, letters };
    }
    Ok(t)
}

/// The first letter that appears twice: its two positions.
fn repeated(letters: &[char]) -> Option<(usize, usize)> {
    for (p, c) in letters.iter().enumerate() {
        if let Some(q) = letters[p + 1..].iter().position(|d| d == c) {
            return Some((p, p + 1 + q));
        }
    }
    None
}

/// `t` summed over the letters `keep` does not hold.
fn sum_out(e: &mut Expansion, t: &Term, keep: &[char]) -> Term {
    let axes: Vec<i64> = t
        .letters
        .iter()
        .enumerate()
        .filter(|(_, c)| !keep.contains(c))
        .map(|(i, _)| i as i64)
        .collect();
    if axes.is_empty() {
        return t.clone();
    }
    Term {
        name: e.reduce("ReduceSum", &t.name, &axes, false),
        letters: t
            .letters
            .iter()
            .copied()
            .filter(|c| keep.contains(c))
            .collect(),
    }
}

/// `a` and `b` combined: their shared letters that `later` needs are batch axes, the other
/// shared ones contracted, by one `MatMul`.
fn combine(
    e: &mut Expansion,
    a: &Term,
    b: &Term,
    later: &[char],
    dims: &HashMap<char, i64>,
) -> NResult<Term> {
    let shared: Vec<char> = a
        .letters
        .iter()
        .copied()
        .filter(|c| b.letters.contains(c))
        .collect();
    let batch: Vec<char> = shared
        .iter()
        .copied()
        .filter(|c| later.contains(c))
        .collect();
    let contracted: Vec<char> = shared
        .iter()
        .copied()
        .filter(|c| !later.contains(c))
        .collect();
    let own_a: Vec<char> = a
        .letters
        .iter()
        .copied()
        .filter(|c| !shared.contains(c))
        .collect();
    let own_b: Vec<char> = b
        .letters
        .iter()
        .copied()
        .filter(|c| !shared.contains(c))
        .collect();
    let size = |ls: &[char]| ls.iter().map(|c| dims[c]).product::<i64>();
    let arrange = |e: &mut Expansion, t: &Term, order: &[char], shape: &[i64]| {
        let perm: Vec<i64> = order
            .iter()
            .map(|c| t.letters.iter().position(|l| l == c).unwrap_or(0) as i64)
            .collect();
        let x = if perm.iter().enumerate().all(|(i, &p)| i as i64 == p) {
            t.name.clone()
        } else {
            e.transpose(&t.name, &perm)
        };
        e.reshape(&x, shape)
    };
    let (nb, na, nc, nbb) = (size(&batch), size(&own_a), size(&contracted), size(&own_b));
    let a_order: Vec<char> = [batch.clone(), own_a.clone(), contracted.clone()].concat();
    let b_order: Vec<char> = [batch.clone(), contracted.clone(), own_b.clone()].concat();
    let x = arrange(e, a, &a_order, &[nb, na, nc]);
    let y = arrange(e, b, &b_order, &[nb, nc, nbb]);
    let p = e.op("MatMul", &[&x, &y], Vec::new());
    let letters: Vec<char> = [batch.clone(), own_a.clone(), own_b.clone()].concat();
    let shape: Vec<i64> = letters.iter().map(|c| dims[c]).collect();
    let name = e.reshape(&p, &shape);
    Ok(Term { name, letters })
}
