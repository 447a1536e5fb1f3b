//! The layers that move or copy values without arithmetic: `Reshape`, `Flatten`, `Concat`,
//! `Transpose`, `Pad`, `Slice`, `Gather`, `BroadcastTo`, `NonZero` and `Unique`.

use backplane_api::{PadDescriptor, PadMode, SliceDescriptor};

use super::{Tensor, broadcast_shape, indices, input};

/// `Reshape` (and `MemCopy`): the same elements in the same order, another shape.
pub fn reshape(x: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if shape.iter().product::<usize>() != x.len() {
        return Err(format!("cannot reshape {:?} into {shape:?}", x.shape));
    }
    Ok(Tensor::new(shape, x.data.clone()))
}

/// `Flatten` at `axis`: `[product of dims before axis, product of the rest]`.
pub fn flatten(x: &Tensor, axis: usize) -> Result<Tensor, String> {
    let outer: usize = x.shape[..axis].iter().product();
    let inner: usize = x.shape[axis..].iter().product();
    reshape(x, &[outer, inner])
}

/// `Concat` along `axis`: the inputs one after another along it.
pub fn concat(inputs: &[Tensor], axis: usize) -> Result<Tensor, String> {
    let first = input(inputs, 0)?;
    let mut shape = first.shape.clone();
    shape[axis] = inputs.iter().map(|t| t.shape[axis]).sum();
    let mut y = Tensor::zeros(&shape);
    for index in indices(&shape) {
        let mut k = index[axis];
        for t in inputs {
            if k < t.shape[axis] {
                let mut i = index.clone();
                i[axis] = k;
                y.set(&index, t.at(&i));
                break;
            }
            k -= t.shape[axis];
        }
    }
    Ok(y)
}

/// `Transpose`: output dimension `k` is input dimension `perm[k]`, so
/// `y[o] = x[i]` with `i[perm[k]] = o[k]`.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Result<Tensor, String> {
    if perm.len() != x.shape.len() {
        return Err(format!("{perm:?} does not permute {:?}", x.shape));
    }
    let shape: Vec<usize> = perm.iter().map(|&p| x.shape[p]).collect();
    let mut y = Tensor::zeros(&shape);
    for o in indices(&shape) {
        let mut i = vec![0; perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            i[p] = o[k];
        }
        y.set(&o, x.at(&i));
    }
    Ok(y)
}

/// `Pad`: output index `o` along a dimension of size `n` with `before` added reads input
/// `o - before`; outside `0..n`, `Constant` gives the value, `Reflect` mirrors without
/// repeating the edge (`-1` reads `1`, `n` reads `n - 2`), `Edge` repeats the edge.
pub fn pad(x: &Tensor, d: &PadDescriptor) -> Result<Tensor, String> {
    if d.padding.len() != x.shape.len() {
        return Err("one padding pair per dimension".into());
    }
    let shape: Vec<usize> = x
        .shape
        .iter()
        .zip(d.padding.iter())
        .map(|(&n, p)| n + p.before as usize + p.after as usize)
        .collect();
    let mut y = Tensor::zeros(&shape);
    'element: for o in indices(&shape) {
        let mut i = Vec::with_capacity(o.len());
        for (k, p) in d.padding.iter().enumerate() {
            let n = x.shape[k] as i64;
            let mut at = o[k] as i64 - i64::from(p.before);
            if !(0..n).contains(&at) {
                match d.mode {
                    PadMode::Constant => {
                        y.set(&o, f64::from(d.value));
                        continue 'element;
                    }
                    PadMode::Reflect => {
                        at = if at < 0 { -at } else { 2 * (n - 1) - at };
                    }
                    PadMode::Edge => at = at.clamp(0, n - 1),
                }
            }
            i.push(at as usize);
        }
        y.set(&o, x.at(&i));
    }
    Ok(y)
}

/// `Slice`: output index `o` of dimension `d` reads input index `begin[d] + o * step[d]`.
pub fn slice(x: &Tensor, d: &SliceDescriptor) -> Result<Tensor, String> {
    let shape: Vec<usize> = d.size.iter().map(|&s| s as usize).collect();
    if shape.len() != x.shape.len() || d.begin.len() != shape.len() || d.step.len() != shape.len() {
        return Err("one begin, step and size per dimension".into());
    }
    let mut y = Tensor::zeros(&shape);
    for o in indices(&shape) {
        let i: Option<Vec<usize>> = (0..o.len())
            .map(|k| {
                let at = i64::from(d.begin[k]) + o[k] as i64 * i64::from(d.step[k]);
                usize::try_from(at).ok().filter(|&at| at < x.shape[k])
            })
            .collect();
        y.set(&o, x.at(&i.ok_or("the slice reads outside the input")?));
    }
    Ok(y)
}

