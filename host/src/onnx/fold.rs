//! Constant tensors held by the importer (not yet layers) and the operations it folds on
//! them: reshape, transpose, gather, slice, concat and broadcasting binary operations. Every
//! operation checks its sizes first and never allocates more than [`MAX_ELEMENTS`] elements.

use backplane_api::{DataType, bytemuck, shapes};

/// The largest number of elements of one constant (1 GiB of `i64`s).
pub(crate) const MAX_ELEMENTS: usize = 1 << 27;

/// A dense, row-major constant tensor.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Const<T> {
    /// Dimensions, outermost first (empty for a scalar).
    pub(crate) shape: Vec<u32>,
    /// The elements.
    pub(crate) data: Vec<T>,
}

/// The number of elements of `shape`, if it is within [`MAX_ELEMENTS`].
pub(crate) fn numel(shape: &[u32]) -> Result<usize, String> {
    match shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
    {
        Some(n) if n <= MAX_ELEMENTS => Ok(n),
        _ => Err(format!(
            "a constant of shape {shape:?} exceeds the limit of {MAX_ELEMENTS} elements"
        )),
    }
}

/// Integer values as the bytes of a tensor of type `t`: a plain integer type, Boolean (a byte
/// each), or a quantized type (its 8-bit storage). `None` for another type; `Some(Err(v))` with
/// the first value outside `t`'s range (never wrapped).
pub fn integer_bytes(values: &[i64], t: DataType) -> Option<Result<Vec<u8>, i64>> {
    fn pack<T: TryFrom<i64> + bytemuck::Pod>(values: &[i64]) -> Result<Vec<u8>, i64> {
        let typed = values
            .iter()
            .map(|&v| T::try_from(v).map_err(|_| v))
            .collect::<Result<Vec<T>, i64>>()?;
        Ok(bytemuck::cast_slice(&typed).to_vec())
    }
    Some(match t {
        DataType::Signed8 | DataType::QAsymmS8 | DataType::QSymmS8 => pack::<i8>(values),
        DataType::Signed16 => pack::<i16>(values),
        DataType::Signed32 => pack::<i32>(values),
        DataType::Signed64 => pack::<i64>(values),
        DataType::UnsignedInt8 | DataType::QAsymmU8 | DataType::Boolean => pack::<u8>(values),
        DataType::UnsignedInt16 => pack::<u16>(values),
        DataType::UnsignedInt32 => pack::<u32>(values),
        DataType::UnsignedInt64 => pack::<u64>(values),
        _ => return None,
    })
}

/// Values as the bytes of a tensor of the 16-bit float type `t` (`Float16` or `BFloat16`),
/// each rounded to nearest even; `None` for another type.
pub fn half_bytes(values: &[f32], t: DataType) -> Option<Vec<u8>> {
    let bits: Vec<u16> = match t {
        DataType::Float16 => values
            .iter()
            .map(|&v| half::f16::from_f32(v).to_bits())
            .collect(),
        DataType::BFloat16 => values
            .iter()
            .map(|&v| half::bf16::from_f32(v).to_bits())
            .collect(),
        _ => return None,
    };
    Some(bytemuck::cast_slice(&bits).to_vec())
}

/// int64 values as int32 (an int64 array fed to a Signed32 input); `Err` with the first value
/// outside int32's range.
pub fn narrow_to_i32(values: &[i64]) -> Result<Vec<i32>, i64> {
    values
        .iter()
        .map(|&v| i32::try_from(v).map_err(|_| v))
        .collect()
}

/// Row-major strides of `shape` (whose element count was checked).
fn strides(shape: &[u32]) -> Vec<usize> {
    let mut out = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1].saturating_mul(shape[i + 1] as usize);
    }
    out
}

fn product(dims: &[u32]) -> usize {
    dims.iter()
        .fold(1usize, |acc, &d| acc.saturating_mul(d as usize))
}

