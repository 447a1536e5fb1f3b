//! Quantised element-wise layers: `ElementwiseBinary` `Add` and `Mul` (numpy broadcasting;
//! onnxruntime's arithmetic, as CpuRef's: its fused kernels' for `u8` tensors, the QDQ
//! definition for `i8` ones), `Quantize` (Float32 to a per-tensor quantised
//! type) and `Dequantize` (`(q - zp) as f32 · scale`).
//!
//! A binary layer's shapes are merged once into runs of dimensions along which each operand
//! either varies or is broadcast; the innermost run is one call of [`binary_row`]. A layer
//! whose other operand is one constant byte (PP-LCNet's learnable scale and bias) is a
//! function of a byte: a 256-entry table made once by [`binary_row`] itself, then looked up.

use backplane_api::{
    BackendError, BackendResult, BinaryOperation, DataType, LayerDescriptor, TensorInfo,
    TensorView, TensorViewMut, Workload, bytemuck,
};

use super::{
    QTensor,
    kernels::{BinaryRow, BinaryTypes, Isa, binary_row, dequantize_row, lookup_row, quantize_row},
};
use crate::{
    gemm::{for_each_part, worth},
    workloads::{MIN_PARALLEL_ELEMENTS, Signature},
};

/// An activation-like tensor: quantised per tensor.
fn per_tensor(t: &TensorInfo) -> Result<QTensor, String> {
    let q = QTensor::of(t)?;
    if q.axis.is_some() {
        return Err(format!("{t} must be quantized per tensor"));
    }
    Ok(q)
}

/// The merged broadcast of two operands into an output: outer runs `(size, a stride, b
/// stride)` and the inner run's size and whether each operand varies along it.
#[derive(Debug, Clone)]
struct Broadcast {
    outer: Vec<(usize, usize, usize)>,
    inner: usize,
    a_varies: bool,
    b_varies: bool,
}

impl Broadcast {
    fn new(a: &[u32], b: &[u32], out: &[u32]) -> Result<Self, String> {
        let rank = out.len();
        if a.len() > rank || b.len() > rank {
            return Err(format!("{a:?} and {b:?} do not broadcast to {out:?}"));
        }
        let pad = |s: &[u32]| -> Vec<usize> {
            let mut v = vec![1usize; rank - s.len()];
            v.extend(s.iter().map(|&d| d as usize));
            v
        };
        let (a, b) = (pad(a), pad(b));
        // Runs of dimensions (output size > 1) with the same (a varies, b varies).
        let mut runs: Vec<(usize, bool, bool)> = Vec::new();
        for i in 0..rank {
            let n = out[i] as usize;
            for d in [a[i], b[i]] {
                if d != n && d != 1 {
                    return Err(format!("{a:?} and {b:?} do not broadcast to {out:?}"));
                }
            }
            if n == 1 {
                continue;
            }
            let flags = (a[i] == n, b[i] == n);
            match runs.last_mut() {
                Some(last) if (last.1, last.2) == flags => last.0 *= n,
                _ => runs.push((n, flags.0, flags.1)),
            }
        }
        let (inner, a_varies, b_varies) = runs.pop().unwrap_or((1, true, true));
        let (mut sa, mut sb) = (
            if a_varies { inner } else { 1 },
            if b_varies { inner } else { 1 },
        );
        let mut outer = Vec::with_capacity(runs.len());
        for &(n, av, bv) in runs.iter().rev() {
            outer.push((n, if av { sa } else { 0 }, if bv { sb } else { 0 }));
            if av {
                sa *= n;
            }
            if bv {
                sb *= n;
            }
        }
        outer.reverse();
        Ok(Self {
            outer,
            inner,
            a_varies,
            b_varies,
        })
    }

    /// The offsets in `a` and `b` of outer row `row`.
    fn offsets(&self, mut row: usize) -> (usize, usize) {
        let (mut ao, mut bo) = (0, 0);
        for &(n, sa, sb) in self.outer.iter().rev() {
            let i = row % n;
            row /= n;
            ao += i * sa;
            bo += i * sb;
        }
        (ao, bo)
    }

