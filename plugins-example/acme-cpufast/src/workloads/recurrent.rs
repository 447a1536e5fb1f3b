//! `Lstm` (Backend API 1.5, ONNX `LSTM` with its default activations) in Float32, with
//! constant `w`, `r` and `b`: each direction's `w` and `r` packed once for the products
//! (`gemm::PackedB`, read as stored: `x · wᵀ`), then per call the input's products for every
//! step at once, and per step the state's product with `r`, added to them, and the gates
//! (CpuFast's vectorisable `σ` and `tanh` of `activation.rs`, in f32) in one pass over the
//! hidden units.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, RecurrentDirection, TensorInfo, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use faer::traits::pulp::{Arch, Simd, WithSimd};

use super::{
    Signature,
    activation::{sigmoid, tanh},
    invalid_layer,
};
use crate::{gemm::PackedB, prepared::floats};

/// Why CpuFast cannot run the `Lstm` layer over `inputs`, or `Ok`.
pub(crate) fn check(inputs: &[TensorInfo]) -> Result<(), String> {
    match inputs {
        [_, w, r, b, _, _] if w.is_constant && r.is_constant && b.is_constant => Ok(()),
        _ => Err("CpuFast runs an Lstm whose weights and bias are constant".to_owned()),
    }
}

/// One direction's prepared weights.
#[derive(Debug)]
struct Direction {
    reverse: bool,
    /// `w[d]ᵀ`, `input × 4H`.
    w: PackedB,
    /// `r[d]ᵀ`, `H × 4H`.
    r: PackedB,
    /// `Wb[d] + Rb[d]`.
    bias: Vec<f32>,
}

/// A long short-term memory on CpuFast.
#[derive(Debug)]
pub(crate) struct LstmWorkload {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    directions: Vec<Direction>,
    signature: Signature,
    threads: usize,
}

/// Creates the workload of an `Lstm` layer that [`check`] accepted.
pub(crate) fn create(desc: &WorkloadDesc<'_>, threads: usize) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Lstm(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an Lstm layer"));
    };
    check(&desc.inputs).map_err(|e| invalid_layer(desc, e))?;
    let &[seq, batch, input] = desc.inputs[0].shape.as_slice() else {
        return Err(invalid_layer(desc, "x must be [seq, batch, input]"));
    };
    let (seq, batch, input) = (seq as usize, batch as usize, input as usize);
    let hidden = d.hidden_size as usize;
    let g4 = 4 * hidden;
    let constant = |slot: usize, len: usize| -> BackendResult<&[u8]> {
        desc.constant(slot)
            .map(|v| v.data.as_slice())
            .filter(|b| b.len() == len * 4)
            .ok_or_else(|| invalid_layer(desc, format_args!("input {slot} must be constant")))
    };
    let dirs = d.direction.count();
    let (w, r) = (
        constant(1, dirs * g4 * input)?,
        constant(2, dirs * g4 * hidden)?,
    );
    let b = floats(constant(3, dirs * 2 * g4)?);
    let prepare = |k: usize| Direction {
        reverse: d.direction == RecurrentDirection::Reverse || k == 1,
        w: PackedB::of_bytes(input, g4, &w[k * g4 * input * 4..][..g4 * input * 4], true),
        r: PackedB::of_bytes(
            hidden,
            g4,
            &r[k * g4 * hidden * 4..][..g4 * hidden * 4],
            true,
        ),
        bias: (0..g4)
            .map(|j| b[k * 2 * g4 + j] + b[k * 2 * g4 + g4 + j])
            .collect(),
    };
    // Two directions on two threads are prepared side by side (digesting and packing
    // ddddocr's 16 MB of weights took 20 ms of its first call), unless this workload is being
    // prepared ahead of time or restored (those follow this thread's order).
    let directions = if dirs > 1 && threads > 1 && crate::prepared::on_any_thread() {
        let slots: Vec<std::sync::Mutex<Option<Direction>>> =
            (0..dirs).map(|_| Default::default()).collect();
        crate::gemm::for_each_part(threads, slots.iter().enumerate(), |(k, slot)| {
            *slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(prepare(k));
        });
        slots
            .into_iter()
            .map(|s| {
                s.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid_layer(desc, "a direction was not prepared"))?
    } else {
        (0..dirs).map(prepare).collect()
    };
    Ok(Box::new(LstmWorkload {
        seq,
        batch,
        input,
        hidden,
        directions,
        signature: Signature::of(desc),
        threads,
    }))
}

