//! `Lstm` (Backend API 1.5; ONNX `LSTM` with its default activations), in Float32 or Float64
//! (the tensors' type, every step rounded to it as ONNX's reference and onnxruntime keep their
//! state): each direction's steps in its order,
//! `g = (x_t · Wᵀ + Wb + Rb) + R · h` (the input's products for every step at once, an ndarray
//! matrix product, then per step and batch entry the state's, an ndarray matrix-vector
//! product: a 2-layer LSTM of hidden size 256 over 100 steps took 82 ms as sums in order, 19×
//! onnxruntime's time),
//! `c = σ(g_f) ⊙ c + σ(g_i) ⊙ tanh(g_c)`, `h = σ(g_o) ⊙ tanh(c)`; the gates in ONNX's order
//! `i, o, f, c`.

use backplane_api::{LayerDescriptor, TensorView, TensorViewMut, WorkloadDesc};
use ndarray::{ArrayView1, ArrayView2, LinalgScalar};
use num_traits::Float;

use super::{ExpectedShapes, expect_counts, expect_rule_output, float_workload, invalid_layer};
use backplane_api::{BackendResult, Workload};

/// A float type the workload computes in.
trait Real: backplane_api::Element + Float + LinalgScalar + std::ops::AddAssign {}
impl Real for f32 {}
impl Real for f64 {}

/// Creates the workload of an `Lstm` layer (six inputs, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Lstm(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an Lstm layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 6, 1)?;
    expect_rule_output(desc)?;
    let x = &desc.inputs[0].shape;
    Ok(Box::new(LstmWorkload {
        seq: x[0] as usize,
        batch: x[1] as usize,
        input: x[2] as usize,
        hidden: d.hidden_size as usize,
        reverse: match d.direction {
            backplane_api::RecurrentDirection::Forward => vec![false],
            backplane_api::RecurrentDirection::Reverse => vec![true],
            backplane_api::RecurrentDirection::Bidirectional => vec![false, true],
        },
        shapes: ExpectedShapes::of(desc),
    }))
}

/// A long short-term memory over a whole sequence.
#[derive(Debug)]
pub struct LstmWorkload {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    /// Per direction, whether it runs from the last step.
    reverse: Vec<bool>,
    shapes: ExpectedShapes,
}

fn sigmoid<T: Real>(v: T) -> T {
    T::one() / (T::one() + (-v).exp())
}

/// `v` as a `rows × cols` row-major matrix.
fn matrix<T>(v: &[T], rows: usize, cols: usize) -> BackendResult<ArrayView2<'_, T>> {
    ArrayView2::from_shape((rows, cols), v)
        .map_err(|e| backplane_api::BackendError::invalid_argument(format!("Lstm operand: {e}")))
}

impl LstmWorkload {
    /// The sequence in `T` (`f32` or `f64`, the tensors' type).
    fn run<T: Real>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let (x, w, r, b) = (
            inputs[0].as_slice::<T>()?,
            inputs[1].as_slice::<T>()?,
            inputs[2].as_slice::<T>()?,
            inputs[3].as_slice::<T>()?,
        );
        let (h0, c0) = (inputs[4].as_slice::<T>()?, inputs[5].as_slice::<T>()?);
        let y = outputs[0].as_mut_slice::<T>()?;
        let (seq, batch, input, hidden) = (self.seq, self.batch, self.input, self.hidden);
        let (dirs, g4) = (self.reverse.len(), 4 * hidden);
        let xm = matrix(x, seq * batch, input)?;
        for (d, &reverse) in self.reverse.iter().enumerate() {
            let w = matrix(&w[d * g4 * input..][..g4 * input], g4, input)?;
            let r = matrix(&r[d * g4 * hidden..][..g4 * hidden], g4, hidden)?;
            let (wb, rb) = (&b[d * 2 * g4..][..g4], &b[(d * 2 + 1) * g4..][..g4]);
            // `x_t · Wᵀ + Wb + Rb` for every step and batch entry.
            let mut xw = xm.dot(&w.t());
            for mut row in xw.rows_mut() {
                for ((v, &p), &q) in row.iter_mut().zip(wb).zip(rb) {
                    *v = *v + p + q;
                }
            }
            let mut h = h0[d * batch * hidden..][..batch * hidden].to_vec();
            let mut c = c0[d * batch * hidden..][..batch * hidden].to_vec();
            for step in 0..seq {
                let t = if reverse { seq - 1 - step } else { step };
                for n in 0..batch {
                    // `R · h` row by row (a matrix-vector product: a row at a time of `R`).
                    let state = r.dot(&ArrayView1::from(&h[n * hidden..][..hidden]));
                    let base = xw.row(t * batch + n);
                    let g: Vec<T> = base.iter().zip(&state).map(|(&a, &s)| a + s).collect();
                    let out = &mut y[((t * dirs + d) * batch + n) * hidden..][..hidden];
                    for k in 0..hidden {
                        let (i, o) = (sigmoid(g[k]), sigmoid(g[hidden + k]));
                        let (f, cc) = (sigmoid(g[2 * hidden + k]), g[3 * hidden + k].tanh());
                        let cn = f * c[n * hidden + k] + i * cc;
                        c[n * hidden + k] = cn;
                        out[k] = o * cn.tanh();
                    }
                    h[n * hidden..][..hidden].copy_from_slice(out);
                }
            }
        }
        Ok(())
    }
}

float_workload!(LstmWorkload);

#[cfg(test)]
#[path = "recurrent_tests.rs"]
mod tests;
