//! Quantised `Mean` over the two spatial axes of an NCHW tensor (ONNX
//! `GlobalAveragePool`, which onnxruntime's QDQ transformer fuses into
//! `QLinearGlobalAveragePool`), with onnxruntime's arithmetic (MLAS `qlgavgpool.cpp`, x86-64
//! kernel): per channel, the raw values are summed as integers and
//! `acc = sum - x_offset * count` (exact, `i32`); then
//! `y = saturate(round_half_even(acc as f32 * scale) + y_offset)` with
//! `scale = x_scale / (y_scale * count as f32)` in f32.
//!
//! For `u8` tensors: onnxruntime (x86-64, 1.31) leaves the `i8` form unfused, and
//! `quantized::create` runs it, like other `Mean` layers, on real values (see
//! [`super::real`]).

use backplane_api::{
    BackendResult, LayerDescriptor, TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{QParams, check_buffers};
use crate::workloads::{ExpectedShapes, expect_counts, invalid_layer};

/// Whether `desc`'s layer is a `Mean` over axes 2 and 3 of a rank-4 input: the
/// `GlobalAveragePool` form.
pub(crate) fn is_global_average(layer: &LayerDescriptor, inputs: &[TensorInfo]) -> bool {
    let LayerDescriptor::Mean(d) = layer else {
        return false;
    };
    let mut axes = d.axes.to_vec();
    axes.sort_unstable();
    axes == [2, 3] && inputs.first().is_some_and(|x| x.shape.len() == 4)
}

/// The integer global average of each channel.
#[derive(Debug)]
pub struct QGlobalAverageWorkload {
    /// Images times channels.
    planes: usize,
    /// Elements per channel.
    count: usize,
    x: QParams,
    y: QParams,
    shapes: ExpectedShapes,
}

/// Creates the workload of a quantised `Mean` over axes 2 and 3 of a rank-4 input.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if !is_global_average(desc.layer, &desc.inputs) {
        return Err(invalid_layer(
            desc,
            "not a Mean over axes 2 and 3 of a rank-4 tensor",
        ));
    }
    let (x, y) = (&desc.inputs[0], &desc.outputs[0]);
    let s: Vec<usize> = x.shape.iter().map(|&d| d as usize).collect();
    let (planes, count) = (s[0] * s[1], s[2] * s[3]);
    if y.num_elements() != Some(planes) {
        return Err(invalid_layer(
            desc,
            format_args!("the mean of {x} is not {y}"),
        ));
    }
    if i32::try_from(count).is_err() {
        return Err(invalid_layer(desc, "too many elements per channel"));
    }
    Ok(Box::new(QGlobalAverageWorkload {
        planes,
        count,
        x: QParams::per_tensor(desc, x)?,
        y: QParams::per_tensor(desc, y)?,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for QGlobalAverageWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        check_buffers(&self.shapes, inputs, outputs)?;
        let out = outputs[0].data.as_mut_slice();
        if self.count == 0 {
            // An empty window: onnxruntime refuses it; the mean of nothing is taken as 0.
            out.fill(self.y.qtype.write(self.y.offset));
            return Ok(());
        }
        let scale = self.x.scale() / (self.y.scale() * self.count as f32);
        let bias = (self.x.offset as i64) * (self.count as i64);
        for (o, plane) in out
            .iter_mut()
            .zip(inputs[0].data.as_slice().chunks_exact(self.count))
            .take(self.planes)
        {
            let sum: i64 = plane.iter().map(|&b| i64::from(self.x.qtype.read(b))).sum();
            let acc = (sum - bias) as i32;
            *o = self.y.qtype.write(
                self.y
                    .qtype
                    .saturate_round(acc as f32 * scale, self.y.offset),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, MeanDescriptor};

    use super::super::test_support::{XorShift, qt, range, rne, run_bytes, value};

    /// Against the integer definition: exact sums, `(sum - offset * count) as f32` times
    /// `x_scale / (y_scale * count)`, round half to even, saturate.
    #[test]
    fn quantized_global_average_matches_integer_definition() {
        let mut rng = XorShift(0x5EED);
        // u8 only: `quantized::create` runs an i8 global average by the QDQ definition
        // (onnxruntime leaves it unfused), checked against onnxruntime by the model checks.
        for dt in [DataType::QAsymmU8] {
            let (lo, hi) = range(dt);
            for (h, w, ys) in [(3usize, 5usize, 0.02f32), (7, 7, 0.001), (1, 2, 0.05)] {
                let (n, c) = (2usize, 3usize);
                let (xs, xz, yz) = (0.03f32, rng.int(lo, hi), rng.int(lo, hi));
                let xb = rng.bytes(n * c * h * w);
                let layer = LayerDescriptor::Mean(MeanDescriptor {
                    axes: vec![2, 3].into(),
                    keep_dims: true,
                });
                let got = run_bytes(
                    &layer,
                    &[(
                        qt(&[n as u32, c as u32, h as u32, w as u32], dt, xs, xz),
                        xb.clone(),
                    )],
                    &qt(&[n as u32, c as u32, 1, 1], dt, ys, yz),
                )
                .unwrap();
                let count = h * w;
                for (p, &g) in got.iter().enumerate() {
                    let sum: i32 = xb[p * count..(p + 1) * count]
                        .iter()
                        .map(|&b| value(dt, b))
                        .sum();
                    let acc = sum - xz * count as i32;
                    let v = acc as f32 * (xs / (ys * count as f32));
                    let want = (rne(v) + i64::from(yz)).clamp(i64::from(lo), i64::from(hi));
                    assert_eq!(i64::from(value(dt, g)), want, "{dt} {h}x{w} plane {p}");
                }
            }
        }
    }
}