/// One batch row's gates (`g`: `i, o, f, c̃` pre-activations, `hidden` each) into its cell
/// state `c` and output `h`, with CpuFast's vectorisable `σ` and `tanh`, compiled by `pulp`
/// for the CPU's widest vectors.
struct Gates<'a> {
    g: &'a [f32],
    c: &'a mut [f32],
    h: &'a mut [f32],
}

impl WithSimd for Gates<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let hidden = self.c.len();
        let (i, rest) = self.g.split_at(hidden);
        let (o, rest) = rest.split_at(hidden);
        let (f, cc) = rest.split_at(hidden);
        for k in 0..hidden.min(self.h.len()).min(cc.len()) {
            let c = sigmoid(f[k]) * self.c[k] + sigmoid(i[k]) * tanh(cc[k]);
            self.c[k] = c;
            self.h[k] = sigmoid(o[k]) * tanh(c);
        }
    }
}

impl LstmWorkload {
    /// One direction over the whole sequence from state `h`, `c` (`[batch, hidden]`): its
    /// outputs into `out` (`[seq, batch, hidden]`), the products on `threads` threads.
    fn direction(
        &self,
        dir: &Direction,
        x: &[f32],
        mut h: Vec<f32>,
        mut c: Vec<f32>,
        out: &mut [f32],
        threads: usize,
    ) {
        let (seq, batch, hidden) = (self.seq, self.batch, self.hidden);
        let g4 = 4 * hidden;
        let mut xw = vec![0f32; seq * batch * g4];
        for row in xw.chunks_exact_mut(g4) {
            row.copy_from_slice(&dir.bias);
        }
        dir.w.multiply_add(seq * batch, x, &mut xw, g4, threads);
        let mut g = vec![0f32; batch * g4];
        for step in 0..seq {
            let t = if dir.reverse { seq - 1 - step } else { step };
            g.copy_from_slice(&xw[t * batch * g4..][..batch * g4]);
            dir.r.multiply_add(batch, &h, &mut g, g4, threads);
            for n in 0..batch {
                let gn = &g[n * g4..][..g4];
                let (cn, hn) = (
                    &mut c[n * hidden..][..hidden],
                    &mut h[n * hidden..][..hidden],
                );
                Arch::new().dispatch(Gates {
                    g: gn,
                    c: cn,
                    h: hn,
                });
                out[(t * batch + n) * hidden..][..hidden].copy_from_slice(hn);
            }
        }
    }
}

