//! The reductions over axes: `Mean`, `Reduce` and `ArgMinMax`.

use backplane_api::{ArgMinMaxDescriptor, ArgMinMaxFunction, ReduceOperation};

use super::{Tensor, indices, movement::reshape};

/// `Reduce` (and `Mean`, which is `Reduce` with `Mean`) over `axes`: the reduced dimensions
/// dropped, or kept as 1. Sum, product, mean; a maximum or minimum is NaN when any element is.
pub fn reduce(
    x: &Tensor,
    axes: &[usize],
    keep_dims: bool,
    op: ReduceOperation,
) -> Result<Tensor, String> {
    if axes.iter().any(|&a| a >= x.shape.len()) {
        return Err(format!("axes {axes:?} out of range for {:?}", x.shape));
    }
    // The kept shape (reduced dimensions as 1), then the output's.
    let kept: Vec<usize> = (0..x.shape.len())
        .map(|d| if axes.contains(&d) { 1 } else { x.shape[d] })
        .collect();
    let mut groups: Vec<Vec<f64>> = vec![Vec::new(); kept.iter().product()];
    let grouping = Tensor::zeros(&kept);
    for i in indices(&x.shape) {
        let g: Vec<usize> = (0..i.len())
            .map(|d| if axes.contains(&d) { 0 } else { i[d] })
            .collect();
        groups[grouping.offset(&g)].push(x.at(&i));
    }
    let data = groups
        .iter()
        .map(|g| match op {
            ReduceOperation::Sum => g.iter().sum(),
            ReduceOperation::Prod => g.iter().product(),
            ReduceOperation::Mean => g.iter().sum::<f64>() / g.len() as f64,
            ReduceOperation::Max if g.iter().any(|v| v.is_nan()) => f64::NAN,
            ReduceOperation::Min if g.iter().any(|v| v.is_nan()) => f64::NAN,
            ReduceOperation::Max => g.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ReduceOperation::Min => g.iter().copied().fold(f64::INFINITY, f64::min),
        })
        .collect();
    let shape: Vec<usize> = if keep_dims {
        kept
    } else {
        (0..x.shape.len())
            .filter(|d| !axes.contains(d))
            .map(|d| x.shape[d])
            .collect()
    };
    Ok(Tensor::new(&shape, data))
}

/// `ArgMinMax` along `axis`: the index (as a value, Signed32 in the output) of the largest or
/// smallest element, the first among equals (the last with `select_last_index`); a NaN counts
/// as larger than everything for `Max` and smaller for `Min`.
pub fn arg_min_max(x: &Tensor, d: &ArgMinMaxDescriptor) -> Result<Tensor, String> {
    let axis = d.axis as usize;
    let n = x.shape[axis];
    // A key in which "better" is "greater", NaN included.
    let key = |v: f64| -> (i8, f64) {
        match (d.function, v.is_nan()) {
            (ArgMinMaxFunction::Max, true) => (1, 0.0),
            (ArgMinMaxFunction::Max, false) => (0, v),
            (ArgMinMaxFunction::Min, true) => (1, 0.0),
            (ArgMinMaxFunction::Min, false) => (0, -v),
        }
    };
    let mut kept = x.shape.clone();
    kept[axis] = 1;
    let mut y = Tensor::zeros(&kept);
    for o in indices(&kept) {
        let at = |k: usize| {
            let mut i = o.clone();
            i[axis] = k;
            key(x.at(&i))
        };
        let mut best = 0;
        for k in 1..n {
            let better = if d.select_last_index {
                at(k) >= at(best)
            } else {
                at(k) > at(best)
            };
            if better {
                best = k;
            }
        }
        y.set(&o, best as f64);
    }
    if !d.keep_dims {
        kept.remove(axis);
        y = reshape(&y, &kept)?;
    }
    Ok(y)
}
