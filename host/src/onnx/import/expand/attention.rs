//! Attention (ONNX `Attention`, opset 23 and later) as a graph of `MatMul`, `Softmax` and
//! element-wise operators, following its definition step by step:
//!
//! 1. 3-D inputs `[batch, sequence, heads · size]` are split into heads (`Reshape`,
//!    `Transpose` to `[batch, heads, sequence, size]`); 4-D ones already are;
//! 2. `past_key`/`past_value` are concatenated before `K`/`V` along the sequence (the results
//!    are `present_key`/`present_value`);
//! 3. with fewer key/value heads than query heads (grouped-query attention) each key/value head
//!    is repeated for its group (`Unsqueeze`, `Expand`, `Reshape`);
//! 4. `Q · Kᵀ`, each side scaled by `√scale` (`scale` defaults to `1/√size`), then `softcap ·
//!    tanh(x / softcap)` when `softcap` is set;
//! 5. a bias added: the mask (a boolean one as 0 or -inf; a float one as it is; one shorter
//!    than the keys padded with -inf), the causal frontier (key `j` for query `i` iff `j ≤ i +
//!    past length`) and the sliding window (opset 25), the last two a constant;
//! 6. `Softmax` over the keys, a row whose bias masks every key giving zeros;
//! 7. `· V`, merged back to 3-D for 3-D inputs.
//!
//! `qk_matmul_output` is the product after the softcap (modes 0 and 1), with the bias (2) or
//! after the softmax (3). With `nonpad_kv_seqlen` (an external cache, opset 24) the keys from
//! each batch's length on are masked, and the causal and window offsets are that length minus
//! the query length, computed per batch at run time.

use super::{Expansion, int};
use crate::onnx::import::{
    Importer, NResult, Node,
    attributes::{attr_float, attr_int},
    invalid,
    queue::Pending,
};

