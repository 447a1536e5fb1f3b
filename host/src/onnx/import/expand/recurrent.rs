//! The recurrent operators `RNN`, `GRU` and `LSTM`, unrolled over the sequence (its length is
//! the input's shape, known at import):
//!
//! - the input's products with `W` for every step at once (`X · Wᵀ + Wb`, one `Gemm` with
//!   `transB` of the steps as rows), then per step the state's product with `R` (`H · Rᵀ +
//!   Rb`, a `Gemm` with `transB`: a `FullyConnected` reading `R` as stored when it is a
//!   constant, nothing transposed) and the gates sliced from it;
//! - the gates as the operators define them: RNN `f(x + h)`; GRU `z`, `r` and `h̃` (with
//!   `linear_before_reset` either way) and `H = (1 - z) ⊙ h̃ + z ⊙ H`; LSTM `i`, `o`, `f`, `c`
//!   with peepholes `P`, `input_forget` and `C = f ⊙ C + i ⊙ c̃`, `H = o ⊙ h(C)`; `clip` bounds
//!   every gate's input; `activations` (with `activation_alpha`/`activation_beta`) replace
//!   the defaults;
//! - `forward`, `reverse` and `bidirectional` directions, `layout` 0 and 1, initial states;
//! - `sequence_lens`: a batch entry's steps at and after its length keep its state and give
//!   zeros in `Y` (forward; in reverse only when every length is the full sequence).

use super::{Expansion, float, int};
use crate::onnx::import::{
    Importer, NResult, Node, Value,
    attributes::{attr_float, attr_floats, attr_int, attr_strings},
    invalid,
    queue::Pending,
    unsupported,
};

/// The cell a recurrent operator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    /// Gates per hidden unit in `W` and `R`.
    fn gates(self) -> i64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The default activations of one direction.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function with its parameters.
#[derive(Debug, Clone)]
struct Activation {
    name: String,
    alpha: Option<f32>,
    beta: Option<f32>,
}

/// The activations of every direction, with their parameters taken in order from
/// `activation_alpha` and `activation_beta` by the functions that have them.
fn activations(n: &Node<'_>, cell: Cell, dirs: usize) -> NResult<Vec<Activation>> {
    let per = cell.default_activations().len();
    let names = match attr_strings(n, "activations")? {
        Some(v) if v.len() == per * dirs => v,
        Some(v) if v.len() == per && dirs == 2 => [v.clone(), v].concat(),
        Some(v) => {
            return Err(invalid(format!(
                "{} activations for {dirs} direction(s) of {per}",
                v.len()
            )));
        }
        None => (0..dirs)
            .flat_map(|_| cell.default_activations().iter().map(|s| (*s).to_owned()))
            .collect(),
    };
    let alphas = attr_floats(n, "activation_alpha")?.unwrap_or_default();
    let betas = attr_floats(n, "activation_beta")?.unwrap_or_default();
    let (mut a, mut b) = (alphas.iter(), betas.iter());
    names
        .into_iter()
        .map(|name| {
            let (takes_alpha, takes_beta) = match name.to_ascii_lowercase().as_str() {
                "relu" | "tanh" | "sigmoid" | "softsign" | "softplus" => (false, false),
                "leakyrelu" | "thresholdedrelu" | "elu" => (true, false),
                "affine" | "scaledtanh" | "hardsigmoid" => (true, true),
                _ => return Err(unsupported(format!("activation {name}"))),
            };
            Ok(Activation {
                alpha: if takes_alpha { a.next().copied() } else { None },
                beta: if takes_beta { b.next().copied() } else { None },
                name,
            })
        })
        .collect()
}

/// What the unrolled steps share.
struct Unroll<'a> {
    cell: Cell,
    hidden: i64,
    elem: i32,
    /// The input, for `CastLike`.
    like: &'a str,
    clip: Option<f32>,
    input_forget: bool,
    linear_before_reset: bool,
}

