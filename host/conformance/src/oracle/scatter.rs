//! The scatter layers (Backend API 1.5): `ScatterElements` and `ScatterNd`, from their
//! definitions over multi-indices: the output starts as `data`, then each update, in the
//! updates' row-major order, replaces or is combined with the element it names.

use backplane_api::ScatterReduction;

use super::{Tensor, indices};

/// `element` combined with `update` by `r`.
fn combine(r: ScatterReduction, element: f64, update: f64) -> f64 {
    match r {
        ScatterReduction::None => update,
        ScatterReduction::Add => element + update,
        ScatterReduction::Mul => element * update,
        ScatterReduction::Max => element.max(update),
        ScatterReduction::Min => element.min(update),
    }
}

/// The flat position of multi-index `at` in `shape`.
fn flat(shape: &[usize], at: &[usize]) -> usize {
    at.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// An index value as a position along a dimension of `size` (negative from the end).
fn position(i: f64, size: usize) -> Result<usize, String> {
    let at = if i < 0.0 { i + size as f64 } else { i };
    if at < 0.0 || at >= size as f64 || at.fract() != 0.0 {
        return Err(format!("index {i} is outside a dimension of {size}"));
    }
    Ok(at as usize)
}

/// `ScatterElements` along `axis`.
pub fn scatter_elements(
    data: &Tensor,
    idx: &Tensor,
    updates: &Tensor,
    axis: usize,
    r: ScatterReduction,
) -> Result<Tensor, String> {
    if idx.shape != updates.shape || idx.shape.len() != data.shape.len() {
        return Err(format!(
            "indices {:?}, updates {:?} and data {:?} do not fit",
            idx.shape, updates.shape, data.shape
        ));
    }
    let mut y = data.clone();
    for (k, at) in indices(&idx.shape).into_iter().enumerate() {
        let mut target = at.clone();
        target[axis] = position(idx.data[k], data.shape[axis])?;
        let t = flat(&data.shape, &target);
        y.data[t] = combine(r, y.data[t], updates.data[k]);
    }
    Ok(y)
}

/// `ScatterNd`.
pub fn scatter_nd(
    data: &Tensor,
    idx: &Tensor,
    updates: &Tensor,
    r: ScatterReduction,
) -> Result<Tensor, String> {
    let k = *idx.shape.last().ok_or("indices must have rank >= 1")?;
    if k == 0 || k > data.shape.len() {
        return Err(format!("tuples of {k} for data {:?}", data.shape));
    }
    let slice_shape = &data.shape[k..];
    let slice_len: usize = slice_shape.iter().product();
    let tuples = idx.len() / k;
    if updates.len() != tuples * slice_len {
        return Err(format!("updates {:?} do not fit", updates.shape));
    }
    let mut y = data.clone();
    for t in 0..tuples {
        let head: Vec<usize> = (0..k)
            .map(|j| position(idx.data[t * k + j], data.shape[j]))
            .collect::<Result<_, _>>()?;
        for (s, rest) in indices(slice_shape).into_iter().enumerate() {
            let at: Vec<usize> = head.iter().copied().chain(rest).collect();
            let p = flat(&data.shape, &at);
            y.data[p] = combine(r, y.data[p], updates.data[t * slice_len + s]);
        }
    }
    Ok(y)
}