impl Importer {
    /// `Attention`.
    pub(in crate::onnx::import) fn attention(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (qn, qv) = self.req(n, 0)?;
        let (kn, kv) = self.req(n, 1)?;
        let (vn, vv) = self.req(n, 2)?;
        let nonpad = self.arg(n, 6)?.map(|(name, _)| name);
        let mask = self.arg(n, 3)?;
        let past_k = self.arg(n, 4)?;
        let past_v = self.arg(n, 5)?;
        if past_k.is_some() != past_v.is_some() {
            return Err(invalid("past_key and past_value go together"));
        }
        if past_k.is_some() && nonpad.is_some() {
            return Err(invalid("nonpad_kv_seqlen with past_key and past_value"));
        }
        let qs = self.shape(&qv)?;
        let ks = self.shape(&kv)?;
        let vs = self.shape(&vv)?;
        let rank = qs.len();
        if ks.len() != rank || vs.len() != rank || !(rank == 3 || rank == 4) {
            return Err(invalid(format!(
                "Q, K and V must all be 3-D or all 4-D, got {qs:?}, {ks:?}, {vs:?}"
            )));
        }
        let elem = self.data_type(&qv)?.onnx_code();
        let batch = i64::from(qs[0]);
        let (q_heads, kv_heads, q_len, kv_len, head) = if rank == 3 {
            let qh = attr_int(n, "q_num_heads")?
                .ok_or_else(|| invalid("q_num_heads is required for 3-D inputs"))?;
            let kh = attr_int(n, "kv_num_heads")?
                .ok_or_else(|| invalid("kv_num_heads is required for 3-D inputs"))?;
            if qh <= 0 || kh <= 0 || i64::from(qs[2]) % qh != 0 {
                return Err(invalid(format!("{} values in {qh} heads", qs[2])));
            }
            (qh, kh, qs[1], ks[1], i64::from(qs[2]) / qh)
        } else {
            (
                i64::from(qs[1]),
                i64::from(ks[1]),
                qs[2],
                ks[2],
                i64::from(qs[3]),
            )
        };
        if kv_heads == 0 || q_heads % kv_heads != 0 {
            return Err(invalid(format!(
                "{q_heads} query heads do not group over {kv_heads} key/value heads"
            )));
        }
        let past_len = match &past_k {
            Some((_, p)) => *self
                .shape(p)?
                .get(2)
                .ok_or_else(|| invalid("past_key is not 4-D"))?,
            None => 0,
        };
        let total = past_len + kv_len;
        let scale = match attr_float(n, "scale")? {
            Some(s) => s,
            None => 1.0 / (head as f32).sqrt(),
        };
        let softcap = attr_float(n, "softcap")?.unwrap_or(0.0);
        let causal = attr_int(n, "is_causal")?.unwrap_or(0) != 0;
        let left = attr_int(n, "left_window_size")?.unwrap_or(-1);
        let right = attr_int(n, "right_window_size")?.unwrap_or(-1);
        let mode = attr_int(n, "qk_matmul_output_mode")?.unwrap_or(0);
        let mask_info = match &mask {
            Some((name, v)) => Some((name.clone(), self.data_type(v)?, self.shape(v)?)),
            None => None,
        };
        let outputs: Vec<String> = n.proto.output.clone();
        let out = |i: usize| outputs.get(i).filter(|o| !o.is_empty()).cloned();

        let mut e = Expansion::new(self, n);
        let heads = |e: &mut Expansion, x: &str, h: i64| {
            let r = e.reshape(x, &[batch, 0, h, -1]);
            e.transpose(&r, &[0, 2, 1, 3])
        };
        let (q, mut k, mut v) = if rank == 3 {
            (
                heads(&mut e, &qn, q_heads),
                heads(&mut e, &kn, kv_heads),
                heads(&mut e, &vn, kv_heads),
            )
        } else {
            (qn, kn, vn)
        };
        if let (Some((pk, _)), Some((pv, _))) = (&past_k, &past_v) {
            k = e.op("Concat", &[pk, &k], vec![int("axis", 2)]);
            v = e.op("Concat", &[pv, &v], vec![int("axis", 2)]);
        }
        if let Some(o) = out(1) {
            e.bind(&k, &o);
        }
        if let Some(o) = out(2) {
            e.bind(&v, &o);
        }
        if q_heads != kv_heads {
            let group = q_heads / kv_heads;
            let repeat = |e: &mut Expansion, x: &str| {
                let u = e.unsqueeze(x, &[2]);
                let to = e.i64v(&[1, 1, group, 1, 1]);
                let x = e.op("Expand", &[&u, &to], Vec::new());
                e.reshape(&x, &[batch, q_heads, i64::from(total), -1])
            };
            k = repeat(&mut e, &k);
            v = repeat(&mut e, &v);
        }
        let root = e.scalar_like(scale.sqrt(), &q, elem);
        let qs = e.op("Mul", &[&q, &root], Vec::new());
        let kt = e.transpose(&k, &[0, 1, 3, 2]);
        let kts = e.op("Mul", &[&kt, &root], Vec::new());
        let mut qk = e.op("MatMul", &[&qs, &kts], Vec::new());
        if softcap > 0.0 {
            let c = e.scalar_like(softcap, &q, elem);
            let d = e.op("Div", &[&qk, &c], Vec::new());
            let t = e.op("Tanh", &[&d], Vec::new());
            qk = e.op("Mul", &[&t, &c], Vec::new());
        }
        if let Some(o) = out(3).filter(|_| mode == 0 || mode == 1) {
            e.bind(&qk, &o);
        }
        let neg_inf = e.scalar_like(f32::NEG_INFINITY, &q, elem);
        let zero = e.scalar_like(0.0, &q, elem);
        let mut bias: Option<String> = None;
        if let Some((name, dt, shape)) = &mask_info {
            let mut m = if *dt == backplane_api::DataType::Boolean {
                e.op("Where", &[name, &zero, &neg_inf], Vec::new())
            } else {
                name.clone()
            };
            let last = i64::from(*shape.last().ok_or_else(|| invalid("a scalar mask"))?);
            if last < i64::from(total) {
                let mut pads = vec![0i64; 2 * shape.len()];
                pads[2 * shape.len() - 1] = i64::from(total) - last;
                let p = e.i64v(&pads);
                m = e.op(
                    "Pad",
                    &[&m, &p, &neg_inf],
                    vec![super::string("mode", "constant")],
                );
            }
            bias = Some(m);
        }
        let frontier = causal || left >= 0 || right >= 0;
        if let Some(np) = &nonpad {
            // An external cache: keys at or after each batch's `nonpad_kv_seqlen` are
            // padding, and the causal and window offsets are `nonpad - q_len` per batch.
            super::check_elements(i64::from(total) + i64::from(q_len), "the key positions")?;
            let keys: Vec<i64> = (0..i64::from(total)).collect();
            let j = e.i64s(&keys, &[1, i64::from(total)]);
            let lens = e.reshape(np, &[-1, 1]);
            let valid = e.op("Less", &[&j, &lens], Vec::new());
            let pad = e.op("Where", &[&valid, &zero, &neg_inf], Vec::new());
            let pad = e.reshape(&pad, &[batch, 1, 1, i64::from(total)]);
            bias = Some(match bias {
                Some(b) => e.op("Add", &[&b, &pad], Vec::new()),
                None => pad,
            });
            if frontier {
                let rows: Vec<i64> = (0..i64::from(q_len))
                    .map(|i| i - i64::from(q_len))
                    .collect();
                let i = e.i64s(&rows, &[1, i64::from(q_len), 1]);
                let lens = e.reshape(np, &[-1, 1, 1]);
                let at = e.op("Add", &[&i, &lens], Vec::new());
                let j = e.reshape(&j, &[1, 1, i64::from(total)]);
                // diff = i + offset - j, per batch.
                let diff = e.op("Sub", &[&at, &j], Vec::new());
                let mut allowed: Option<String> = None;
                let mut both = |e: &mut Expansion, c: String| {
                    allowed = Some(match allowed.take() {
                        Some(a) => e.op("And", &[&a, &c], Vec::new()),
                        None => c,
                    });
                };
                if causal {
                    let z = e.i64s(&[0], &[]);
                    let c = e.op("GreaterOrEqual", &[&diff, &z], Vec::new());
                    both(&mut e, c);
                }
                if left >= 0 {
                    let l = e.i64s(&[left], &[]);
                    let c = e.op("LessOrEqual", &[&diff, &l], Vec::new());
                    both(&mut e, c);
                }
                if right >= 0 {
                    let r = e.i64s(&[-right], &[]);
                    let c = e.op("GreaterOrEqual", &[&diff, &r], Vec::new());
                    both(&mut e, c);
                }
                let allowed = allowed.ok_or_else(|| invalid("no frontier"))?;
                let f = e.op("Where", &[&allowed, &zero, &neg_inf], Vec::new());
                let f = e.unsqueeze(&f, &[1]);
                bias = Some(match bias {
                    Some(b) => e.op("Add", &[&b, &f], Vec::new()),
                    None => f,
                });
            }
        } else if frontier {
            super::check_elements(i64::from(q_len) * i64::from(total), "the causal mask")?;
            let mut values = Vec::with_capacity(q_len as usize * total as usize);
            for i in 0..i64::from(q_len) {
                for j in 0..i64::from(total) {
                    let diff = i + i64::from(past_len) - j;
                    let allowed = (!causal || diff >= 0)
                        && (left < 0 || diff <= left)
                        && (right < 0 || -diff <= right);
                    values.push(if allowed { 0.0 } else { f32::NEG_INFINITY });
                }
            }
            let c = e.f32s_like(&values, &[i64::from(q_len), i64::from(total)], &q, elem);
            bias = Some(match bias {
                Some(b) => e.op("Add", &[&b, &c], Vec::new()),
                None => c,
            });
        }
        let qkb = match &bias {
            Some(b) => e.op("Add", &[&qk, b], Vec::new()),
            None => qk,
        };
        if let Some(o) = out(3).filter(|_| mode == 2) {
            e.bind(&qkb, &o);
        }
        let mut sm = e.softmax_last(&qkb, 4);
        if let Some(b) = &bias {
            // A row whose bias masks every key gives zeros, not the NaN of 0/0.
            let most = e.reduce("ReduceMax", b, &[-1], true);
            let none = e.op("Equal", &[&most, &neg_inf], Vec::new());
            sm = e.op("Where", &[&none, &zero, &sm], Vec::new());
        }
        if let Some(o) = out(3).filter(|_| mode == 3) {
            e.bind(&sm, &o);
        }
        if !(0..=3).contains(&mode) {
            return Err(invalid(format!("qk_matmul_output_mode {mode}")));
        }
        let y = e.op("MatMul", &[&sm, &v], Vec::new());
        let y = if rank == 3 {
            let t = e.transpose(&y, &[0, 2, 1, 3]);
            e.reshape(&t, &[batch, i64::from(q_len), -1])
        } else {
            y
        };
        if let Some(o) = out(0) {
            e.bind(&y, &o);
        }
        Ok(e.finish())
    }
}

