//! Matrix products: `FullyConnected` and `BatchMatMul`.

use backplane_api::{BatchMatMulDescriptor, FullyConnectedDescriptor};

use super::{Tensor, broadcast_shape, indices, input};

/// `FullyConnected`: `y[n, o] = bias[o] + sum over i of x[n, i] * w[i, o]` (`w[o, i]` with
/// `transpose_weights`).
pub fn fully_connected(inputs: &[Tensor], d: &FullyConnectedDescriptor) -> Result<Tensor, String> {
    let (x, w) = (input(inputs, 0)?, input(inputs, 1)?);
    let (n, k) = (x.shape[0], x.shape[1]);
    let m = if d.transpose_weights {
        w.shape[0]
    } else {
        w.shape[1]
    };
    let mut y = Tensor::zeros(&[n, m]);
    for b in 0..n {
        for o in 0..m {
            let mut acc = if d.bias_enabled {
                input(inputs, 2)?.at(&[o])
            } else {
                0.0
            };
            for i in 0..k {
                let weight = if d.transpose_weights {
                    w.at(&[o, i])
                } else {
                    w.at(&[i, o])
                };
                acc += x.at(&[b, i]) * weight;
            }
            y.set(&[b, o], acc);
        }
    }
    Ok(y)
}

/// `BatchMatMul`: `y[batch.., i, j] = sum over k of A[batch.., i, k] * B[batch.., k, j]`, the
/// batch dimensions broadcast as numpy does; `A` is `a` or, with `transpose_a`, `a`'s matrices
/// transposed (so `a` is `[.., K, M]`), and the same for `B`.
pub fn batch_matmul(a: &Tensor, b: &Tensor, d: &BatchMatMulDescriptor) -> Result<Tensor, String> {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra < 2 || rb < 2 {
        return Err("BatchMatMul operands have rank 2 or more".into());
    }
    let (m, k) = if d.transpose_a {
        (a.shape[ra - 1], a.shape[ra - 2])
    } else {
        (a.shape[ra - 2], a.shape[ra - 1])
    };
    let n = if d.transpose_b {
        b.shape[rb - 2]
    } else {
        b.shape[rb - 1]
    };
    let batch = broadcast_shape(&a.shape[..ra - 2], &b.shape[..rb - 2])?;
    // The batch part of an operand's index for output batch index `o`.
    let batch_index = |shape: &[usize], o: &[usize]| -> Vec<usize> {
        let skip = o.len() - shape.len();
        shape
            .iter()
            .zip(&o[skip..])
            .map(|(&d, &i)| if d == 1 { 0 } else { i })
            .collect()
    };
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let mut y = Tensor::zeros(&shape);
    for o in indices(&batch) {
        let ab = batch_index(&a.shape[..ra - 2], &o);
        let bb = batch_index(&b.shape[..rb - 2], &o);
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0.0;
                for kk in 0..k {
                    let mut ai = ab.clone();
                    ai.extend(if d.transpose_a { [kk, i] } else { [i, kk] });
                    let mut bi = bb.clone();
                    bi.extend(if d.transpose_b { [j, kk] } else { [kk, j] });
                    acc += a.at(&ai) * b.at(&bi);
                }
                let mut yi = o.clone();
                yi.extend([i, j]);
                y.set(&yi, acc);
            }
        }
    }
    Ok(y)
}
