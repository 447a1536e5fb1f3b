//! The detection layers (Backend API 1.5): `NonMaxSuppression` (greedy suppression per batch
//! and class, its result in the API's counted layout, as `NonZero`'s) and `RoiAlign`
//! (bilinear pooling of regions, Float32 or Float64). Both follow their descriptors'
//! documentation, which is ONNX's definition: suppression compares boxes in f32, as
//! onnxruntime does; `RoiAlign` computes positions and sums in f64 and rounds the result once
//! to the tensor's type.

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, NonMaxSuppressionDescriptor,
    RoiAlignDescriptor, RoiPooling, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{
    ExpectedShapes, expect_counts, expect_rule_output, index_values, invalid_layer, raw, raw_mut,
};

/// Creates the workload of a `NonMaxSuppression` layer (inputs `[boxes, scores]`) or a
/// `RoiAlign` layer (inputs `[x, rois, batch_indices]`); one output.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let dims =
        |i: usize| -> Vec<usize> { desc.inputs[i].shape.iter().map(|&d| d as usize).collect() };
    match desc.layer {
        LayerDescriptor::NonMaxSuppression(d) => {
            expect_counts(desc.inputs.len(), desc.outputs.len(), 2, 1)?;
            expect_rule_output(desc)?;
            let scores = dims(1);
            Ok(Box::new(NonMaxSuppressionWorkload {
                d: *d,
                batches: scores[0],
                classes: scores[1],
                boxes: scores[2],
                shapes: ExpectedShapes::of(desc),
            }))
        }
        LayerDescriptor::RoiAlign(d) => {
            expect_counts(desc.inputs.len(), desc.outputs.len(), 3, 1)?;
            expect_rule_output(desc)?;
            let x = dims(0);
            Ok(Box::new(RoiAlignWorkload {
                d: *d,
                x: [x[0], x[1], x[2], x[3]],
                regions: dims(1)[0],
                data_type: desc.inputs[0].data_type,
                shapes: ExpectedShapes::of(desc),
                name: desc.name.to_string(),
            }))
        }
        _ => Err(invalid_layer(desc, "not a detection layer")),
    }
}

/// Greedy non-maximum suppression.
#[derive(Debug)]
pub struct NonMaxSuppressionWorkload {
    d: NonMaxSuppressionDescriptor,
    batches: usize,
    classes: usize,
    boxes: usize,
    shapes: ExpectedShapes,
}

/// A box as `(y_min, x_min, y_max, x_max)`.
type Corners = (f32, f32, f32, f32);

/// `box` (four values) as ordered corners.
fn corners(b: &[f32], center_point_box: bool) -> Corners {
    if center_point_box {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        (b[1] - hh, b[0] - hw, b[1] + hh, b[0] + hw)
    } else {
        (
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        )
    }
}

/// Whether `a` and `b` overlap by an intersection over union greater than `threshold` (0
/// when they do not overlap or either has no area).
fn suppresses(a: Corners, b: Corners, threshold: f32) -> bool {
    let (y0, x0) = (a.0.max(b.0), a.1.max(b.1));
    let (y1, x1) = (a.2.min(b.2), a.3.min(b.3));
    if x1 <= x0 || y1 <= y0 {
        return false;
    }
    let inter = (x1 - x0) * (y1 - y0);
    let area_a = (a.3 - a.1) * (a.2 - a.0);
    let area_b = (b.3 - b.1) * (b.2 - b.0);
    let union = area_a + area_b - inter;
    if inter <= 0.0 || area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

impl Workload for NonMaxSuppressionWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let boxes = raw::<f32>(&inputs[0])?;
        let scores = raw::<f32>(&inputs[1])?;
        let out = raw_mut::<i64>(&mut outputs[0])?;
        out.fill(0);
        let m = out.len() / 4;
        let n = self.boxes;
        let max = self.d.max_output_boxes_per_class as usize;
        let mut count = 0usize;
        for b in 0..self.batches {
            let batch_boxes: Vec<Corners> = (0..n)
                .map(|i| {
                    let at = (b * n + i) * 4;
                    corners(&boxes[at..at + 4], self.d.center_point_box)
                })
                .collect();
            for c in 0..self.classes {
                let s = &scores[(b * self.classes + c) * n..][..n];
                let mut order: Vec<usize> =
                    (0..n).filter(|&i| s[i] > self.d.score_threshold).collect();
                // By score descending; equal scores by index ascending (a stable sort).
                order.sort_by(|&i, &j| s[j].total_cmp(&s[i]));
                let mut kept: Vec<usize> = Vec::new();
                for i in order {
                    if kept.len() == max {
                        break;
                    }
                    if kept
                        .iter()
                        .all(|&k| !suppresses(batch_boxes[i], batch_boxes[k], self.d.iou_threshold))
                    {
                        kept.push(i);
                        // Indices are below u32::MAX (the shape's limit): exact in i64.
                        out[m + count] = b as i64;
                        out[2 * m + count] = c as i64;
                        out[3 * m + count] = i as i64;
                        count += 1;
                    }
                }
            }
        }
        out[0] = count as i64;
        Ok(())
    }
}