    /// The number of outer rows.
    fn rows(&self) -> usize {
        self.outer.iter().map(|r| r.0).product()
    }
}

/// A piece of a binary layer's output: outer row `row`, inner elements `start .. end`.
#[derive(Debug, Clone, Copy)]
struct Piece {
    row: usize,
    start: usize,
    end: usize,
}

/// `parts` pieces covering `rows` rows of `inner` elements in order: runs of whole rows, or,
/// with fewer rows than parts, each row cut in `parts`.
fn pieces(rows: usize, inner: usize, parts: usize) -> Vec<Vec<Piece>> {
    if rows >= parts {
        let per = rows.div_ceil(parts);
        (0..rows)
            .step_by(per)
            .map(|r0| {
                (r0..(r0 + per).min(rows))
                    .map(|row| Piece {
                        row,
                        start: 0,
                        end: inner,
                    })
                    .collect()
            })
            .collect()
    } else {
        let per = inner.div_ceil(parts);
        (0..rows)
            .flat_map(|row| {
                (0..inner).step_by(per.max(1)).map(move |start| {
                    vec![Piece {
                        row,
                        start,
                        end: (start + per).min(inner),
                    }]
                })
            })
            .collect()
    }
}

/// A quantised `Add` or `Mul`.
#[derive(Debug)]
pub(crate) struct BinaryWorkload {
    op: BinaryRow,
    types: BinaryTypes,
    broadcast: Broadcast,
    sizes: [usize; 3],
    /// When the other operand is one constant byte: the operand that varies and each of its
    /// bytes' output, computed once by the row arithmetic.
    table: Option<(usize, Box<[u8; 256]>)>,
    isa: Isa,
    signature: Signature,
    threads: usize,
}

