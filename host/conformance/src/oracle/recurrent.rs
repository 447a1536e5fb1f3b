//! The recurrent layer, `Lstm`, from ONNX's equations: for each direction and batch entry, its
//! steps in their order, each gate `k` (`i, o, f, c`) of hidden unit `j` the sum
//! `Σ x_t[i] W[k·H + j, i] + Σ h[i] R[k·H + j, i] + Wb[k·H + j] + Rb[k·H + j]`, then
//! `c = σ(f) c + σ(i) tanh(c̃)`, `h = σ(o) tanh(c)`.

use backplane_api::{LstmDescriptor, RecurrentDirection};

use super::{Tensor, input};

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// `Lstm`: `y` `[seq, D, batch, H]` from `x`, `w`, `r`, `b`, `initial_h`, `initial_c`.
pub fn lstm(inputs: &[Tensor], d: &LstmDescriptor) -> Result<Tensor, String> {
    let x = input(inputs, 0)?;
    let (w, r, b) = (input(inputs, 1)?, input(inputs, 2)?, input(inputs, 3)?);
    let (h0, c0) = (input(inputs, 4)?, input(inputs, 5)?);
    let [seq, batch, size] = x.shape[..] else {
        return Err(format!("x must be 3-D, got {:?}", x.shape));
    };
    let hidden = d.hidden_size as usize;
    let reverse: &[bool] = match d.direction {
        RecurrentDirection::Forward => &[false],
        RecurrentDirection::Reverse => &[true],
        RecurrentDirection::Bidirectional => &[false, true],
    };
    let dirs = reverse.len();
    if w.data.len() != dirs * 4 * hidden * size || r.data.len() != dirs * 4 * hidden * hidden {
        return Err("w or r does not match the sizes".to_owned());
    }
    let mut y = vec![0.0; seq * dirs * batch * hidden];
    for (dir, &back) in reverse.iter().enumerate() {
        for n in 0..batch {
            let state = |t: &Tensor| -> Vec<f64> {
                (0..hidden)
                    .map(|j| t.data[(dir * batch + n) * hidden + j])
                    .collect()
            };
            let (mut h, mut c) = (state(h0), state(c0));
            for s in 0..seq {
                let t = if back { seq - 1 - s } else { s };
                let gate = |k: usize, j: usize, h: &[f64]| -> f64 {
                    let row = dir * 4 * hidden + k * hidden + j;
                    let mut v = b.data[dir * 8 * hidden + k * hidden + j]
                        + b.data[dir * 8 * hidden + 4 * hidden + k * hidden + j];
                    for i in 0..size {
                        v += x.data[(t * batch + n) * size + i] * w.data[row * size + i];
                    }
                    for (i, &hi) in h.iter().enumerate() {
                        v += hi * r.data[row * hidden + i];
                    }
                    v
                };
                let mut next = (vec![0.0; hidden], vec![0.0; hidden]);
                for (j, &cj) in c.iter().enumerate() {
                    let (ig, og) = (sigmoid(gate(0, j, &h)), sigmoid(gate(1, j, &h)));
                    let (fg, cg) = (sigmoid(gate(2, j, &h)), gate(3, j, &h).tanh());
                    next.1[j] = fg * cj + ig * cg;
                    next.0[j] = og * next.1[j].tanh();
                }
                (h, c) = next;
                for (j, &hj) in h.iter().enumerate() {
                    y[((t * dirs + dir) * batch + n) * hidden + j] = hj;
                }
            }
        }
    }
    Ok(Tensor::new(&[seq, dirs, batch, hidden], y))
}
