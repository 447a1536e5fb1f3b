//! Matrix products, `FullyConnected` and `BatchMatMul`, and `Determinant`.

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

/// `Determinant` of each `[m, m]` matrix of `x`, by Leibniz's formula: the sum over every
/// permutation `p` of `sign(p) * prod_i x[i, p(i)]` (the suite's matrices are small).
pub fn determinant(x: &Tensor) -> Result<Tensor, String> {
    let r = x.shape.len();
    if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
        return Err(format!("Det of {:?}", x.shape));
    }
    let m = x.shape[r - 1];
    if m > 7 {
        return Err(format!(
            "the oracle's Leibniz formula stops at 7x7, got {m}x{m}"
        ));
    }
    // Every permutation of 0..m, with its sign, by Heap's algorithm.
    let mut perms: Vec<(Vec<usize>, f64)> = Vec::new();
    let mut p: Vec<usize> = (0..m).collect();
    let mut c = vec![0usize; m];
    let mut sign = 1.0;
    perms.push((p.clone(), sign));
    let mut i = 1;
    while i < m {
        if c[i] < i {
            let j = if i % 2 == 0 { 0 } else { c[i] };
            p.swap(j, i);
            sign = -sign;
            perms.push((p.clone(), sign));
            c[i] += 1;
            i = 1;
        } else {
            c[i] = 0;
            i += 1;
        }
    }
    let out_shape = &x.shape[..r - 2];
    let count: usize = out_shape.iter().product();
    let data = (0..count)
        .map(|b| {
            let a = &x.data[b * m * m..][..m * m];
            perms
                .iter()
                .map(|(p, s)| s * (0..m).map(|i| a[i * m + p[i]]).product::<f64>())
                .sum()
        })
        .collect();
    Ok(Tensor::new(out_shape, data))
}