impl Unroll<'_> {
    fn act(&self, e: &mut Expansion, a: &Activation, x: &str) -> String {
        let scalar = |e: &mut Expansion, v: f32| e.scalar_like(v, self.like, self.elem);
        match a.name.to_ascii_lowercase().as_str() {
            "relu" => e.op("Relu", &[x], Vec::new()),
            "tanh" => e.op("Tanh", &[x], Vec::new()),
            "sigmoid" => e.op("Sigmoid", &[x], Vec::new()),
            "softsign" => e.op("Softsign", &[x], Vec::new()),
            "softplus" => e.op("Softplus", &[x], Vec::new()),
            "leakyrelu" => e.op(
                "LeakyRelu",
                &[x],
                vec![float("alpha", a.alpha.unwrap_or(0.01))],
            ),
            "thresholdedrelu" => e.op(
                "ThresholdedRelu",
                &[x],
                vec![float("alpha", a.alpha.unwrap_or(1.0))],
            ),
            "elu" => e.op("Elu", &[x], vec![float("alpha", a.alpha.unwrap_or(1.0))]),
            "hardsigmoid" => e.op(
                "HardSigmoid",
                &[x],
                vec![
                    float("alpha", a.alpha.unwrap_or(0.2)),
                    float("beta", a.beta.unwrap_or(0.5)),
                ],
            ),
            "affine" => {
                let al = scalar(e, a.alpha.unwrap_or(1.0));
                let be = scalar(e, a.beta.unwrap_or(0.0));
                let m = e.op("Mul", &[x, &al], Vec::new());
                e.op("Add", &[&m, &be], Vec::new())
            }
            // "scaledtanh", the only other name `activations` accepts.
            _ => {
                let al = scalar(e, a.alpha.unwrap_or(1.0));
                let be = scalar(e, a.beta.unwrap_or(1.0));
                let m = e.op("Mul", &[x, &be], Vec::new());
                let t = e.op("Tanh", &[&m], Vec::new());
                e.op("Mul", &[&t, &al], Vec::new())
            }
        }
    }

    /// `x` bounded to `[-clip, clip]` when `clip` is set.
    fn clip(&self, e: &mut Expansion, x: String) -> String {
        let Some(c) = self.clip else {
            return x;
        };
        let lo = e.scalar_like(-c, self.like, self.elem);
        let hi = e.scalar_like(c, self.like, self.elem);
        let m = e.op("Max", &[&x, &lo], Vec::new());
        e.op("Min", &[&m, &hi], Vec::new())
    }

    /// Gate `k` (of `gates`) of a `[batch, gates · hidden]` tensor.
    fn gate(&self, e: &mut Expansion, x: &str, k: i64) -> String {
        e.slice(x, &[k * self.hidden], &[(k + 1) * self.hidden], &[1])
    }

    /// `h · rᵀ`: a `Gemm` with `transB` (a `FullyConnected` reading `r` as it is stored when
    /// it is constant, nothing transposed).
    fn times_transposed(e: &mut Expansion, h: &str, r: &str) -> String {
        e.op("Gemm", &[h, r], vec![int("transB", 1)])
    }

    /// One step: the state `(h, c)` after input products `xt` (`[batch, gates · hidden]`, its
    /// biases added); `rec` is `R` of this direction (`[gates · hidden, hidden]`), `rb` `R`'s
    /// bias when it is kept apart (GRU), `p` the peepholes `(i, o, f)`.
    #[allow(clippy::too_many_arguments)] // reason: one step's whole state, named as in ONNX
    fn step(
        &self,
        e: &mut Expansion,
        acts: &[Activation],
        xt: &str,
        rec: &str,
        rb: Option<&str>,
        p: Option<&(String, String, String)>,
        h: &str,
        c: Option<&str>,
    ) -> (String, Option<String>) {
        match self.cell {
            Cell::Rnn => {
                let hr = Self::times_transposed(e, h, rec);
                let a = e.op("Add", &[xt, &hr], Vec::new());
                let a = self.clip(e, a);
                (self.act(e, &acts[0], &a), None)
            }
            Cell::Lstm => {
                let hr = Self::times_transposed(e, h, rec);
                let a = e.op("Add", &[xt, &hr], Vec::new());
                let (mut i, mut o, mut f) = (
                    self.gate(e, &a, 0),
                    self.gate(e, &a, 1),
                    self.gate(e, &a, 2),
                );
                let cc = self.gate(e, &a, 3);
                let c = c.unwrap_or_default().to_owned();
                if let Some((pi, _, pf)) = p {
                    let m = e.op("Mul", &[pi, &c], Vec::new());
                    i = e.op("Add", &[&i, &m], Vec::new());
                    let m = e.op("Mul", &[pf, &c], Vec::new());
                    f = e.op("Add", &[&f, &m], Vec::new());
                }
                let i = self.clip(e, i);
                let it = self.act(e, &acts[0], &i);
                let ft = if self.input_forget {
                    let one = e.scalar_like(1.0, self.like, self.elem);
                    e.op("Sub", &[&one, &it], Vec::new())
                } else {
                    let f = self.clip(e, f);
                    self.act(e, &acts[0], &f)
                };
                let cc = self.clip(e, cc);
                let ct = self.act(e, &acts[1], &cc);
                let kept = e.op("Mul", &[&ft, &c], Vec::new());
                let new = e.op("Mul", &[&it, &ct], Vec::new());
                let cn = e.op("Add", &[&kept, &new], Vec::new());
                if let Some((_, po, _)) = p {
                    let m = e.op("Mul", &[po, &cn], Vec::new());
                    o = e.op("Add", &[&o, &m], Vec::new());
                }
                let o = self.clip(e, o);
                let ot = self.act(e, &acts[0], &o);
                let hc = self.act(e, &acts[2], &cn);
                (e.op("Mul", &[&ot, &hc], Vec::new()), Some(cn))
            }
            Cell::Gru => {
                let h2 = 2 * self.hidden;
                let (xz, xr, xh) = (
                    self.gate(e, xt, 0),
                    self.gate(e, xt, 1),
                    self.gate(e, xt, 2),
                );
                let (hz, hr, hh);
                if self.linear_before_reset {
                    let m = Self::times_transposed(e, h, rec);
                    let m = match rb {
                        Some(b) => e.op("Add", &[&m, b], Vec::new()),
                        None => m,
                    };
                    hz = self.gate(e, &m, 0);
                    hr = self.gate(e, &m, 1);
                    hh = Some(self.gate(e, &m, 2));
                } else {
                    let rzr = e.slice(rec, &[0], &[h2], &[0]);
                    let m = Self::times_transposed(e, h, &rzr);
                    let m = match rb {
                        Some(b) => {
                            let bzr = e.slice(b, &[0], &[h2], &[0]);
                            e.op("Add", &[&m, &bzr], Vec::new())
                        }
                        None => m,
                    };
                    hz = self.gate(e, &m, 0);
                    hr = self.gate(e, &m, 1);
                    hh = None;
                }
                let z = e.op("Add", &[&xz, &hz], Vec::new());
                let z = self.clip(e, z);
                let z = self.act(e, &acts[0], &z);
                let r = e.op("Add", &[&xr, &hr], Vec::new());
                let r = self.clip(e, r);
                let r = self.act(e, &acts[0], &r);
                let recur = match hh {
                    Some(hh) => e.op("Mul", &[&r, &hh], Vec::new()),
                    None => {
                        let rh = e.op("Mul", &[&r, h], Vec::new());
                        let rh_rows = e.slice(rec, &[h2], &[h2 + self.hidden], &[0]);
                        let m = Self::times_transposed(e, &rh, &rh_rows);
                        match rb {
                            Some(b) => {
                                let bh = e.slice(b, &[h2], &[h2 + self.hidden], &[0]);
                                e.op("Add", &[&m, &bh], Vec::new())
                            }
                            None => m,
                        }
                    }
                };
                let pre = e.op("Add", &[&xh, &recur], Vec::new());
                let pre = self.clip(e, pre);
                let ht = self.act(e, &acts[1], &pre);
                let one = e.scalar_like(1.0, self.like, self.elem);
                let keep = e.op("Sub", &[&one, &z], Vec::new());
                let a = e.op("Mul", &[&keep, &ht], Vec::new());
                let b = e.op("Mul", &[&z, h], Vec::new());
                (e.op("Add", &[&a, &b], Vec::new()), None)
            }
        }
    }
}