/// Calls `f` with every multi-index of `shape`, in row-major order.
fn for_each_index(shape: &[u32], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut k = shape.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < shape[k] as usize {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Calls `f(index, len)` for every row of `shape` (every multi-index of its axes but the
/// last), in row-major order, `len` the last axis' extent (a scalar is one row of one
/// element); nothing for an empty shape.
fn for_each_row(shape: &[u32], mut f: impl FnMut(&[usize], usize)) {
    match shape.split_last() {
        None => f(&[], 1),
        Some((&last, outer)) if last > 0 => for_each_index(outer, |idx| f(idx, last as usize)),
        Some(_) => {}
    }
}

/// `data` (of `shape`, rank 2 or more) with its last two axes swapped: each matrix transposed
/// in square blocks, so that reads and writes both stay within a few cache lines.
fn swap_last_two<T: Copy>(data: &[T], shape: &[u32]) -> Vec<T> {
    const BLOCK: usize = 32;
    let r = shape.len();
    let (rows, cols) = (shape[r - 2] as usize, shape[r - 1] as usize);
    let mut out = data.to_vec();
    if rows == 0 || cols == 0 {
        return out;
    }
    for (src, dst) in data
        .chunks_exact(rows * cols)
        .zip(out.chunks_exact_mut(rows * cols))
    {
        for i0 in (0..rows).step_by(BLOCK) {
            for j0 in (0..cols).step_by(BLOCK) {
                for i in i0..(i0 + BLOCK).min(rows) {
                    for j in j0..(j0 + BLOCK).min(cols) {
                        dst[j * rows + i] = src[i * cols + j];
                    }
                }
            }
        }
    }
    out
}

/// The offset of the first element of the row at `idx` (see [`for_each_row`]) in a tensor of
/// `strides` (one per axis, the last one the row's step).
fn row_start(idx: &[usize], strides: &[i64]) -> i64 {
    idx.iter().zip(strides).map(|(&i, &s)| i as i64 * s).sum()
}

impl<T: Copy> Const<T> {
    /// A constant, after checking that `data` matches `shape`.
    pub(crate) fn new(shape: Vec<u32>, data: Vec<T>) -> Result<Self, String> {
        let n = numel(&shape)?;
        if n != data.len() {
            return Err(format!(
                "shape {shape:?} needs {n} values, got {}",
                data.len()
            ));
        }
        Ok(Self { shape, data })
    }

    /// A scalar (shape `[]`).
    pub(crate) fn scalar(value: T) -> Self {
        Self {
            shape: Vec::new(),
            data: vec![value],
        }
    }

    /// A 1-D constant.
    pub(crate) fn vector(values: Vec<T>) -> Result<Self, String> {
        let len = u32::try_from(values.len()).map_err(|_| "too many values".to_owned())?;
        Self::new(vec![len], values)
    }

    /// The same values with another shape of the same element count.
    pub(crate) fn reshape(&self, shape: Vec<u32>) -> Result<Self, String> {
        Self::new(shape, self.data.clone())
    }

    /// Applies `f` to every element.
    pub(crate) fn try_map<U>(
        &self,
        f: impl Fn(T) -> Result<U, String>,
    ) -> Result<Const<U>, String> {
        Ok(Const {
            shape: self.shape.clone(),
            data: self.data.iter().map(|&v| f(v)).collect::<Result<_, _>>()?,
        })
    }

    /// Output dimension `i` is input dimension `perm[i]`.
    pub(crate) fn transpose(&self, perm: &[usize]) -> Result<Self, String> {
        let r = self.shape.len();
        let mut seen = vec![false; r];
        if perm.len() != r
            || !perm
                .iter()
                .all(|&p| p < r && !std::mem::replace(&mut seen[p], true))
        {
            return Err(format!("{perm:?} is not a permutation of rank {r}"));
        }
        let src = strides(&self.shape);
        let shape: Vec<u32> = perm.iter().map(|&p| self.shape[p]).collect();
        if r >= 2
            && perm[r - 1] == r - 2
            && perm[r - 2] == r - 1
            && (0..r - 2).all(|i| perm[i] == i)
        {
            return Ok(Self {
                data: swap_last_two(&self.data, &self.shape),
                shape,
            });
        }
        let moved: Vec<i64> = perm.iter().map(|&p| src[p] as i64).collect();
        let mut data = Vec::with_capacity(self.data.len());
        let step = moved.last().copied().unwrap_or(0);
        for_each_row(&shape, |idx, len| {
            let off = row_start(idx, &moved);
            data.extend((0..len as i64).map(|i| self.data[(off + i * step) as usize]));
        });
        Ok(Self { shape, data })
    }

    /// ONNX `Gather` along `axis` with `indices` (negative ones count from the end).
    pub(crate) fn gather(&self, axis: usize, indices: &Const<i64>) -> Result<Self, String> {
        let r = self.shape.len();
        if axis >= r {
            return Err(format!("axis {axis} is out of range for rank {r}"));
        }
        let d = self.shape[axis] as usize;
        let outer = product(&self.shape[..axis]);
        let inner = product(&self.shape[axis + 1..]);
        let mut shape = self.shape[..axis].to_vec();
        shape.extend_from_slice(&indices.shape);
        shape.extend_from_slice(&self.shape[axis + 1..]);
        let n = numel(&shape)?;
        let picks = indices
            .data
            .iter()
            .map(|&i| {
                let j = if i < 0 { i.saturating_add(d as i64) } else { i };
                usize::try_from(j)
                    .ok()
                    .filter(|&j| j < d)
                    .ok_or_else(|| format!("index {i} is out of range for a dimension of {d}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut data = Vec::with_capacity(n);
        for o in 0..outer {
            for &j in &picks {
                let start = (o * d + j) * inner;
                data.extend_from_slice(&self.data[start..start + inner]);
            }
        }
        Ok(Self { shape, data })
    }

    /// ONNX `Slice`: `axes` default to `0..starts.len()`, `steps` to 1.
    pub(crate) fn slice(
        &self,
        starts: &[i64],
        ends: &[i64],
        axes: Option<&[i64]>,
        steps: Option<&[i64]>,
    ) -> Result<Self, String> {
        let ranges = slice_ranges(&self.shape, starts, ends, axes, steps)?;
        let shape: Vec<u32> = ranges.iter().map(|r| r.2).collect();
        let n = numel(&shape)?;
        let src = strides(&self.shape);
        // Each axis' stride in the source times its step, from the first element taken.
        let moved: Vec<i64> = ranges
            .iter()
            .zip(&src)
            .map(|(&(_, step, _), &s)| step * s as i64)
            .collect();
        let base: i64 = ranges
            .iter()
            .zip(&src)
            .map(|(&(first, _, _), &s)| first * s as i64)
            .sum();
        let mut data = Vec::with_capacity(n);
        let step = moved.last().copied().unwrap_or(0);
        for_each_row(&shape, |idx, len| {
            let off = base + row_start(idx, &moved);
            data.extend((0..len as i64).map(|i| self.data[(off + i * step) as usize]));
        });
        Ok(Self { shape, data })
    }

    /// Concatenation of `parts` along `axis`.
    pub(crate) fn concat(parts: &[&Self], axis: usize) -> Result<Self, String> {
        let Some(first) = parts.first() else {
            return Err("nothing to concatenate".to_owned());
        };
        let r = first.shape.len();
        if axis >= r {
            return Err(format!("axis {axis} is out of range for rank {r}"));
        }
        let mut shape = first.shape.clone();
        shape[axis] = 0;
        for p in parts {
            let fits =
                p.shape.len() == r && (0..r).all(|k| k == axis || p.shape[k] == first.shape[k]);
            if !fits {
                return Err(format!(
                    "shapes {:?} and {:?} do not concatenate along axis {axis}",
                    first.shape, p.shape
                ));
            }
            shape[axis] = shape[axis]
                .checked_add(p.shape[axis])
                .ok_or("the concatenated dimension overflows")?;
        }
        let n = numel(&shape)?;
        let outer = product(&first.shape[..axis]);
        let inner = product(&first.shape[axis + 1..]);
        let mut data = Vec::with_capacity(n);
        for o in 0..outer {
            for p in parts {
                let chunk = p.shape[axis] as usize * inner;
                data.extend_from_slice(&p.data[o * chunk..(o + 1) * chunk]);
            }
        }
        Ok(Self { shape, data })
    }

    /// The constant broadcast with `shape` (numpy's rules, in both directions, as ONNX
    /// `Expand` does).
    pub(crate) fn broadcast_to(&self, shape: &[u32]) -> Result<Self, String> {
        let Some(&first) = self.data.first() else {
            let out = shapes::broadcast(&self.shape, shape)?;
            numel(&out)?;
            return Ok(Self {
                shape: out,
                data: Vec::new(),
            });
        };
        let filler = Self::new(shape.to_vec(), vec![first; numel(shape)?])?;
        Self::binary(self, &filler, |x, _| Ok(x))
    }

    /// `f(a, b)` element-wise with numpy broadcasting.
    pub(crate) fn binary(
        a: &Self,
        b: &Self,
        f: impl Fn(T, T) -> Result<T, String>,
    ) -> Result<Self, String> {
        let shape = shapes::broadcast(&a.shape, &b.shape)?;
        let n = numel(&shape)?;
        let r = shape.len();
        // Strides of each operand aligned to the output rank, 0 where it broadcasts.
        let aligned = |s: &[u32]| -> Vec<i64> {
            let st = strides(s);
            (0..r)
                .map(|i| match (i + s.len()).checked_sub(r) {
                    Some(j) if s[j] != 1 => st[j] as i64,
                    _ => 0,
                })
                .collect()
        };
        let mut data = Vec::with_capacity(n);
        if a.shape == b.shape {
            for (&x, &y) in a.data.iter().zip(&b.data) {
                data.push(f(x, y)?);
            }
            return Ok(Self { shape, data });
        }
        let (sa, sb) = (aligned(&a.shape), aligned(&b.shape));
        let (step_a, step_b) = (
            sa.last().copied().unwrap_or(0),
            sb.last().copied().unwrap_or(0),
        );
        let mut err = None;
        for_each_row(&shape, |idx, len| {
            if err.is_some() {
                return;
            }
            let (oa, ob) = (row_start(idx, &sa) as usize, row_start(idx, &sb) as usize);
            for i in 0..len {
                match f(
                    a.data[oa + i * step_a as usize],
                    b.data[ob + i * step_b as usize],
                ) {
                    Ok(v) => data.push(v),
                    Err(e) => {
                        err = Some(e);
                        return;
                    }
                }
            }
        });
        match err {
            Some(e) => Err(e),
            None => Ok(Self { shape, data }),
        }
    }
}

/// ONNX `Slice` on a tensor of shape `shape`, resolved per axis to `(first index, step,
/// count)`: `axes` default to `0..starts.len()`, `steps` to 1; starts and ends are clamped as
/// ONNX says. Axes not named are taken whole.
pub(crate) fn slice_ranges(
    shape: &[u32],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<(i64, i64, u32)>, String> {
    let r = shape.len();
    let default_axes: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes.unwrap_or(&default_axes);
    let ones = vec![1i64; starts.len()];
    let steps = steps.unwrap_or(&ones);
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(format!(
            "starts, ends, axes and steps have different lengths ({}, {}, {}, {})",
            starts.len(),
            ends.len(),
            axes.len(),
            steps.len()
        ));
    }
    // Per axis: first index, step, count.
    let mut ranges: Vec<(i64, i64, u32)> = shape.iter().map(|&d| (0, 1, d)).collect();
    let mut seen = vec![false; r];
    for k in 0..starts.len() {
        let a = shapes::normalize_axis(axes[k], r)?;
        if std::mem::replace(&mut seen[a], true) {
            return Err(format!("axis {} is repeated", axes[k]));
        }
        let d = i64::from(shape[a]);
        let step = steps[k];
        if step == 0 {
            return Err("a slice step of 0".to_owned());
        }
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = (norm(starts[k]), norm(ends[k]));
        let (first, count) = if d == 0 {
            (0, 0)
        } else if step > 0 {
            let (s, e) = (s.clamp(0, d), e.clamp(0, d));
            let count = if e > s {
                (e - s - 1) as u64 / step.unsigned_abs() + 1
            } else {
                0
            };
            (s, count)
        } else {
            let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
            let count = if s > e {
                (s - e - 1) as u64 / step.unsigned_abs() + 1
            } else {
                0
            };
            (s, count)
        };
        // count <= d, so it fits in u32.
        ranges[a] = (first, step, u32::try_from(count).unwrap_or(0));
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Little-endian bytes of each type, range-checked: worked out by hand.
    #[test]
    fn integer_bytes_pack_each_type_without_wrapping() {
        assert_eq!(
            integer_bytes(&[1, -2], DataType::Signed16),
            Some(Ok(vec![1, 0, 0xfe, 0xff]))
        );
        assert_eq!(
            integer_bytes(&[255, 0], DataType::UnsignedInt8),
            Some(Ok(vec![255, 0]))
        );
        assert_eq!(
            integer_bytes(&[256], DataType::UnsignedInt8),
            Some(Err(256))
        );
        assert_eq!(integer_bytes(&[-1], DataType::UnsignedInt64), Some(Err(-1)));
        assert_eq!(
            integer_bytes(&[-128], DataType::QAsymmS8),
            Some(Ok(vec![0x80]))
        );
        assert_eq!(
            integer_bytes(&[1, 0], DataType::Boolean),
            Some(Ok(vec![1, 0]))
        );
        assert_eq!(
            integer_bytes(&[1 << 40], DataType::Signed64),
            Some(Ok((1i64 << 40).to_le_bytes().to_vec()))
        );
        assert_eq!(integer_bytes(&[1], DataType::Float32), None);
    }

    /// binary16 1.0 is 0x3c00 and 1 + 2^-11 ties to it; bfloat16 3.0 is 0x4040.
    #[test]
    fn half_bytes_round_to_nearest_even() {
        assert_eq!(
            half_bytes(&[1.0, 1.0 + 2f32.powi(-11)], DataType::Float16),
            Some(vec![0x00, 0x3c, 0x00, 0x3c])
        );
        assert_eq!(
            half_bytes(&[3.0], DataType::BFloat16),
            Some(vec![0x40, 0x40])
        );
        assert_eq!(half_bytes(&[3.0], DataType::Float32), None);
    }

    fn iota(shape: &[u32]) -> Const<i64> {
        let n = numel(shape).unwrap();
        Const::new(shape.to_vec(), (0..n as i64).collect()).unwrap()
    }

    /// Every permutation of a `[2, 35, 3, 41]` tensor (the blocked swap of the last two axes
    /// among them, with sizes past its block), and broadcasting binary operations and slices
    /// of it, against their definitions element by element.
    #[test]
    fn folds_match_their_definitions_element_by_element() {
        let shape = [2u32, 35, 3, 41];
        let t = iota(&shape);
        let st = strides(&shape);
        let mut perms = vec![vec![0usize, 1, 2, 3]];
        for _ in 0..23 {
            // The next permutation in lexicographic order.
            let mut p = perms.last().unwrap().clone();
            let i = (0..3).rev().find(|&i| p[i] < p[i + 1]).unwrap();
            let j = (i + 1..4).rev().find(|&j| p[j] > p[i]).unwrap();
            p.swap(i, j);
            p[i + 1..].reverse();
            perms.push(p);
        }
        for perm in &perms {
            let got = t.transpose(perm).unwrap();
            let out: Vec<u32> = perm.iter().map(|&p| shape[p]).collect();
            assert_eq!(got.shape, out);
            let mut k = 0;
            for_each_index(&out, |idx| {
                let src: usize = idx.iter().zip(perm).map(|(&i, &p)| i * st[p]).sum();
                assert_eq!(got.data[k], t.data[src], "{perm:?} at {idx:?}");
                k += 1;
            });
        }
        let m = iota(&[35, 41]).transpose(&[1, 0]).unwrap();
        for (j, i) in (0..41).flat_map(|j| (0..35).map(move |i| (j, i))) {
            assert_eq!(m.data[j * 35 + i], (i * 41 + j) as i64);
        }
        let b = iota(&[35, 1, 41]);
        let sum = Const::binary(&t, &b, |x, y| Ok(x * 1000 + y)).unwrap();
        let mut k = 0;
        for_each_index(&shape, |idx| {
            let want = t.data[idx.iter().zip(&st).map(|(i, s)| i * s).sum::<usize>()] * 1000
                + (idx[1] * 41 + idx[3]) as i64;
            assert_eq!(sum.data[k], want, "at {idx:?}");
            k += 1;
        });
        let s = t
            .slice(&[1, 2], &[-1, 40], Some(&[1, 3]), Some(&[3, 7]))
            .unwrap();
        assert_eq!(s.shape, [2, 11, 3, 6]);
        let mut k = 0;
        for_each_index(&s.shape, |idx| {
            let src = idx[0] * st[0] + (1 + 3 * idx[1]) * st[1] + idx[2] * st[2] + 2 + 7 * idx[3];
            assert_eq!(s.data[k], t.data[src], "at {idx:?}");
            k += 1;
        });
    }

    #[test]
    fn transpose_gather_slice_concat_binary() {
        let t = iota(&[2, 3]);
        let tt = t.transpose(&[1, 0]).unwrap();
        assert_eq!(tt.shape, [3, 2]);
        assert_eq!(tt.data, [0, 3, 1, 4, 2, 5]);
        assert!(t.transpose(&[0, 0]).is_err());

        let idx = Const::new(vec![2], vec![-1, 0]).unwrap();
        let g = t.gather(1, &idx).unwrap();
        assert_eq!(
            (g.shape.as_slice(), g.data.as_slice()),
            (&[2, 2][..], &[2, 0, 5, 3][..])
        );
        assert!(t.gather(1, &Const::scalar(3)).is_err());
        let g0 = t.gather(0, &Const::scalar(1)).unwrap();
        assert_eq!(
            (g0.shape.as_slice(), g0.data.as_slice()),
            (&[3][..], &[3, 4, 5][..])
        );

        let v = iota(&[5]);
        let s = v.slice(&[1], &[i64::MAX], None, None).unwrap();
        assert_eq!(s.data, [1, 2, 3, 4]);
        let s = v.slice(&[-1], &[i64::MIN], None, Some(&[-2])).unwrap();
        assert_eq!(s.data, [4, 2, 0]);
        let s = t.slice(&[0], &[-1], Some(&[1]), None).unwrap();
        assert_eq!(
            (s.shape.as_slice(), s.data.as_slice()),
            (&[2, 2][..], &[0, 1, 3, 4][..])
        );
        assert!(v.slice(&[0], &[1], None, Some(&[0])).is_err());
        let empty = iota(&[0]);
        assert_eq!(
            empty.slice(&[0], &[5], None, Some(&[-1])).unwrap().shape,
            [0]
        );

        let c = Const::concat(&[&t, &iota(&[2, 1])], 1).unwrap();
        assert_eq!(c.shape, [2, 4]);
        assert_eq!(c.data, [0, 1, 2, 0, 3, 4, 5, 1]);
        assert!(Const::concat(&[&t, &iota(&[3, 1])], 1).is_err());

        let b = Const::binary(
            &t,
            &Const::new(vec![3], vec![10, 20, 30]).unwrap(),
            |a, b| Ok(a + b),
        )
        .unwrap();
        assert_eq!(b.data, [10, 21, 32, 13, 24, 35]);
        let col = Const::new(vec![2, 1], vec![100, 200]).unwrap();
        let b = Const::binary(&col, &iota(&[3]), |a, b| Ok(a - b)).unwrap();
        assert_eq!(b.shape, [2, 3]);
        assert_eq!(b.data, [100, 99, 98, 200, 199, 198]);
        assert!(Const::binary(&t, &iota(&[2]), |a, b| Ok(a + b)).is_err());
        assert!(numel(&[1 << 20, 1 << 20]).is_err());
    }
}
