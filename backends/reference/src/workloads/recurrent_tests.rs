//! Tests of `recurrent.rs`: an LSTM against ONNX's equations written here in f64, one gate
//! and one matrix product at a time (`W` and `R` read as matrices, not rows).

use backplane_api::{LayerDescriptor, LstmDescriptor, RecurrentDirection};

use crate::workloads::test_support::{Lcg, assert_close, run};

/// ONNX's LSTM (default activations) of `x` `[seq, batch, input]`, directions `rev`: `Y`.
#[allow(clippy::too_many_arguments, reason = "ONNX's inputs, one by one")]
fn definition(
    x: &[f32],
    w: &[f32],
    r: &[f32],
    b: &[f32],
    h0: &[f32],
    c0: &[f32],
    [seq, batch, input, hidden]: [usize; 4],
    rev: &[bool],
) -> Vec<f64> {
    let dirs = rev.len();
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let mut y = vec![0.0; seq * dirs * batch * hidden];
    for (d, &reverse) in rev.iter().enumerate() {
        // W[d] is 4H x input, R[d] is 4H x H: gate block `k` holds rows k*H .. (k+1)*H.
        let wm = |row: usize, col: usize| f64::from(w[(d * 4 * hidden + row) * input + col]);
        let rm = |row: usize, col: usize| f64::from(r[(d * 4 * hidden + row) * hidden + col]);
        let bias = |k: usize, j: usize| {
            f64::from(b[d * 8 * hidden + k * hidden + j])
                + f64::from(b[d * 8 * hidden + 4 * hidden + k * hidden + j])
        };
        for n in 0..batch {
            let mut h: Vec<f64> = (0..hidden)
                .map(|j| f64::from(h0[(d * batch + n) * hidden + j]))
                .collect();
            let mut c: Vec<f64> = (0..hidden)
                .map(|j| f64::from(c0[(d * batch + n) * hidden + j]))
                .collect();
            let order: Vec<usize> = if reverse {
                (0..seq).rev().collect()
            } else {
                (0..seq).collect()
            };
            for t in order {
                let gate = |k: usize, j: usize, h: &[f64]| {
                    let row = k * hidden + j;
                    let xw: f64 = (0..input)
                        .map(|i| f64::from(x[(t * batch + n) * input + i]) * wm(row, i))
                        .sum();
                    let hr: f64 = (0..hidden).map(|i| h[i] * rm(row, i)).sum();
                    xw + hr + bias(k, j)
                };
                let (mut hn, mut cn) = (vec![0.0; hidden], vec![0.0; hidden]);
                for j in 0..hidden {
                    let (i, o) = (sig(gate(0, j, &h)), sig(gate(1, j, &h)));
                    let (f, g) = (sig(gate(2, j, &h)), gate(3, j, &h).tanh());
                    cn[j] = f * c[j] + i * g;
                    hn[j] = o * cn[j].tanh();
                }
                (h, c) = (hn, cn);
                for j in 0..hidden {
                    y[((t * dirs + d) * batch + n) * hidden + j] = h[j];
                }
            }
        }
    }
    y
}

#[test]
fn lstm_matches_onnx_equations() {
    let mut rng = Lcg(0x15_7e57);
    for (direction, rev) in [
        (RecurrentDirection::Forward, vec![false]),
        (RecurrentDirection::Reverse, vec![true]),
        (RecurrentDirection::Bidirectional, vec![false, true]),
    ] {
        let (seq, batch, input, hidden) = (4usize, 2usize, 3usize, 5usize);
        let dirs = rev.len();
        let mut v = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.next_in(-1.0, 1.0)).collect() };
        let x = v(seq * batch * input);
        let w = v(dirs * 4 * hidden * input);
        let r = v(dirs * 4 * hidden * hidden);
        let b = v(dirs * 8 * hidden);
        let h0 = v(dirs * batch * hidden);
        let c0 = v(dirs * batch * hidden);
        let want = definition(&x, &w, &r, &b, &h0, &c0, [seq, batch, input, hidden], &rev);
        let u = |v: usize| v as u32;
        let layer = LayerDescriptor::Lstm(LstmDescriptor {
            hidden_size: u(hidden),
            direction,
        });
        let got = run(
            &layer,
            &[
                (&[u(seq), u(batch), u(input)], &x),
                (&[u(dirs), u(4 * hidden), u(input)], &w),
                (&[u(dirs), u(4 * hidden), u(hidden)], &r),
                (&[u(dirs), u(8 * hidden)], &b),
                (&[u(dirs), u(batch), u(hidden)], &h0),
                (&[u(dirs), u(batch), u(hidden)], &c0),
            ],
            &[u(seq), u(dirs), u(batch), u(hidden)],
        );
        assert_close(&got, &want, 1e-5, &format!("{direction:?}"));
    }
}