/// Where `RotaryEmbedding`'s inputs are: ONNX's `(X, cos_cache, sin_cache, position_ids)`,
/// onnxruntime's `com.microsoft` `(X, position_ids, cos_cache, sin_cache)`.
struct RotaryInputs {
    cos: usize,
    sin: usize,
    positions: usize,
}

impl Importer {
    /// `RotaryEmbedding` (ONNX opset 23, and onnxruntime's `com.microsoft` one): the first
    /// `rotary_embedding_dim` values of each head (all by default) rotated pairwise by the
    /// cached angles of each position, the pairs either the two halves or (`interleaved`)
    /// neighbours.
    pub(in crate::onnx::import) fn rotary_embedding(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let microsoft = n.proto.domain == "com.microsoft";
        let at = if microsoft {
            RotaryInputs {
                cos: 2,
                sin: 3,
                positions: 1,
            }
        } else {
            RotaryInputs {
                cos: 1,
                sin: 2,
                positions: 3,
            }
        };
        let (xn, xv) = self.req(n, 0)?;
        let (cn, cv) = self.req(n, at.cos)?;
        let (sn, _) = self.req(n, at.sin)?;
        let positions = self.arg(n, at.positions)?;
        let xs = self.shape(&xv)?;
        let cs = self.shape(&cv)?;
        let rank = xs.len();
        let (batch, seq) = match rank {
            3 => (i64::from(xs[0]), i64::from(xs[1])),
            4 => (i64::from(xs[0]), i64::from(xs[2])),
            _ => return Err(invalid(format!("a {rank}-D input (3-D or 4-D)"))),
        };
        let heads = attr_int(n, "num_heads")?.unwrap_or(0);
        let head = if rank == 4 {
            i64::from(xs[3])
        } else if heads > 0 && i64::from(xs[2]) % heads == 0 {
            i64::from(xs[2]) / heads
        } else if microsoft && heads == 0 {
            // onnxruntime's: the head size is the cache's rotary width when num_heads is 0.
            2 * i64::from(*cs.last().unwrap_or(&0))
        } else {
            return Err(invalid("num_heads is required for a 3-D input"));
        };
        let rd = match attr_int(n, "rotary_embedding_dim")?.unwrap_or(0) {
            0 => head,
            d => d,
        };
        if rd <= 0 || rd > head || rd % 2 != 0 {
            return Err(invalid(format!(
                "rotary_embedding_dim {rd} for heads of {head}"
            )));
        }
        let half = rd / 2;
        let interleaved = attr_int(n, "interleaved")?.unwrap_or(0) != 0;
        // onnxruntime's form also takes one position, the offset of the first step, for every
        // batch entry.
        let offset_form = microsoft
            && match &positions {
                Some((_, pv)) => self.shape(pv)?.iter().product::<u32>() == 1,
                None => false,
            };
        let out = crate::onnx::import::expand::rearrange::first_output(n)?;
        let mut e = Expansion::new(self, n);
        let x4 = if rank == 4 {
            e.transpose(&xn, &[0, 2, 1, 3])
        } else {
            e.reshape(&xn, &[batch, seq, -1, head])
        };
        let pick = |e: &mut Expansion, cache: &str| -> String {
            let c = match &positions {
                Some((pn, _)) => {
                    let pos = if offset_form {
                        let steps: Vec<i64> = (0..seq.min(super::MAX_CONSTANT_ELEMENTS)).collect();
                        let r = e.i64s(&steps, &[1, seq]);
                        e.op("Add", &[&r, pn], Vec::new())
                    } else {
                        pn.clone()
                    };
                    e.op("Gather", &[cache, &pos], vec![int("axis", 0)])
                }
                None => cache.to_owned(),
            };
            let c = e.slice(&c, &[0], &[half], &[2]);
            e.unsqueeze(&c, &[2])
        };
        let cos = pick(&mut e, &cn);
        let sin = pick(&mut e, &sn);
        let rot = e.slice(&x4, &[0], &[rd], &[3]);
        let (x1, x2) = if interleaved {
            let pairs = e.reshape(&rot, &[batch, seq, -1, half, 2]);
            let a = e.slice(&pairs, &[0], &[1], &[4]);
            let b = e.slice(&pairs, &[1], &[2], &[4]);
            (e.squeeze(&a, &[4]), e.squeeze(&b, &[4]))
        } else {
            (
                e.slice(&rot, &[0], &[half], &[3]),
                e.slice(&rot, &[half], &[rd], &[3]),
            )
        };
        let a = e.op("Mul", &[&cos, &x1], Vec::new());
        let b = e.op("Mul", &[&sin, &x2], Vec::new());
        let real = e.op("Sub", &[&a, &b], Vec::new());
        let a = e.op("Mul", &[&sin, &x1], Vec::new());
        let b = e.op("Mul", &[&cos, &x2], Vec::new());
        let imag = e.op("Add", &[&a, &b], Vec::new());
        let rotated = if interleaved {
            let r = e.unsqueeze(&real, &[4]);
            let i = e.unsqueeze(&imag, &[4]);
            let p = e.op("Concat", &[&r, &i], vec![int("axis", 4)]);
            e.reshape(&p, &[batch, seq, -1, rd])
        } else {
            e.op("Concat", &[&real, &imag], vec![int("axis", 3)])
        };
        let y = if rd < head {
            let rest = e.slice(&x4, &[rd], &[head], &[3]);
            e.op("Concat", &[&rotated, &rest], vec![int("axis", 3)])
        } else {
            rotated
        };
        let y = if rank == 4 {
            e.transpose(&y, &[0, 2, 1, 3])
        } else {
            let dims: Vec<i64> = xs.iter().map(|&d| i64::from(d)).collect();
            e.reshape(&y, &dims)
        };
        e.bind(&y, &out);
        Ok(e.finish())
    }
}
