//! Normalisations as graphs of reductions and arithmetic:
//!
//! - `GroupNormalization`: the input reshaped to `[N, groups, rest]`, each group normalised by
//!   its mean and (biased) variance plus `epsilon`, reshaped back and scaled and shifted per
//!   channel (opset 21) or per group (opset 18, where `scale` and `bias` have one value per
//!   group);
//! - `MeanVarianceNormalization`: `(x - mean) / (sqrt(variance) + 1e-9)` over `axes`
//!   (`[0, 2, 3]` by default), the variance of `x - mean`;
//! - `BatchNormalization` in training mode: the batch's own statistics, and the running ones
//!   updated by `momentum`.

use super::{Expansion, rearrange::first_output};
use crate::onnx::import::{
    Importer, NResult, Node,
    attributes::{attr_float, attr_int, attr_ints},
    invalid,
    queue::Pending,
    unsupported,
};

impl Importer {
    /// `GroupNormalization`.
    pub(in crate::onnx::import) fn group_normalization(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (sn, sv) = self.req(n, 1)?;
        let (bn, _) = self.req(n, 2)?;
        let s: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        if s.len() < 3 {
            return Err(invalid(format!("a {}-D input (N, C and more)", s.len())));
        }
        let groups = attr_int(n, "num_groups")?.ok_or_else(|| invalid("num_groups is required"))?;
        let c = s[1];
        if groups <= 0 || c % groups != 0 {
            return Err(invalid(format!("{c} channels in {groups} groups")));
        }
        let eps = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let per_channel = self.opset >= 21;
        let params = i64::from(*self.shape(&sv)?.first().unwrap_or(&0));
        let want = if per_channel { c } else { groups };
        if params != want {
            return Err(invalid(format!(
                "scale has {params} values; opset {} wants one per {} ({want})",
                self.opset,
                if per_channel { "channel" } else { "group" }
            )));
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let g = e.reshape(&xn, &[s[0], groups, -1]);
        let mean = e.reduce("ReduceMean", &g, &[2], true);
        let d = e.op("Sub", &[&g, &mean], Vec::new());
        let d2 = e.op("Mul", &[&d, &d], Vec::new());
        let var = e.reduce("ReduceMean", &d2, &[2], true);
        let eps = e.scalar_like(eps, &xn, elem);
        let ve = e.op("Add", &[&var, &eps], Vec::new());
        let sd = e.op("Sqrt", &[&ve], Vec::new());
        let normed = e.op("Div", &[&d, &sd], Vec::new());
        let y = if per_channel {
            let back = e.reshape(&normed, &s);
            let mut dims = vec![c];
            dims.resize(s.len() - 1, 1);
            let scale = e.reshape(&sn, &dims);
            let bias = e.reshape(&bn, &dims);
            let scaled = e.op("Mul", &[&back, &scale], Vec::new());
            e.op("Add", &[&scaled, &bias], Vec::new())
        } else {
            let scale = e.reshape(&sn, &[groups, 1]);
            let bias = e.reshape(&bn, &[groups, 1]);
            let scaled = e.op("Mul", &[&normed, &scale], Vec::new());
            let shifted = e.op("Add", &[&scaled, &bias], Vec::new());
            e.reshape(&shifted, &s)
        };
        e.bind(&y, &out);
        Ok(e.finish())
    }

    /// `MeanVarianceNormalization`.
    pub(in crate::onnx::import) fn mean_variance_normalization(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let rank = self.shape(&xv)?.len() as i64;
        let axes = attr_ints(n, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
        if axes.iter().any(|&a| a < -rank || a >= rank) {
            return Err(unsupported(format!("axes {axes:?} of a {rank}-D input")));
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let mean = e.reduce("ReduceMean", &xn, &axes, true);
        let d = e.op("Sub", &[&xn, &mean], Vec::new());
        let d2 = e.op("Mul", &[&d, &d], Vec::new());
        let var = e.reduce("ReduceMean", &d2, &axes, true);
        let sd = e.op("Sqrt", &[&var], Vec::new());
        let eps = e.scalar_like(1e-9, &xn, elem);
        let den = e.op("Add", &[&sd, &eps], Vec::new());
        let y = e.op("Div", &[&d, &den], Vec::new());
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

/// Whether node `n` (a `BatchNormalization`) runs in training mode (opset 14's attribute).
pub(in crate::onnx::import) fn is_training_batch_norm(_: &Importer, n: &Node<'_>) -> bool {
    attr_int(n, "training_mode").ok().flatten().unwrap_or(0) != 0
}

impl Importer {
    /// `BatchNormalization` in training mode: normalised by the batch's own mean and
    /// (population) variance over every axis but the channels, and the running statistics
    /// updated, `running = input · momentum + batch · (1 - momentum)`.
    pub(in crate::onnx::import) fn batch_norm_training(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let (sn, _) = self.req(n, 1)?;
        let (bn, _) = self.req(n, 2)?;
        let (mn, _) = self.req(n, 3)?;
        let (vn, _) = self.req(n, 4)?;
        let rank = self.shape(&xv)?.len() as i64;
        if rank < 2 {
            return Err(invalid("BatchNormalization of a tensor without channels"));
        }
        let eps = attr_float(n, "epsilon")?.unwrap_or(1e-5);
        let momentum = attr_float(n, "momentum")?.unwrap_or(0.9);
        let elem = self.data_type(&xv)?.onnx_code();
        let outputs = n.proto.output.clone();
        let mut e = Expansion::new(self, n);
        let axes: Vec<i64> = (0..rank).filter(|&a| a != 1).collect();
        let mean = e.reduce("ReduceMean", &xn, &axes, true);
        let d = e.op("Sub", &[&xn, &mean], Vec::new());
        let d2 = e.op("Mul", &[&d, &d], Vec::new());
        let var = e.reduce("ReduceMean", &d2, &axes, true);
        let eps = e.scalar_like(eps, &xn, elem);
        let ve = e.op("Add", &[&var, &eps], Vec::new());
        let sd = e.op("Sqrt", &[&ve], Vec::new());
        let normed = e.op("Div", &[&d, &sd], Vec::new());
        let mut per_channel = vec![-1i64];
        per_channel.resize(rank as usize - 1, 1);
        let s = e.reshape(&sn, &per_channel);
        let b = e.reshape(&bn, &per_channel);
        let scaled = e.op("Mul", &[&normed, &s], Vec::new());
        let y = e.op("Add", &[&scaled, &b], Vec::new());
        let m = e.scalar_like(momentum, &xn, elem);
        let rest = e.scalar_like(1.0 - momentum, &xn, elem);
        let running = |e: &mut Expansion, input: &str, batch: &str| {
            let flat = e.reshape(batch, &[-1]);
            let a = e.op("Mul", &[input, &m], Vec::new());
            let b = e.op("Mul", &[&flat, &rest], Vec::new());
            e.op("Add", &[&a, &b], Vec::new())
        };
        let rm = running(&mut e, &mn, &mean);
        let rv = running(&mut e, &vn, &var);
        for (i, v) in [(0, &y), (1, &rm), (2, &rv)] {
            if let Some(o) = outputs.get(i).filter(|o| !o.is_empty()) {
                e.bind(v, o);
            }
        }
        if outputs.iter().skip(3).any(|o| !o.is_empty()) {
            return Err(unsupported(
                "BatchNormalization's saved mean and variance outputs (opset 9)",
            ));
        }
        Ok(e.finish())
    }
}