/// The plan of a quantised `Add`/`Mul`: its row arithmetic, types and broadcast.
fn binary_plan(
    op: BinaryOperation,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(BinaryRow, BinaryTypes, Broadcast), String> {
    let ([a, b], [c]) = (inputs, outputs) else {
        return Err("a binary layer has two inputs and one output".to_owned());
    };
    let (qa, qb, qc) = (per_tensor(a)?, per_tensor(b)?, per_tensor(c)?);
    let expected = backplane_api::shapes::output_shapes(
        &LayerDescriptor::ElementwiseBinary(op),
        &[a.clone(), b.clone()],
    )?;
    if [c.shape.to_vec()] != expected.as_slice() {
        return Err(format!("output {c} differs from the expected {expected:?}"));
    }
    let broadcast = Broadcast::new(&a.shape, &b.shape, &c.shape)?;
    let last = |s: &[u32]| s.last().copied().unwrap_or(1);
    let (a_last, b_last, c_last) = (last(&a.shape), last(&b.shape), last(&c.shape));
    let (sa, sb, sc) = (qa.scales[0], qb.scales[0], qc.scales[0]);
    let ra = sa / sc;
    let rb = sb / sc;
    let fixed = qc.zp as f32 - (ra * qa.zp as f32 + rb * qb.zp as f32);
    // onnxruntime fuses a QDQ Add/Mul into its integer kernels for u8 tensors only; with an
    // i8 one it computes the QDQ definition (as CpuRef's `quantized::fused_by_onnxruntime`).
    let real = qa.signed || qb.signed || qc.signed;
    let row = match op {
        BinaryOperation::Add | BinaryOperation::Mul if real => BinaryRow::Real {
            mul: op == BinaryOperation::Mul,
            a: (qa.zp, sa),
            b: (qb.zp, sb),
            c: (qc.zp, sc),
        },
        BinaryOperation::Mul => BinaryRow::Mul {
            za: qa.zp,
            zb: qb.zp,
            ratio: (sa * sb) / sc,
            zc: qc.zp as f32,
        },
        BinaryOperation::Add if c_last > 1 && a_last == 1 && b_last != 1 => {
            BinaryRow::AddScalarA { ra, rb, fixed }
        }
        BinaryOperation::Add if c_last > 1 && b_last == 1 && a_last != 1 => {
            BinaryRow::AddScalarB { ra, rb, fixed }
        }
        BinaryOperation::Add => BinaryRow::AddVectors { ra, rb, fixed },
        other => return Err(format!("quantized {other:?} is not supported (falls back)")),
    };
    let (lo, hi) = qc.range();
    let types = BinaryTypes {
        a_signed: qa.signed,
        b_signed: qb.signed,
        lo,
        hi,
    };
    Ok((row, types, broadcast))
}

impl Workload for BinaryWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (a, b) = (inputs[0].data.as_slice(), inputs[1].data.as_slice());
        let out = outputs[0].data.as_mut_slice();
        if [a.len(), b.len(), out.len()] != self.sizes {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        let parts = worth(out.len(), MIN_PARALLEL_ELEMENTS, self.threads);
        if let Some((slot, table)) = &self.table {
            let x = if *slot == 0 { a } else { b };
            let per = out.len().div_ceil(parts.max(1)).max(1);
            for_each_part(parts, x.chunks(per).zip(out.chunks_mut(per)), |(x, y)| {
                lookup_row(self.isa, table, x, y)
            });
            return Ok(());
        }
        let bc = &self.broadcast;
        let n = bc.inner;
        // Each part's output: its pieces are consecutive in the output.
        let mut work = Vec::new();
        let mut rest = out;
        for group in pieces(bc.rows(), n, parts) {
            let len: usize = group.iter().map(|p| p.end - p.start).sum();
            let (mine, tail) = rest.split_at_mut(len);
            rest = tail;
            work.push((group, mine));
        }
        for_each_part(parts, work, |(group, mut mine)| {
            for p in group {
                let (ao, bo) = bc.offsets(p.row);
                let ar = if bc.a_varies {
                    &a[ao + p.start..ao + p.end]
                } else {
                    &a[ao..ao + 1]
                };
                let br = if bc.b_varies {
                    &b[bo + p.start..bo + p.end]
                } else {
                    &b[bo..bo + 1]
                };
                let (o, tail) = std::mem::take(&mut mine).split_at_mut(p.end - p.start);
                mine = tail;
                binary_row(self.isa, self.op, self.types, ar, br, o);
            }
        });
        Ok(())
    }
}

/// A `Quantize` (Float32 in) or `Dequantize` (Float32 out) layer.
#[derive(Debug)]
pub(crate) struct ConvertWorkload {
    quantize: Option<(f32, i32, (i32, i32))>,
    /// A dequantisation's `(flip, zero point as u8, scale)`.
    dequantize: (u8, i32, f32),
    isa: Isa,
    signature: Signature,
    threads: usize,
}

impl Workload for ConvertWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (x, y) = (inputs[0].data.as_slice(), outputs[0].data.as_mut_slice());
        match self.quantize {
            Some((scale, zp, range)) => {
                if x.len() != y.len() * 4 {
                    return Err(BackendError::invalid_argument("buffer sizes differ"));
                }
                // A view's bytes need not be aligned for f32: convert a block at a time.
                let parts = worth(y.len(), MIN_PARALLEL_ELEMENTS, self.threads);
                let per = y
                    .len()
                    .div_ceil(parts.max(1))
                    .next_multiple_of(1024)
                    .max(1024);
                for_each_part(parts, x.chunks(per * 4).zip(y.chunks_mut(per)), |(x, y)| {
                    let mut block = [0f32; 1024];
                    for (xs, ys) in x.chunks(4096).zip(y.chunks_mut(1024)) {
                        let block = &mut block[..ys.len()];
                        bytemuck::cast_slice_mut::<f32, u8>(block).copy_from_slice(xs);
                        quantize_row(self.isa, block, scale, zp, range, ys);
                    }
                });
            }
            None => {
                if y.len() != x.len() * 4 {
                    return Err(BackendError::invalid_argument("buffer sizes differ"));
                }
                let (flip, zp, scale) = self.dequantize;
                let parts = worth(x.len(), MIN_PARALLEL_ELEMENTS, self.threads);
                let per = x
                    .len()
                    .div_ceil(parts.max(1))
                    .next_multiple_of(1024)
                    .max(1024);
                for_each_part(parts, x.chunks(per).zip(y.chunks_mut(per * 4)), |(x, y)| {
                    let mut block = [0f32; 1024];
                    for (xs, ys) in x.chunks(1024).zip(y.chunks_mut(4096)) {
                        let block = &mut block[..xs.len()];
                        dequantize_row(self.isa, xs, flip, zp, scale, block);
                        ys.copy_from_slice(bytemuck::cast_slice(block));
                    }
                });
            }
        }
        Ok(())
    }
}