/// `Gather` along `axis`: `y[i.., j.., k..] = data[i.., indices[j..], k..]`, a negative index
/// counting from the end.
pub fn gather(data: &Tensor, idx: &Tensor, axis: usize) -> Result<Tensor, String> {
    let mut shape = data.shape[..axis].to_vec();
    shape.extend(&idx.shape);
    shape.extend(&data.shape[axis + 1..]);
    let d = data.shape[axis] as i64;
    let mut y = Tensor::zeros(&shape);
    for o in indices(&shape) {
        let j = &o[axis..axis + idx.shape.len()];
        let raw = idx.at(j) as i64;
        let at = if raw < 0 { raw + d } else { raw };
        if !(0..d).contains(&at) {
            return Err(format!("index {raw} outside [-{d}, {d})"));
        }
        let mut i = o[..axis].to_vec();
        i.push(at as usize);
        i.extend(&o[axis + idx.shape.len()..]);
        y.set(&o, data.at(&i));
    }
    Ok(y)
}

/// `BroadcastTo`: `x` read with numpy broadcasting at every index of `shape`.
pub fn broadcast_to(x: &Tensor, shape: &[usize]) -> Result<Tensor, String> {
    if broadcast_shape(&x.shape, shape)? != shape {
        return Err(format!("{:?} does not broadcast to {shape:?}", x.shape));
    }
    let data = indices(shape).iter().map(|i| x.at_broadcast(i)).collect();
    Ok(Tensor::new(shape, data))
}

/// `NonZero` (Backend API 1.5), as the API lays it out: `[rank + 1, n]`, the count of
/// non-zero elements (NaN counts, -0 does not) in row 0, column 0; below it, in the first
/// `count` columns, each non-zero element's index along each dimension, in row-major order;
/// zeros elsewhere.
pub fn non_zero(x: &Tensor) -> Result<Tensor, String> {
    let rank = x.shape.len();
    let n = x.data.len();
    if rank == 0 || n == 0 {
        return Err(format!("NonZero of shape {:?} is not defined", x.shape));
    }
    let mut out = vec![0.0; (rank + 1) * n];
    let mut count = 0;
    for (flat, &v) in x.data.iter().enumerate() {
        if v != 0.0 || v.is_nan() {
            let mut rest = flat;
            for d in (0..rank).rev() {
                out[(d + 1) * n + count] = (rest % x.shape[d]) as f64;
                rest /= x.shape[d];
            }
            count += 1;
        }
    }
    out[0] = count as f64;
    Ok(Tensor::new(&[rank + 1, n], out))
}

/// `Unique` (see `UniqueDescriptor`): the items are `x`'s elements (`flatten`) or its slices
/// along `axis`; the distinct ones by first occurrence, ordered ascending (lexicographically)
/// when `sorted`; the output `[4, n]`: the count, the first positions, every item's index
/// among the distinct ones, and the counts.
pub fn unique(x: &Tensor, d: &backplane_api::UniqueDescriptor) -> Result<Tensor, String> {
    if x.shape.is_empty() {
        return Err("Unique of a scalar".into());
    }
    let items: Vec<Vec<f64>> = if d.flatten {
        x.data.iter().map(|&v| vec![v]).collect()
    } else {
        let axis = d.axis as usize;
        let n = *x.shape.get(axis).ok_or("axis out of range")?;
        // Item i gathers every element whose index along `axis` is i, in row-major order.
        let mut items = vec![Vec::new(); n];
        for (flat, index) in indices(&x.shape).iter().enumerate() {
            items[index[axis]].push(x.data[flat]);
        }
        items
    };
    let n = items.len();
    let mut distinct: Vec<usize> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if !distinct.iter().any(|&j| items[j] == *item) {
            distinct.push(i);
        }
    }
    if d.sorted {
        distinct.sort_by(|&a, &b| items[a].partial_cmp(&items[b]).unwrap());
    }
    let mut out = vec![0.0; 4 * n];
    out[0] = distinct.len() as f64;
    for (pos, &first) in distinct.iter().enumerate() {
        out[n + pos] = first as f64;
    }
    for (i, item) in items.iter().enumerate() {
        let pos = distinct.iter().position(|&j| items[j] == *item).unwrap();
        out[2 * n + i] = pos as f64;
        out[3 * n + pos] += 1.0;
    }
    Ok(Tensor::new(&[4, n], out))
}