impl Workload for LstmWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (seq, batch, input, hidden) = (self.seq, self.batch, self.input, self.hidden);
        let dirs = self.directions.len();
        let x = floats(inputs[0].data.as_slice());
        let (h0, c0) = (
            floats(inputs[4].data.as_slice()),
            floats(inputs[5].data.as_slice()),
        );
        let y = outputs[0].as_f32_mut()?;
        if x.len() != seq * batch * input
            || h0.len() != dirs * batch * hidden
            || c0.len() != h0.len()
            || y.len() != seq * dirs * batch * hidden
        {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        // Each direction into a `[seq, batch, hidden]` run of its own, then interleaved into
        // `y`. Two directions on two threads run side by side, each on one thread: a batch of
        // one makes each step's product a row against `r` (read from memory every step),
        // which gains nothing from being split, and each split costs a hand-over.
        let run = seq * batch * hidden;
        let mut runs = vec![0f32; dirs * run];
        let side_by_side = dirs > 1 && self.threads > 1;
        let threads = if side_by_side { 1 } else { self.threads };
        let state = |d: usize| {
            let at = d * batch * hidden..(d + 1) * batch * hidden;
            (h0[at.clone()].to_vec(), c0[at].to_vec())
        };
        let one = |(d, out): (usize, &mut [f32])| {
            let (h, c) = state(d);
            self.direction(&self.directions[d], &x, h, c, out, threads);
        };
        let parts = runs.chunks_exact_mut(run.max(1)).enumerate();
        crate::gemm::for_each_part(if side_by_side { dirs } else { 1 }, parts, one);
        for (d, own) in runs.chunks_exact(run.max(1)).enumerate() {
            for (tn, row) in own.chunks_exact(hidden.max(1)).enumerate() {
                let (t, n) = (tn / batch, tn % batch);
                y[((t * dirs + d) * batch + n) * hidden..][..hidden].copy_from_slice(row);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{LayerDescriptor, LstmDescriptor, RecurrentDirection};

    use crate::workloads::test_support::{assert_close, run_with_constants, with_threads};

    /// ONNX's LSTM equations in f64, gate by gate, `W` and `R` read as matrices.
    fn definition(
        [x, w, r, b, h0, c0]: [&[f32]; 6],
        [seq, batch, input, hidden]: [usize; 4],
        reverse: &[bool],
    ) -> Vec<f64> {
        let dirs = reverse.len();
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let mut y = vec![0.0; seq * dirs * batch * hidden];
        for (d, &back) in reverse.iter().enumerate() {
            for n in 0..batch {
                let at = |t: &[f32], j: usize| f64::from(t[(d * batch + n) * hidden + j]);
                let mut h: Vec<f64> = (0..hidden).map(|j| at(h0, j)).collect();
                let mut c: Vec<f64> = (0..hidden).map(|j| at(c0, j)).collect();
                for s in 0..seq {
                    let t = if back { seq - 1 - s } else { s };
                    let gate = |k: usize, j: usize, h: &[f64]| {
                        let row = d * 4 * hidden + k * hidden + j;
                        let mut v = f64::from(b[d * 8 * hidden + k * hidden + j])
                            + f64::from(b[d * 8 * hidden + 4 * hidden + k * hidden + j]);
                        for i in 0..input {
                            v += f64::from(x[(t * batch + n) * input + i])
                                * f64::from(w[row * input + i]);
                        }
                        for (i, &hi) in h.iter().enumerate() {
                            v += hi * f64::from(r[row * hidden + i]);
                        }
                        v
                    };
                    let (mut hn, mut cn) = (vec![0.0; hidden], vec![0.0; hidden]);
                    for j in 0..hidden {
                        let (i, o) = (sig(gate(0, j, &h)), sig(gate(1, j, &h)));
                        let (f, g) = (sig(gate(2, j, &h)), gate(3, j, &h).tanh());
                        cn[j] = f * c[j] + i * g;
                        hn[j] = o * cn[j].tanh();
                    }
                    (h, c) = (hn, cn);
                    for (j, &hj) in h.iter().enumerate() {
                        y[((t * dirs + d) * batch + n) * hidden + j] = hj;
                    }
                }
            }
        }
        y
    }

    #[test]
    fn lstm_matches_the_equations() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut v = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
                })
                .collect()
        };
        for (direction, reverse) in [
            (RecurrentDirection::Forward, vec![false]),
            (RecurrentDirection::Reverse, vec![true]),
            (RecurrentDirection::Bidirectional, vec![false, true]),
        ] {
            // 37 gate columns per direction: more than one packed panel, a partial last one.
            let (seq, batch, input, hidden) = (5usize, 3usize, 7usize, 37usize);
            let dirs = reverse.len();
            let (x, w, r) = (
                v(seq * batch * input),
                v(dirs * 4 * hidden * input),
                v(dirs * 4 * hidden * hidden),
            );
            let (b, h0, c0) = (
                v(dirs * 8 * hidden),
                v(dirs * batch * hidden),
                v(dirs * batch * hidden),
            );
            let want = definition(
                [&x, &w, &r, &b, &h0, &c0],
                [seq, batch, input, hidden],
                &reverse,
            );
            let u = |v: usize| v as u32;
            let layer = LayerDescriptor::Lstm(LstmDescriptor {
                hidden_size: u(hidden),
                direction,
            });
            let (g4, d) = (u(4 * hidden), u(dirs));
            for threads in [1, 2] {
                let got = with_threads(threads, || {
                    run_with_constants(
                        &layer,
                        &[
                            (&[u(seq), u(batch), u(input)], &x, false),
                            (&[d, g4, u(input)], &w, true),
                            (&[d, g4, u(hidden)], &r, true),
                            (&[d, 2 * g4], &b, true),
                            (&[d, u(batch), u(hidden)], &h0, false),
                            (&[d, u(batch), u(hidden)], &c0, false),
                        ],
                        &[u(seq), d, u(batch), u(hidden)],
                    )
                });
                assert_close(
                    &got,
                    &want,
                    1e-4,
                    &format!("{direction:?}, {threads} thread(s)"),
                );
            }
        }
    }
}
