//! onnxruntime's `com.microsoft` operators that its optimiser and exporters write into saved
//! models, and `SimplifiedLayerNormalization` (which onnxruntime registers in the default
//! domain), as graphs of ONNX operators:
//!
//! - `FusedConv`: `Conv`, the optional `Z` added, then `activation` with
//!   `activation_params` (Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid);
//! - `FusedMatMul`: `alpha · op(A) · op(B)` with `transA`/`transB` (the last two axes swapped;
//!   `transBatchA`/`transBatchB` are not supported);
//! - `SkipLayerNormalization` (and `SkipSimplifiedLayerNormalization`): `s = input + skip (+
//!   bias)`, normalised over the last axis (the simplified one by the root mean square,
//!   without centring), output 3 the sum `s`;
//! - `SimplifiedLayerNormalization`: `x / sqrt(mean(x²) + epsilon) · scale` over the axes
//!   from `axis`;
//! - `Attention`: the packed input projection `input · weights + bias` split into Q, K and V
//!   (sizes from `qkv_hidden_sizes`, equal by default), then ONNX's `Attention` with
//!   `num_heads`, `unidirectional` as `is_causal`, `scale`, and a 2-D `mask_index` (1 keeps,
//!   0 masks with `mask_filter_value`, -10000 by default);
//! - `MultiHeadAttention`: 3-D `query`, `key`, `value` with the packed `bias` added, then
//!   ONNX's `Attention`, `key_padding_mask` as `mask_index` above, `attention_bias` added;
//! - `EmbedLayerNormalization`: the word, position and segment embeddings gathered and
//!   summed, normalised over the last axis; `mask_index` the number of ones in each row of
//!   `mask`;
//! - `DynamicQuantizeLSTM` (onnxruntime's dynamic quantizer's LSTM): its int8 or uint8 weights
//!   `W` (`[directions, input, 4 * hidden]`) and `R` dequantized (per direction, or per
//!   direction and column) and turned to ONNX's layout, then ONNX's `LSTM` with the node's
//!   attributes. The products are computed in floats: onnxruntime quantizes `X` and `H` to
//!   8 bits at every step, so its outputs differ from these by that rounding.

use super::{Expansion, float, int, rearrange::first_output};
use crate::onnx::import::{
    Importer, NResult, Node, Value,
    attributes::{attr_float, attr_floats, attr_int, attr_ints, attr_string},
    invalid,
    queue::Pending,
    unsupported,
};
use crate::onnx::proto::AttributeProto;

/// `DynamicQuantizeLSTM`'s weights at input `w` (`[dirs, rows, columns]`) dequantized with the
/// scales at `scale` and zero points at `zero` (per direction, or per direction and column)
/// and transposed to ONNX's `[dirs, columns, rows]`, each `(w - zero) * scale` in f32 as the
/// `Sub` and `Mul` of the general path compute it; `None` when one of them is not a constant.
fn dequantized_transposed(
    im: &Importer,
    n: &Node<'_>,
    w: usize,
    scale: usize,
    zero: usize,
    per_column: bool,
) -> NResult<Option<Vec<f32>>> {
    let (Value::I64(wv), Value::F32(sv)) = (im.req(n, w)?.1, im.req(n, scale)?.1) else {
        return Ok(None);
    };
    let zeros = match im.arg(n, zero)? {
        None => None,
        Some((_, Value::I64(z))) => Some(z),
        Some(_) => return Ok(None),
    };
    let &[dirs, rows, columns] = wv.shape.as_slice() else {
        return Ok(None);
    };
    let (dirs, rows, columns) = (dirs as usize, rows as usize, columns as usize);
    let mut out = vec![0f32; dirs * rows * columns];
    // In blocks of 64 rows: each column's run of the block is written in order while the
    // block's rows stay in cache.
    for d in 0..dirs {
        for r0 in (0..rows).step_by(64) {
            let r1 = (r0 + 64).min(rows);
            for c in 0..columns {
                let at = if per_column { d * columns + c } else { d };
                let (s, z) = (
                    sv.data[at],
                    zeros.as_ref().map_or(0.0, |z| z.data[at] as f32),
                );
                let column = &mut out[(d * columns + c) * rows..][r0..r1];
                for (r, o) in (r0..r1).zip(column.iter_mut()) {
                    *o = (wv.data[(d * rows + r) * columns + c] as f32 - z) * s;
                }
            }
        }
    }
    Ok(Some(out))
}