impl Importer {
    /// `RNN`, `GRU` and `LSTM`.
    pub(in crate::onnx::import) fn recurrent(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let cell = match n.op() {
            "RNN" => Cell::Rnn,
            "GRU" => Cell::Gru,
            _ => Cell::Lstm,
        };
        let hidden =
            attr_int(n, "hidden_size")?.ok_or_else(|| invalid("hidden_size is required"))?;
        if hidden <= 0 {
            return Err(invalid(format!("hidden_size {hidden}")));
        }
        let direction = crate::onnx::import::attributes::attr_string(n, "direction")?
            .unwrap_or_else(|| "forward".to_owned());
        let dirs: Vec<bool> = match direction.as_str() {
            "forward" => vec![false],
            "reverse" => vec![true],
            "bidirectional" => vec![false, true],
            other => return Err(invalid(format!("direction {other:?}"))),
        };
        let layout = attr_int(n, "layout")?.unwrap_or(0) != 0;
        let acts = activations(n, cell, dirs.len())?;
        let per = cell.default_activations().len();
        let (xn, xv) = self.req(n, 0)?;
        let (wn, _) = self.req(n, 1)?;
        let (rn, _) = self.req(n, 2)?;
        let bias = self.arg(n, 3)?.map(|(name, _)| name);
        let lens = self.arg(n, 4)?;
        let h0 = self.arg(n, 5)?.map(|(name, _)| name);
        let (c0, peep) = if cell == Cell::Lstm {
            (
                self.arg(n, 6)?.map(|(name, _)| name),
                self.arg(n, 7)?.map(|(name, _)| name),
            )
        } else {
            (None, None)
        };
        let xs = self.shape(&xv)?;
        let [a, b, input] = <[u32; 3]>::try_from(xs.as_slice())
            .map_err(|_| invalid(format!("X must be 3-D, got {xs:?}")))?;
        let (seq, batch) = if layout { (b, a) } else { (a, b) };
        let (seq, batch) = (i64::from(seq), i64::from(batch));
        // In reverse, lengths shorter than the sequence would reverse each entry on its own.
        if dirs.contains(&true)
            && let Some((ln, lv)) = &lens
        {
            let full = matches!(lv, Value::I64(c) if c.data.iter().all(|&l| l == seq));
            if !full {
                return Err(unsupported(format!(
                    "{} in reverse with sequence_lens ({ln}) that are not all the full length",
                    n.op()
                )));
            }
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let outputs = n.proto.output.clone();
        let out = |i: usize| outputs.get(i).filter(|o| !o.is_empty()).cloned();

        let mut e = Expansion::new(self, n);
        let x = if layout {
            e.transpose(&xn, &[1, 0, 2])
        } else {
            xn.clone()
        };
        let u = Unroll {
            cell,
            hidden,
            elem,
            like: &xn,
            clip: attr_float(n, "clip")?,
            input_forget: attr_int(n, "input_forget")?.unwrap_or(0) != 0,
            linear_before_reset: attr_int(n, "linear_before_reset")?.unwrap_or(0) != 0,
        };
        let g = cell.gates();
        let lens = match &lens {
            Some((ln, _)) => {
                let l = e.op("Cast", &[ln], vec![int("to", 7)]);
                Some(e.reshape(&l, &[batch, 1]))
            }
            None => None,
        };
        super::check_elements(batch * hidden, "the initial state")?;
        let zeros = e.f32s_like(
            &vec![0.0; (batch * hidden) as usize],
            &[batch, hidden],
            &xn,
            elem,
        );
        let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
        for (d, &reverse) in dirs.iter().enumerate() {
            let d = d as i64;
            let pick = |e: &mut Expansion, t: &str, axis: i64| {
                let s = e.slice(t, &[d], &[d + 1], &[axis]);
                e.squeeze(&s, &[axis])
            };
            // `X · Wᵀ` of every step at once, as one `[seq · batch, input]` product.
            let w = pick(&mut e, &wn, 0);
            let r = pick(&mut e, &rn, 0);
            let rows = e.reshape(&x, &[seq * batch, i64::from(input)]);
            let xw = Unroll::times_transposed(&mut e, &rows, &w);
            let mut xw = e.reshape(&xw, &[seq, batch, g * hidden]);
            let mut rb = None;
            if let Some(bn) = &bias {
                let bd = pick(&mut e, bn, 0);
                let wb = e.slice(&bd, &[0], &[g * hidden], &[0]);
                let rbd = e.slice(&bd, &[g * hidden], &[2 * g * hidden], &[0]);
                xw = e.op("Add", &[&xw, &wb], Vec::new());
                if cell == Cell::Gru {
                    rb = Some(rbd);
                } else {
                    xw = e.op("Add", &[&xw, &rbd], Vec::new());
                }
            }
            let p = match &peep {
                Some(pn) => {
                    let pd = pick(&mut e, pn, 0);
                    let part = |e: &mut Expansion, k: i64| {
                        e.slice(&pd, &[k * hidden], &[(k + 1) * hidden], &[0])
                    };
                    Some((part(&mut e, 0), part(&mut e, 1), part(&mut e, 2)))
                }
                None => None,
            };
            let state = |e: &mut Expansion, s: &Option<String>| match s {
                Some(name) => {
                    let t = if layout {
                        e.transpose(name, &[1, 0, 2])
                    } else {
                        name.clone()
                    };
                    pick(e, &t, 0)
                }
                None => zeros.clone(),
            };
            let mut h = state(&mut e, &h0);
            let mut c = (cell == Cell::Lstm).then(|| state(&mut e, &c0));
            let order: Vec<i64> = if reverse {
                (0..seq).rev().collect()
            } else {
                (0..seq).collect()
            };
            let acts_d = &acts[d as usize * per..(d as usize + 1) * per];
            let mut ys_d: Vec<(i64, String)> = Vec::with_capacity(seq as usize);
            for t in order {
                let xt = pick_step(&mut e, &xw, t);
                let (hn, cn) = u.step(
                    &mut e,
                    acts_d,
                    &xt,
                    &r,
                    rb.as_deref(),
                    p.as_ref(),
                    &h,
                    c.as_deref(),
                );
                let (hn, cn, y) = match &lens {
                    Some(l) => {
                        let tc = e.i64s(&[t], &[]);
                        let live = e.op("Less", &[&tc, l], Vec::new());
                        let hk = e.op("Where", &[&live, &hn, &h], Vec::new());
                        let ck = match (&cn, &c) {
                            (Some(cn), Some(c)) => Some(e.op("Where", &[&live, cn, c], Vec::new())),
                            _ => None,
                        };
                        let y = e.op("Where", &[&live, &hn, &zeros], Vec::new());
                        (hk, ck, y)
                    }
                    None => (hn.clone(), cn, hn),
                };
                ys_d.push((t, y));
                h = hn;
                c = cn;
            }
            ys_d.sort_by_key(|(t, _)| *t);
            if out(0).is_some() {
                let steps: Vec<String> =
                    ys_d.iter().map(|(_, y)| e.unsqueeze(y, &[0, 1])).collect();
                let refs: Vec<&str> = steps.iter().map(String::as_str).collect();
                ys.push(e.op("Concat", &refs, vec![int("axis", 0)]));
            }
            hs.push(e.unsqueeze(&h, &[0]));
            if let Some(c) = c {
                cs.push(e.unsqueeze(&c, &[0]));
            }
        }
        let concat = |e: &mut Expansion, parts: &[String], axis: i64| {
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            e.op("Concat", &refs, vec![int("axis", axis)])
        };
        if let Some(o) = out(0) {
            let y = concat(&mut e, &ys, 1);
            let y = if layout {
                e.transpose(&y, &[2, 0, 1, 3])
            } else {
                y
            };
            e.bind(&y, &o);
        }
        for (i, parts) in [(1, &hs), (2, &cs)] {
            if let Some(o) = out(i) {
                if parts.is_empty() {
                    return Err(invalid(format!("{} has no output {i}", n.op())));
                }
                let v = concat(&mut e, parts, 0);
                let v = if layout {
                    e.transpose(&v, &[1, 0, 2])
                } else {
                    v
                };
                e.bind(&v, &o);
            }
        }
        Ok(e.finish())
    }
}

/// Step `t` of the `[sequence, batch, …]` products: `[batch, …]`.
fn pick_step(e: &mut Expansion, xw: &str, t: i64) -> String {
    let s = e.slice(xw, &[t], &[t + 1], &[0]);
    e.squeeze(&s, &[0])
}