/// Why CpuFast cannot run the quantised element-wise `layer`, or `Ok`.
pub(crate) fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    match layer {
        LayerDescriptor::ElementwiseBinary(op) => binary_plan(*op, inputs, outputs).map(drop),
        LayerDescriptor::Quantize(_) | LayerDescriptor::Dequantize => {
            let ([x], [y]) = (inputs, outputs) else {
                return Err("a conversion has one input and one output".to_owned());
            };
            if x.shape != y.shape {
                return Err(format!("{x} converted into {y}"));
            }
            let (f, q) = match layer {
                LayerDescriptor::Quantize(_) => (x, y),
                _ => (y, x),
            };
            if f.data_type != DataType::Float32 {
                return Err(format!("{} takes Float32, got {f}", layer.kind()));
            }
            per_tensor(q).map(drop)
        }
        other => Err(format!(
            "quantized {} is not supported (falls back)",
            other.kind()
        )),
    }
}

/// The workload of a layer [`check`] accepted.
pub(crate) fn create(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    scalar: Option<(usize, u8)>,
    signature: Signature,
    threads: usize,
) -> Result<Box<dyn Workload>, String> {
    check(layer, inputs, outputs)?;
    let isa = Isa::detect();
    let n = |t: &TensorInfo| t.num_elements().unwrap_or(0);
    match layer {
        LayerDescriptor::ElementwiseBinary(op) => {
            let (op, types, broadcast) = binary_plan(*op, inputs, outputs)?;
            let sizes = [n(&inputs[0]), n(&inputs[1]), n(&outputs[0])];
            // With one operand a constant byte and the other the output's size, each output
            // byte is the row arithmetic of its input byte: a table made by that arithmetic.
            let table = scalar
                .filter(|&(slot, _)| sizes[1 - slot] == sizes[2] && sizes[slot] == 1)
                .map(|(slot, c)| {
                    let mut table = [0u8; 256];
                    for (v, t) in (0..=255u8).zip(table.iter_mut()) {
                        let (a, b) = if slot == 1 { ([v], [c]) } else { ([c], [v]) };
                        binary_row(isa, op, types, &a, &b, std::slice::from_mut(t));
                    }
                    (1 - slot, Box::new(table))
                });
            Ok(Box::new(BinaryWorkload {
                op,
                types,
                broadcast,
                sizes,
                table,
                isa,
                signature,
                threads,
            }))
        }
        LayerDescriptor::Quantize(_) => {
            let q = per_tensor(&outputs[0])?;
            Ok(Box::new(ConvertWorkload {
                quantize: Some((q.scales[0], q.zp, q.range())),
                dequantize: (0, 0, 0.0),
                isa,
                signature,
                threads,
            }))
        }
        _ => {
            let q = per_tensor(&inputs[0])?;
            let (flip, zp) = q.as_u8();
            let dequantize = (flip, zp, q.scales[0]);
            Ok(Box::new(ConvertWorkload {
                quantize: None,
                dequantize,
                isa,
                signature,
                threads,
            }))
        }
    }
}