/// The attributes of `Conv` among a `FusedConv`'s.
const CONV_ATTRIBUTES: [&str; 6] = [
    "auto_pad",
    "dilations",
    "group",
    "kernel_shape",
    "pads",
    "strides",
];

impl Importer {
    /// `DynamicQuantizeLSTM`.
    pub(in crate::onnx::import) fn dynamic_quantize_lstm(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let mut e = Expansion::new(self, n);
        let mut weights = Vec::new();
        for (w, scale, zero) in [(1, 8, 9), (2, 10, 11)] {
            let (wn, wv) = self.req(n, w)?;
            let (sn, sv) = self.req(n, scale)?;
            let ws = self.shape(&wv)?;
            let ss = self.shape(&sv)?;
            let &[dirs, _, columns] = ws.as_slice() else {
                return Err(invalid(format!("weights {wn} must be 3-D, got {ws:?}")));
            };
            // Scales and zero points per direction ([dirs]) or per direction and column.
            let per_column = match ss.as_slice() {
                [d] if *d == dirs => false,
                [d, c] if *d == dirs && *c == columns => true,
                _ => {
                    return Err(invalid(format!(
                        "scale {sn} {ss:?} for weights {ws:?}: per direction or per column"
                    )));
                }
            };
            let shaped = |e: &mut Expansion, v: &str| {
                let shape = [
                    i64::from(dirs),
                    1,
                    if per_column { i64::from(columns) } else { 1 },
                ];
                e.reshape(v, &shape)
            };
            // Constant weights, scales and zero points (as quantize_dynamic writes them): the
            // dequantized, transposed weights in one pass, one constant.
            if let Some(values) = dequantized_transposed(self, n, w, scale, zero, per_column)? {
                let dims = [i64::from(dirs), i64::from(columns), i64::from(ws[1])];
                weights.push(e.f32s_owned(values, &dims));
                continue;
            }
            let float = int("to", 1);
            let mut x = e.op("Cast", &[&wn], vec![float.clone()]);
            if let Some((zn, _)) = self.arg(n, zero)? {
                let z = e.op("Cast", &[&zn], vec![float]);
                let z = shaped(&mut e, &z);
                x = e.op("Sub", &[&x, &z], Vec::new());
            }
            let s = shaped(&mut e, &sn);
            let x = e.op("Mul", &[&x, &s], Vec::new());
            weights.push(e.transpose(&x, &[0, 2, 1]));
        }
        let name = |i: usize| -> NResult<String> {
            Ok(self.arg(n, i)?.map(|(name, _)| name).unwrap_or_default())
        };
        let (x, b, lens, h0, c0, peep) =
            (name(0)?, name(3)?, name(4)?, name(5)?, name(6)?, name(7)?);
        let inputs = [
            x.as_str(),
            &weights[0],
            &weights[1],
            &b,
            &lens,
            &h0,
            &c0,
            &peep,
        ];
        let outputs: Vec<&str> = n.proto.output.iter().map(String::as_str).collect();
        e.node_into("LSTM", &inputs, n.proto.attribute.clone(), &outputs);
        Ok(e.finish())
    }