/// Bilinear pooling of regions of interest.
#[derive(Debug)]
pub struct RoiAlignWorkload {
    d: RoiAlignDescriptor,
    /// `x`'s `[n, c, h, w]`.
    x: [usize; 4],
    regions: usize,
    data_type: DataType,
    shapes: ExpectedShapes,
    name: String,
}

/// One sample's four elements (offsets in a channel's plane) and their weights.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    at: [usize; 4],
    weight: [f64; 4],
}

impl RoiAlignWorkload {
    /// The samples of every bin of a region whose scaled corners are `(x0, y0, x1, y1)`, bin
    /// by bin in row-major order, and the sample count per bin.
    fn samples(&self, (x0, y0, x1, y1): (f64, f64, f64, f64)) -> (Vec<Sample>, usize, usize) {
        let [_, _, h, w] = self.x;
        let (oh, ow) = (self.d.output_height as usize, self.d.output_width as usize);
        let (mut rw, mut rh) = (x1 - x0, y1 - y0);
        if !self.d.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bin_h, bin_w) = (rh / oh as f64, rw / ow as f64);
        let grid = |ratio: u32, extent: f64| -> usize {
            if ratio > 0 {
                ratio as usize
            } else {
                // A region's extent is finite and small (coordinates of an image).
                extent.ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (
            grid(self.d.sampling_ratio, bin_h),
            grid(self.d.sampling_ratio, bin_w),
        );
        let mut samples = Vec::with_capacity(oh * ow * gh * gw);
        for ph in 0..oh {
            for pw in 0..ow {
                for iy in 0..gh {
                    let y = y0 + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / gh as f64;
                    for ix in 0..gw {
                        let x = x0 + pw as f64 * bin_w + (ix as f64 + 0.5) * bin_w / gw as f64;
                        samples.push(bilinear(y, x, h, w));
                    }
                }
            }
        }
        (samples, gh * gw, oh * ow)
    }

    fn run<T: Copy>(
        &self,
        x: &[T],
        rois: &[T],
        batch: &[i64],
        out: &mut [T],
        to: impl Fn(T) -> f64,
        from: impl Fn(f64) -> T,
    ) -> BackendResult<()> {
        let [n, c, h, w] = self.x;
        let plane = h * w;
        let scale = f64::from(self.d.spatial_scale);
        let shift = if self.d.half_pixel { 0.5 } else { 0.0 };
        for r in 0..self.regions {
            let bi = usize::try_from(batch[r])
                .ok()
                .filter(|&b| b < n)
                .ok_or_else(|| {
                    BackendError::invalid_argument(format!(
                        "layer {}: batch index {} of region {r} is outside [0, {n})",
                        self.name, batch[r]
                    ))
                })?;
            let corner = |k: usize| to(rois[r * 4 + k]) * scale - shift;
            let (samples, per_bin, bins) =
                self.samples((corner(0), corner(1), corner(2), corner(3)));
            for ch in 0..c {
                let data = &x[(bi * c + ch) * plane..][..plane];
                let dst = &mut out[(r * c + ch) * bins..][..bins];
                for (bin, o) in dst.iter_mut().enumerate() {
                    let bin_samples = &samples[bin * per_bin..][..per_bin];
                    let value = match self.d.pooling {
                        RoiPooling::Average => {
                            let sum: f64 = bin_samples
                                .iter()
                                .map(|s| {
                                    (0..4).map(|k| s.weight[k] * to(data[s.at[k]])).sum::<f64>()
                                })
                                .sum();
                            sum / per_bin.max(1) as f64
                        }
                        RoiPooling::Max => bin_samples
                            .iter()
                            .map(|s| {
                                (0..4)
                                    .map(|k| s.weight[k] * to(data[s.at[k]]))
                                    .fold(f64::NEG_INFINITY, f64::max)
                            })
                            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                            .unwrap_or(0.0),
                    };
                    *o = from(value);
                }
            }
        }
        Ok(())
    }
}

/// The four elements around `(y, x)` in an `h x w` plane and their bilinear weights; all
/// weights 0 outside `[-1, h] x [-1, w]`.
fn bilinear(y: f64, x: f64, h: usize, w: usize) -> Sample {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return Sample::default();
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    // Non-negative and at most the plane's extent: the casts are exact floors.
    let (mut y_low, mut x_low) = (y as usize, x as usize);
    let y_high = if y_low >= h - 1 {
        y_low = h - 1;
        y = y_low as f64;
        y_low
    } else {
        y_low + 1
    };
    let x_high = if x_low >= w - 1 {
        x_low = w - 1;
        x = x_low as f64;
        x_low
    } else {
        x_low + 1
    };
    let (ly, lx) = (y - y_low as f64, x - x_low as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Sample {
        at: [
            y_low * w + x_low,
            y_low * w + x_high,
            y_high * w + x_low,
            y_high * w + x_high,
        ],
        weight: [hy * hx, hy * lx, ly * hx, ly * lx],
    }
}

impl Workload for RoiAlignWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let batch = index_values(&inputs[2])?;
        if self.x[2] == 0 || self.x[3] == 0 {
            return Err(BackendError::invalid_argument(format!(
                "layer {}: x has an empty plane",
                self.name
            )));
        }
        match self.data_type {
            DataType::Float64 => self.run(
                raw::<f64>(&inputs[0])?,
                raw::<f64>(&inputs[1])?,
                &batch,
                raw_mut::<f64>(&mut outputs[0])?,
                |v| v,
                |v| v,
            ),
            _ => self.run(
                raw::<f32>(&inputs[0])?,
                raw::<f32>(&inputs[1])?,
                &batch,
                raw_mut::<f32>(&mut outputs[0])?,
                f64::from,
                // Rounded once to the output's type.
                #[allow(clippy::cast_possible_truncation)]
                // reason: the result is an f32 tensor's value, rounded to nearest
                |v| v as f32,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        DataType, LayerDescriptor, NonMaxSuppressionDescriptor, RoiAlignDescriptor, RoiPooling,
        TensorInfo,
    };

    use crate::workloads::test_support::{Bytes, try_run_typed};

    fn nms(
        d: NonMaxSuppressionDescriptor,
        boxes: &[f32],
        scores: &[f32],
        shape: [u32; 3],
    ) -> Vec<i64> {
        let [b, c, n] = shape;
        let m = b * c * d.max_output_boxes_per_class.min(n);
        try_run_typed(
            &LayerDescriptor::NonMaxSuppression(d),
            &[
                (
                    TensorInfo::new(&[b, n, 4], DataType::Float32),
                    Bytes::of(boxes),
                ),
                (
                    TensorInfo::new(&[b, c, n], DataType::Float32),
                    Bytes::of(scores),
                ),
            ],
            &TensorInfo::new(&[4, m], DataType::Signed64),
        )
        .unwrap()
        .to_vec::<i64>()
    }

    /// Three boxes: 0 and 1 overlap by IoU 0.9 / 1.1 = 0.82, box 2 is apart. Worked by hand.
    #[test]
    fn suppresses_the_overlapping_lower_score() {
        let boxes = [0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 5.0, 1.0, 6.0];
        let d = NonMaxSuppressionDescriptor {
            center_point_box: false,
            max_output_boxes_per_class: 3,
            iou_threshold: 0.5,
            score_threshold: f32::NEG_INFINITY,
        };
        // Box 1 scores highest: it is kept, box 0 suppressed by it, box 2 kept.
        let got = nms(d, &boxes, &[0.8, 0.9, 0.3], [1, 1, 3]);
        assert_eq!(got, [2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0]);
        // A threshold above 0.82 keeps all three, by score.
        let got = nms(
            NonMaxSuppressionDescriptor {
                iou_threshold: 0.85,
                ..d
            },
            &boxes,
            &[0.8, 0.9, 0.3],
            [1, 1, 3],
        );
        assert_eq!(got, [3, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2]);
        // A score threshold of 0.3 drops box 2 (not greater); at most one box per class.
        let got = nms(
            NonMaxSuppressionDescriptor {
                score_threshold: 0.3,
                max_output_boxes_per_class: 1,
                ..d
            },
            &boxes,
            &[0.8, 0.9, 0.3],
            [1, 1, 3],
        );
        assert_eq!(got, [1, 0, 0, 1]);
    }

    /// Centre-point boxes: `[xc, yc, w, h]`; equal scores keep the lower index first.
    #[test]
    fn center_point_boxes_and_ties() {
        let boxes = [0.5, 0.5, 1.0, 1.0, 0.5, 0.6, 1.0, 1.0];
        let d = NonMaxSuppressionDescriptor {
            center_point_box: true,
            max_output_boxes_per_class: 2,
            iou_threshold: 0.5,
            score_threshold: f32::NEG_INFINITY,
        };
        // IoU 0.9 / 1.1 = 0.82 > 0.5: the second (same score, higher index) is suppressed.
        let got = nms(d, &boxes, &[0.5, 0.5], [1, 1, 2]);
        assert_eq!(got, [1, 0, 0, 0, 0, 0, 0, 0]);
    }

    fn roi_align(
        d: RoiAlignDescriptor,
        x: &[f32],
        shape: [u32; 4],
        rois: &[f32],
        batch: &[i64],
    ) -> Vec<f32> {
        let r = batch.len() as u32;
        try_run_typed(
            &LayerDescriptor::RoiAlign(d),
            &[
                (TensorInfo::new(&shape, DataType::Float32), Bytes::of(x)),
                (TensorInfo::new(&[r, 4], DataType::Float32), Bytes::of(rois)),
                (TensorInfo::new(&[r], DataType::Signed64), Bytes::of(batch)),
            ],
            &TensorInfo::new(
                &[r, shape[1], d.output_height, d.output_width],
                DataType::Float32,
            ),
        )
        .unwrap()
        .to_vec::<f32>()
    }

    /// A 2x2 plane [[0, 1], [2, 3]]; one region over all of it, one bin, one sample at its
    /// centre (0.5, 0.5) with `output_half_pixel`: the mean of the four, 1.5. With half_pixel
    /// the region shifts to (-0.5, -0.5)..(1.5, 1.5) and the centre sample is at (0.5, 0.5)
    /// again. Max pooling of that sample: the largest weighted corner, 0.25 * 3.
    #[test]
    fn one_bin_by_hand() {
        let d = RoiAlignDescriptor {
            pooling: RoiPooling::Average,
            output_height: 1,
            output_width: 1,
            sampling_ratio: 1,
            spatial_scale: 1.0,
            half_pixel: false,
        };
        let x = [0.0, 1.0, 2.0, 3.0];
        assert_eq!(
            roi_align(d, &x, [1, 1, 2, 2], &[0.0, 0.0, 1.0, 1.0], &[0]),
            [1.5]
        );
        let half = RoiAlignDescriptor {
            half_pixel: true,
            ..d
        };
        assert_eq!(
            roi_align(half, &x, [1, 1, 2, 2], &[0.0, 0.0, 2.0, 2.0], &[0]),
            [1.5]
        );
        let max = RoiAlignDescriptor {
            pooling: RoiPooling::Max,
            ..d
        };
        assert_eq!(
            roi_align(max, &x, [1, 1, 2, 2], &[0.0, 0.0, 1.0, 1.0], &[0]),
            [0.75]
        );
    }

    #[test]
    fn a_batch_index_outside_the_batch_fails() {
        let d = RoiAlignDescriptor {
            pooling: RoiPooling::Average,
            output_height: 1,
            output_width: 1,
            sampling_ratio: 0,
            spatial_scale: 1.0,
            half_pixel: true,
        };
        let err = try_run_typed(
            &LayerDescriptor::RoiAlign(d),
            &[
                (
                    TensorInfo::new(&[1, 1, 2, 2], DataType::Float32),
                    Bytes::of(&[0.0f32; 4]),
                ),
                (
                    TensorInfo::new(&[1, 4], DataType::Float32),
                    Bytes::of(&[0.0f32, 0.0, 1.0, 1.0]),
                ),
                (
                    TensorInfo::new(&[1], DataType::Signed64),
                    Bytes::of(&[1i64]),
                ),
            ],
            &TensorInfo::new(&[1, 1, 1, 1], DataType::Float32),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("batch index 1 of region 0 is outside [0, 1)"),
            "{err}"
        );
    }
}