    /// `FusedConv`.
    pub(in crate::onnx::import) fn fused_conv(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let activation = attr_string(n, "activation")?.unwrap_or_default();
        let params = attr_floats(n, "activation_params")?.unwrap_or_default();
        let (xn, _) = self.req(n, 0)?;
        let (wn, _) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?.map(|(name, _)| name);
        let z = self.arg(n, 3)?.map(|(name, _)| name);
        let out = first_output(n)?;
        let conv_attrs: Vec<AttributeProto> = n
            .proto
            .attribute
            .iter()
            .filter(|a| CONV_ATTRIBUTES.contains(&a.name.as_str()))
            .cloned()
            .collect();
        let opset = self.opset;
        let mut e = Expansion::new(self, n);
        let mut inputs = vec![xn.as_str(), wn.as_str()];
        if let Some(b) = &bias {
            inputs.push(b);
        }
        let mut y = e.op("Conv", &inputs, conv_attrs);
        if let Some(z) = &z {
            y = e.op("Add", &[&y, z], Vec::new());
        }
        let p = |k: usize, default: f32| params.get(k).copied().unwrap_or(default);
        y = match activation.as_str() {
            "" => y,
            "Relu" | "Tanh" | "Sigmoid" => e.op(&activation, &[&y], Vec::new()),
            "LeakyRelu" => e.op("LeakyRelu", &[&y], vec![float("alpha", p(0, 0.01))]),
            "HardSigmoid" => e.op(
                "HardSigmoid",
                &[&y],
                vec![float("alpha", p(0, 0.2)), float("beta", p(1, 0.5))],
            ),
            "Clip" => {
                let (lo, hi) = (p(0, f32::MIN), p(1, f32::MAX));
                if opset >= 11 {
                    let l = e.f32s(&[lo], &[]);
                    let h = e.f32s(&[hi], &[]);
                    e.op("Clip", &[&y, &l, &h], Vec::new())
                } else {
                    e.op("Clip", &[&y], vec![float("min", lo), float("max", hi)])
                }
            }
            other => return Err(unsupported(format!("FusedConv activation {other:?}"))),
        };
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `FusedMatMul`.
    pub(in crate::onnx::import) fn fused_matmul(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        if attr_int(n, "transBatchA")?.unwrap_or(0) != 0
            || attr_int(n, "transBatchB")?.unwrap_or(0) != 0
        {
            return Err(unsupported("FusedMatMul with transBatchA or transBatchB"));
        }
        let (an, av) = self.req(n, 0)?;
        let (bn, bv) = self.req(n, 1)?;
        let alpha = attr_float(n, "alpha")?.unwrap_or(1.0);
        let elem = self.data_type(&av)?.onnx_code();
        let ranks = (self.shape(&av)?.len(), self.shape(&bv)?.len());
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let swap = |e: &mut Expansion, x: &str, rank: usize| {
            let mut perm: Vec<i64> = (0..rank as i64).collect();
            if rank >= 2 {
                perm.swap(rank - 2, rank - 1);
            }
            e.transpose(x, &perm)
        };
        let a = if attr_int(n, "transA")?.unwrap_or(0) != 0 {
            swap(&mut e, &an, ranks.0)
        } else {
            an.clone()
        };
        let b = if attr_int(n, "transB")?.unwrap_or(0) != 0 {
            swap(&mut e, &bn, ranks.1)
        } else {
            bn
        };
        let mut y = e.op("MatMul", &[&a, &b], Vec::new());
        if alpha != 1.0 {
            let s = e.scalar_like(alpha, &an, elem);
            y = e.op("Mul", &[&y, &s], Vec::new());
        }
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization`.
    pub(in crate::onnx::import) fn skip_layer_norm(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let simplified = n.op() == "SkipSimplifiedLayerNormalization";
        let (xn, xv) = self.req(n, 0)?;
        let (sn, _) = self.req(n, 1)?;
        let (gn, _) = self.req(n, 2)?;
        // The simplified form has no beta: its bias is input 3.
        let (beta, bias) = if simplified {
            (None, self.arg(n, 3)?.map(|(name, _)| name))
        } else {
            (
                self.arg(n, 3)?.map(|(name, _)| name),
                self.arg(n, 4)?.map(|(name, _)| name),
            )
        };
        let eps = attr_float(n, "epsilon")?.unwrap_or(1e-12);
        let elem = self.data_type(&xv)?.onnx_code();
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let mut s = e.op("Add", &[&xn, &sn], Vec::new());
        if let Some(b) = &bias {
            s = e.op("Add", &[&s, b], Vec::new());
        }
        let y = if simplified {
            rms_norm(&mut e, &s, &gn, &[-1], eps, &xn, elem)
        } else {
            let mut inputs = vec![s.as_str(), gn.as_str()];
            if let Some(b) = &beta {
                inputs.push(b);
            }
            e.op(
                "LayerNormalization",
                &inputs,
                vec![int("axis", -1), float("epsilon", eps)],
            )
        };
        bind_outputs(&mut e, &outputs, &[(0, &y), (3, &s)])?;
        Ok(e.finish())
    }

    /// `SimplifiedLayerNormalization` (onnxruntime's, in the default domain).
    pub(in crate::onnx::import) fn simplified_layer_norm(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (gn, _) = self.req(n, 1)?;
        let rank = self.shape(&xv)?.len() as i64;
        let axis = attr_int(n, "axis")?.unwrap_or(-1);
        let axis = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&axis) {
            return Err(invalid(format!("axis {axis} of a {rank}-D input")));
        }
        let axes: Vec<i64> = (axis..rank).collect();
        let eps = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let elem = self.data_type(&xv)?.onnx_code();
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let y = rms_norm(&mut e, &xn, &gn, &axes, eps, &xn, elem);
        bind_outputs(&mut e, &outputs, &[(0, &y)])?;
        Ok(e.finish())
    }

    /// `com.microsoft` `Attention` (packed input projection).
    pub(in crate::onnx::import) fn ms_attention(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (wn, wv) = self.req(n, 1)?;
        let bias = self.arg(n, 2)?.map(|(name, _)| name);
        let mask = self.arg(n, 3)?;
        for (i, what) in [
            (4, "past"),
            (5, "attention_bias"),
            (6, "past_sequence_length"),
        ] {
            if self.arg(n, i)?.is_some() {
                return Err(unsupported(format!("com.microsoft Attention with {what}")));
            }
        }
        if attr_int(n, "past_present_share_buffer")?.unwrap_or(0) != 0 {
            return Err(unsupported(
                "com.microsoft Attention sharing past and present",
            ));
        }
        let heads = attr_int(n, "num_heads")?.ok_or_else(|| invalid("num_heads is required"))?;
        let xs = self.shape(&xv)?;
        let ws = self.shape(&wv)?;
        if xs.len() != 3 || ws.len() != 2 {
            return Err(unsupported(
                "com.microsoft Attention of a 3-D input and 2-D weights",
            ));
        }
        let total = i64::from(ws[1]);
        let sizes = match attr_ints(n, "qkv_hidden_sizes")? {
            Some(s) if s.len() == 3 => s,
            Some(s) => return Err(invalid(format!("qkv_hidden_sizes {s:?}"))),
            None if total % 3 == 0 => vec![total / 3; 3],
            None => {
                return Err(invalid(format!(
                    "weights of {total} columns for Q, K and V"
                )));
            }
        };
        if sizes.iter().sum::<i64>() != total || sizes[0] != sizes[1] {
            return Err(invalid(format!(
                "qkv_hidden_sizes {sizes:?} for {total} columns"
            )));
        }
        let (batch, seq) = (i64::from(xs[0]), i64::from(xs[1]));
        let causal = attr_int(n, "unidirectional")?.unwrap_or(0) != 0;
        let scale = attr_float(n, "scale")?.filter(|&s| s != 0.0);
        let filter = attr_float(n, "mask_filter_value")?.unwrap_or(-10000.0);
        let elem = self.data_type(&xv)?.onnx_code();
        let mask_shape = match &mask {
            Some((_, v)) => Some(self.shape(v)?),
            None => None,
        };
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let mut qkv = e.op("MatMul", &[&xn, &wn], Vec::new());
        if let Some(b) = &bias {
            qkv = e.op("Add", &[&qkv, b], Vec::new());
        }
        let q = e.slice(&qkv, &[0], &[sizes[0]], &[2]);
        let k = e.slice(&qkv, &[sizes[0]], &[sizes[0] + sizes[1]], &[2]);
        let v = e.slice(&qkv, &[sizes[0] + sizes[1]], &[total], &[2]);
        let m = match (&mask, &mask_shape) {
            (Some((name, _)), Some(shape)) => Some(padding_bias(
                &mut e, name, shape, batch, seq, filter, &xn, elem,
            )?),
            _ => None,
        };
        let y = onnx_attention(&mut e, &q, &k, &v, m.as_deref(), heads, causal, scale);
        bind_outputs(&mut e, &outputs, &[(0, &y)])?;
        Ok(e.finish())
    }

    /// `com.microsoft` `MultiHeadAttention` (separate 3-D query, key and value).
    pub(in crate::onnx::import) fn multi_head_attention(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (qn, qv) = self.req(n, 0)?;
        let (kn, kv) = self.req(n, 1)?;
        let (vn, vv) = self.req(n, 2)?;
        let bias = self.arg(n, 3)?.map(|(name, _)| name);
        let mask = self.arg(n, 4)?;
        let attention_bias = self.arg(n, 5)?.map(|(name, _)| name);
        for (i, what) in [(6, "past_key"), (7, "past_value")] {
            if self.arg(n, i)?.is_some() {
                return Err(unsupported(format!("MultiHeadAttention with {what}")));
            }
        }
        let (qs, ks, vs) = (self.shape(&qv)?, self.shape(&kv)?, self.shape(&vv)?);
        if qs.len() != 3 || ks.len() != 3 || vs.len() != 3 {
            return Err(unsupported("MultiHeadAttention of packed or 4-D inputs"));
        }
        let heads = attr_int(n, "num_heads")?.ok_or_else(|| invalid("num_heads is required"))?;
        let causal = attr_int(n, "unidirectional")?.unwrap_or(0) != 0;
        let scale = attr_float(n, "scale")?.filter(|&s| s != 0.0);
        let filter = attr_float(n, "mask_filter_value")?.unwrap_or(-10000.0);
        let elem = self.data_type(&qv)?.onnx_code();
        let (batch, kv_len) = (i64::from(ks[0]), i64::from(ks[1]));
        let (qh, kh, vh) = (i64::from(qs[2]), i64::from(ks[2]), i64::from(vs[2]));
        let mask_shape = match &mask {
            Some((_, v)) => Some(self.shape(v)?),
            None => None,
        };
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let (mut q, mut k, mut v) = (qn.clone(), kn, vn);
        if let Some(b) = &bias {
            let bq = e.slice(b, &[0], &[qh], &[0]);
            let bk = e.slice(b, &[qh], &[qh + kh], &[0]);
            let bv = e.slice(b, &[qh + kh], &[qh + kh + vh], &[0]);
            q = e.op("Add", &[&q, &bq], Vec::new());
            k = e.op("Add", &[&k, &bk], Vec::new());
            v = e.op("Add", &[&v, &bv], Vec::new());
        }
        let mut m = match (&mask, &mask_shape) {
            (Some((name, _)), Some(shape)) => Some(padding_bias(
                &mut e, name, shape, batch, kv_len, filter, &qn, elem,
            )?),
            _ => None,
        };
        if let Some(ab) = &attention_bias {
            m = Some(match m {
                Some(m) => e.op("Add", &[&m, ab], Vec::new()),
                None => ab.clone(),
            });
        }
        let y = onnx_attention(&mut e, &q, &k, &v, m.as_deref(), heads, causal, scale);
        bind_outputs(&mut e, &outputs, &[(0, &y)])?;
        Ok(e.finish())
    }

    /// `EmbedLayerNormalization`.
    pub(in crate::onnx::import) fn embed_layer_norm(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (ids, iv) = self.req(n, 0)?;
        let segments = self.arg(n, 1)?.map(|(name, _)| name);
        let (word, _) = self.req(n, 2)?;
        let (position, _) = self.req(n, 3)?;
        let segment_table = self.arg(n, 4)?.map(|(name, _)| name);
        let (gamma, _) = self.req(n, 5)?;
        let (beta, _) = self.req(n, 6)?;
        let mask = self.arg(n, 7)?.map(|(name, _)| name);
        let positions = self.arg(n, 8)?.map(|(name, _)| name);
        let is = self.shape(&iv)?;
        let [_, seq] = <[u32; 2]>::try_from(is.as_slice())
            .map_err(|_| invalid(format!("input_ids must be 2-D, got {is:?}")))?;
        let eps = attr_float(n, "epsilon")?.unwrap_or(1e-12);
        if matches!(self.arg(n, 1)?, Some((_, Value::Skipped))) {
            return Err(unsupported("segment_ids is not available"));
        }
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let gather = |e: &mut Expansion, table: &str, idx: &str| {
            e.op("Gather", &[table, idx], vec![int("axis", 0)])
        };
        let mut sum = gather(&mut e, &word, &ids);
        let pos = match &positions {
            Some(p) => p.clone(),
            None => {
                let steps: Vec<i64> = (0..i64::from(seq)).collect();
                e.i64s(&steps, &[1, i64::from(seq)])
            }
        };
        let p = gather(&mut e, &position, &pos);
        sum = e.op("Add", &[&sum, &p], Vec::new());
        if let (Some(s), Some(t)) = (&segments, &segment_table) {
            let g = gather(&mut e, t, s);
            sum = e.op("Add", &[&sum, &g], Vec::new());
        }
        let y = e.op(
            "LayerNormalization",
            &[&sum, &gamma, &beta],
            vec![int("axis", -1), float("epsilon", eps)],
        );
        let mask_index = match &mask {
            Some(m) => {
                let ones = e.op("Cast", &[m], vec![int("to", 6)]);
                Some(e.reduce("ReduceSum", &ones, &[1], false))
            }
            None => None,
        };
        let mut bound = vec![(0, y.as_str()), (2, sum.as_str())];
        if let Some(mi) = &mask_index {
            bound.push((1, mi));
        }
        bind_outputs(&mut e, &outputs, &bound)?;
        Ok(e.finish())
    }
}

/// `x / sqrt(mean(x²) + eps) · scale` over `axes`.
fn rms_norm(
    e: &mut Expansion,
    x: &str,
    scale: &str,
    axes: &[i64],
    eps: f32,
    like: &str,
    elem: i32,
) -> String {
    let sq = e.op("Mul", &[x, x], Vec::new());
    let mean = e.reduce("ReduceMean", &sq, axes, true);
    let eps = e.scalar_like(eps, like, elem);
    let me = e.op("Add", &[&mean, &eps], Vec::new());
    let root = e.op("Sqrt", &[&me], Vec::new());
    let normed = e.op("Div", &[x, &root], Vec::new());
    e.op("Mul", &[&normed, scale], Vec::new())
}

/// A `[batch, 1, 1, keys]` additive bias from a 2-D padding mask (1 keeps a key, 0 adds
/// `filter`).
#[allow(clippy::too_many_arguments)] // reason: the mask, its shape and the bias's type
fn padding_bias(
    e: &mut Expansion,
    mask: &str,
    shape: &[u32],
    batch: i64,
    keys: i64,
    filter: f32,
    like: &str,
    elem: i32,
) -> NResult<String> {
    if shape.len() != 2 {
        return Err(unsupported(format!(
            "a mask of shape {shape:?} (a 2-D one of ones and zeros is supported)"
        )));
    }
    let m = e.op("CastLike", &[mask, like], Vec::new());
    let one = e.scalar_like(1.0, like, elem);
    let f = e.scalar_like(filter, like, elem);
    let off = e.op("Sub", &[&one, &m], Vec::new());
    let b = e.op("Mul", &[&off, &f], Vec::new());
    Ok(e.reshape(&b, &[batch, 1, 1, keys]))
}

/// ONNX's `Attention` of 3-D `q`, `k`, `v` with `heads` heads each.
#[allow(clippy::too_many_arguments)] // reason: the operator's inputs and attributes
fn onnx_attention(
    e: &mut Expansion,
    q: &str,
    k: &str,
    v: &str,
    mask: Option<&str>,
    heads: i64,
    causal: bool,
    scale: Option<f32>,
) -> String {
    let mut attrs = vec![
        int("q_num_heads", heads),
        int("kv_num_heads", heads),
        int("is_causal", i64::from(causal)),
    ];
    if let Some(s) = scale {
        attrs.push(float("scale", s));
    }
    let mut inputs = vec![q, k, v];
    if let Some(m) = mask {
        inputs.push(m);
    }
    e.op("Attention", &inputs, attrs)
}

/// Binds the node's outputs `i` that the model reads to `value`s.
fn bind_outputs(e: &mut Expansion, outputs: &[String], values: &[(usize, &str)]) -> NResult<()> {
    for (i, out) in outputs.iter().enumerate() {
        if out.is_empty() {
            continue;
        }
        match values.iter().find(|(k, _)| *k == i) {
            Some((_, v)) => e.bind(v, out),
            None => {
                return Err(unsupported(format!(
                    "output {i} ({out}) is not computed by this import"
                )));
            }
        }
    }
    Ok(())
}
