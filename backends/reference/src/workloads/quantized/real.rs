//! The quantised layers that compute on real values: each quantised input is dequantised to
//! f32 with its own parameters, CpuRef's Float32 workload of the same layer runs on them,
//! and its result is quantised with the output's parameters (round half to even, saturate).
//!
//! This is the definition of ONNX's QDQ form (`DequantizeLinear` → float operator →
//! `QuantizeLinear`) and what onnxruntime runs when it leaves a QDQ group unfused. Its own
//! fused kernels, where they exist, may round otherwise:
//! - `QLinearAveragePool` (`contrib_ops/cpu/quantization/qlinear_pool.cc`) sums the
//!   dequantised values in f32 row by row over the window, divides by the count, then rounds
//!   `y / y_scale + y_offset` as one f32 expression (the offset added before rounding). CpuRef's
//!   Float32 pooling sums in the same order and divides, and `Pooling2d` average quantises
//!   with that rounding ([`Rounding::OffsetFirst`]), so they agree. For `u8` tensors only:
//!   onnxruntime leaves an `i8` QDQ `AveragePool` (and `GlobalAveragePool`, `Add`, `Mul`)
//!   unfused, and so does CpuRef ([`super::fused_by_onnxruntime`]).
//! - `QLinearGlobalAveragePool` has its own integer kernel (see [`super::global_average`]).
//! - `QLinearSoftmax` (`contrib_ops/cpu/quantization/qlinear_softmax.cc`) reads `exp` from a
//!   256-entry table of doubles shifted by the row's maximum and multiplies by
//!   `floor(1 / y_scale)` instead of dividing by `y_scale`; CpuRef keeps the QDQ definition
//!   here, which can differ from it by one step.
//!
//! Used for `Pooling2d` (average and max), `Mean` other than the `GlobalAveragePool` form,
//! `Softmax`, `Resize`, `Pad` and `Concat` with differing parameters. For the layers that only select elements
//! (`Pooling2d` max, `Pad`, `Resize` nearest) with equal input and output parameters, this
//! is the identity on the bytes: every quantised value survives the round trip through f32
//! exactly, and `Pad`'s fill value is quantised with the input's parameters (0.0 becomes
//! the zero point).

use backplane_api::{
    BackendResult, DataType, ROption, RSlice, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc, bytemuck,
};

use backplane_api::{LayerDescriptor, PoolingType};

use super::{QParams, Rounding, check_len};
use crate::workloads::ExpectedShapes;

/// How a float workload is made: the workload factory's Float32 path.
pub type FloatFactory = fn(&WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>>;

/// A float workload between dequantised inputs and a quantised output.
pub struct ViaRealWorkload {
    inner: Box<dyn Workload>,
    /// Per input: its parameters when it is quantised, with its Float32 info.
    inputs: Vec<(Option<QParams>, TensorInfo)>,
    /// The output's parameters when it is quantised, with its Float32 info.
    outputs: Vec<(Option<QParams>, TensorInfo)>,
    /// How the float results are quantised.
    rounding: Rounding,
    shapes: ExpectedShapes,
}

impl std::fmt::Debug for ViaRealWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViaRealWorkload")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

/// `info` as the float workload sees it, with its parameters when it is quantised.
fn as_real(
    desc: &WorkloadDesc<'_>,
    info: &TensorInfo,
) -> BackendResult<(Option<QParams>, TensorInfo)> {
    if !info.data_type.is_quantized() {
        return Ok((None, info.clone()));
    }
    let q = QParams::per_tensor(desc, info)?;
    Ok((Some(q), TensorInfo::new(&info.shape, DataType::Float32)))
}

/// "No constant value" for each input of the float workload (it reads its inputs at
/// execution).
static NO_CONSTANTS: [ROption<RSlice<'static, u8>>; 16] = [ROption::RNone; 16];

/// Creates `desc`'s layer as a float workload made by `float` between dequantised inputs and
/// a quantised output.
pub fn create(desc: &WorkloadDesc<'_>, float: FloatFactory) -> BackendResult<Box<dyn Workload>> {
    let inputs = (desc.inputs.iter())
        .map(|t| as_real(desc, t))
        .collect::<BackendResult<Vec<_>>>()?;
    let outputs = (desc.outputs.iter())
        .map(|t| as_real(desc, t))
        .collect::<BackendResult<Vec<_>>>()?;
    let in_infos: Vec<TensorInfo> = inputs.iter().map(|(_, t)| t.clone()).collect();
    let out_infos: Vec<TensorInfo> = outputs.iter().map(|(_, t)| t.clone()).collect();
    let Some(constants) = NO_CONSTANTS.get(..in_infos.len()) else {
        return Err(crate::workloads::invalid_layer(desc, "too many inputs"));
    };
    let inner = float(&WorkloadDesc {
        name: desc.name,
        layer: desc.layer,
        inputs: RSlice::from_slice(&in_infos),
        outputs: RSlice::from_slice(&out_infos),
        constants: RSlice::from_slice(constants),
    })?;
    let rounding = match desc.layer {
        LayerDescriptor::Pooling2d(p)
            if p.pool_type == PoolingType::Average && super::fused_by_onnxruntime(desc) =>
        {
            Rounding::OffsetFirst
        }
        _ => Rounding::Onnx,
    };
    Ok(Box::new(ViaRealWorkload {
        inner,
        inputs,
        outputs,
        rounding,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for ViaRealWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let mut real_inputs: Vec<Vec<f32>> = Vec::with_capacity(inputs.len());
        for (view, (q, _)) in inputs.iter().zip(&self.inputs) {
            check_len(view.info, view.data.as_slice())?;
            real_inputs.push(match q {
                Some(q) => q.dequantize_all(&view.info.shape, view.data.as_slice()),
                None => Vec::new(),
            });
        }
        let views: Vec<TensorView<'_>> = inputs
            .iter()
            .zip(&self.inputs)
            .zip(&real_inputs)
            .map(|((view, (q, info)), real)| match q {
                Some(_) => TensorView::new(info, bytemuck::cast_slice(real)),
                None => *view,
            })
            .collect();
        let mut real_outputs: Vec<Vec<f32>> = Vec::with_capacity(outputs.len());
        for (view, (q, info)) in outputs.iter().zip(&self.outputs) {
            check_len(view.info, view.data.as_slice())?;
            real_outputs.push(match q {
                Some(_) => vec![0.0; info.num_elements().unwrap_or(0)],
                None => Vec::new(),
            });
        }
        {
            let mut out_views: Vec<TensorViewMut<'_>> = Vec::with_capacity(outputs.len());
            for ((view, (q, info)), real) in outputs
                .iter_mut()
                .zip(&self.outputs)
                .zip(real_outputs.iter_mut())
            {
                out_views.push(match q {
                    Some(_) => TensorViewMut::new(info, bytemuck::cast_slice_mut(real)),
                    None => TensorViewMut::new(view.info, view.data.as_mut_slice()),
                });
            }
            self.inner.execute(&views, &mut out_views)?;
        }
        for ((view, (q, _)), real) in outputs.iter_mut().zip(&self.outputs).zip(&real_outputs) {
            if let Some(q) = q {
                let shape = view.info.shape.clone();
                q.quantize_all_with(self.rounding, &shape, real, view.data.as_mut_slice());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ConcatDescriptor, DataLayout, DataType, LayerDescriptor, OutputRounding, PadDescriptor,
        PadMode, PadPair, Padding2d, Pooling2dDescriptor, PoolingType, SoftmaxDescriptor,
        TransposeDescriptor,
    };

    use super::super::test_support::{XorShift, assert_rounded, qt, range, rne, run_bytes, value};

    fn pooling(pool_type: PoolingType, count_include_pad: bool) -> LayerDescriptor {
        LayerDescriptor::Pooling2d(Pooling2dDescriptor {
            pool_type,
            padding: Padding2d {
                left: 1,
                right: 0,
                top: 1,
                bottom: 1,
            },
            pool_width: 3,
            pool_height: 2,
            stride_x: 2,
            stride_y: 1,
            rounding: OutputRounding::Floor,
            count_include_pad,
            layout: DataLayout::Nchw,
        })
    }

    /// Average pooling against the f64 mean of the dequantised window (padding counted or
    /// not), the offset added before rounding; max pooling keeps the largest byte's value.
    #[test]
    fn quantized_pooling_matches_definition() {
        let mut rng = XorShift(0xF00D);
        let (h, w) = (4usize, 5usize);
        let (oh, ow) = ((h + 2 - 2) + 1, (w + 1 - 3) / 2 + 1);
        for dt in [DataType::QAsymmU8, DataType::QAsymmS8] {
            let (lo, hi) = range(dt);
            let (xs, xz) = (0.1f32, rng.int(lo, hi));
            let (ys, yz) = (0.07f32, rng.int(lo, hi));
            let xb = rng.bytes(2 * h * w);
            let x_info = qt(&[1, 2, h as u32, w as u32], dt, xs, xz);
            let window = |c: usize, oy: usize, ox: usize| {
                let mut cells = Vec::new();
                let mut padded = 0;
                for ky in 0..2 {
                    for kx in 0..3 {
                        let (iy, ix) = ((oy + ky) as i64 - 1, (ox * 2 + kx) as i64 - 1);
                        if iy < h as i64 + 1 && ix < w as i64 {
                            padded += 1;
                        }
                        if iy >= 0 && iy < h as i64 && ix >= 0 && ix < w as i64 {
                            cells.push(value(dt, xb[(c * h + iy as usize) * w + ix as usize]));
                        }
                    }
                }
                (cells, padded)
            };
            for include in [false, true] {
                let got = run_bytes(
                    &pooling(PoolingType::Average, include),
                    &[(x_info.clone(), xb.clone())],
                    &qt(&[1, 2, oh as u32, ow as u32], dt, ys, yz),
                )
                .unwrap();
                for c in 0..2 {
                    for oy in 0..oh {
                        for ox in 0..ow {
                            let (cells, padded) = window(c, oy, ox);
                            let sum: f64 = cells
                                .iter()
                                .map(|&q| f64::from(q - xz) * f64::from(xs))
                                .sum();
                            let count = if include { padded } else { cells.len() };
                            let v = sum / count as f64 / f64::from(ys);
                            let g = value(dt, got[(c * oh + oy) * ow + ox]);
                            assert_rounded(g, v, yz, (lo, hi), &format!("avg {dt} {include}"));
                        }
                    }
                }
            }
            let got = run_bytes(
                &pooling(PoolingType::Max, false),
                &[(x_info.clone(), xb.clone())],
                &qt(&[1, 2, oh as u32, ow as u32], dt, xs, xz),
            )
            .unwrap();
            for c in 0..2 {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let want = *window(c, oy, ox).0.iter().max().unwrap();
                        assert_eq!(value(dt, got[(c * oh + oy) * ow + ox]), want);
                    }
                }
            }
        }
    }

    /// Softmax against the f64 definition on the dequantised row.
    #[test]
    fn quantized_softmax_matches_definition() {
        let mut rng = XorShift(0xC0FFEE);
        for dt in [DataType::QAsymmU8, DataType::QAsymmS8] {
            let (lo, hi) = range(dt);
            let (xs, xz) = (0.08f32, rng.int(lo, hi));
            let (ys, yz) = (1.0f32 / 256.0, lo);
            let xb = rng.bytes(3 * 7);
            let got = run_bytes(
                &LayerDescriptor::Softmax(SoftmaxDescriptor {
                    beta: 1.0,
                    axis: -1,
                }),
                &[(qt(&[3, 7], dt, xs, xz), xb.clone())],
                &qt(&[3, 7], dt, ys, yz),
            )
            .unwrap();
            for r in 0..3 {
                let real: Vec<f64> = (0..7)
                    .map(|i| f64::from(value(dt, xb[r * 7 + i]) - xz) * f64::from(xs))
                    .collect();
                let max = real.iter().copied().fold(f64::MIN, f64::max);
                let sum: f64 = real.iter().map(|v| (v - max).exp()).sum();
                for i in 0..7 {
                    let v = (real[i] - max).exp() / sum / f64::from(ys);
                    assert_rounded(value(dt, got[r * 7 + i]), v, yz, (lo, hi), "softmax");
                }
            }
        }
    }

    /// Concat of differently quantised inputs requantises each element (f32 dequantise, f32
    /// divide, round half to even, saturate); with equal parameters the bytes are kept.
    #[test]
    fn quantized_concat_requantizes_or_keeps_bytes() {
        let mut rng = XorShift(99);
        let dt = DataType::QAsymmS8;
        let (a, b) = (rng.bytes(6), rng.bytes(4));
        let layer = LayerDescriptor::Concat(ConcatDescriptor { axis: 1 });
        let got = run_bytes(
            &layer,
            &[
                (qt(&[2, 3], dt, 0.1, 5), a.clone()),
                (qt(&[2, 2], dt, 0.3, -7), b.clone()),
            ],
            &qt(&[2, 5], dt, 0.2, 1),
        )
        .unwrap();
        for r in 0..2 {
            for i in 0..5 {
                let real = if i < 3 {
                    (value(dt, a[r * 3 + i]) - 5) as f32 * 0.1
                } else {
                    (value(dt, b[r * 2 + i - 3]) + 7) as f32 * 0.3
                };
                let want = (rne(real / 0.2) + 1).clamp(-128, 127);
                assert_eq!(i64::from(value(dt, got[r * 5 + i])), want);
            }
        }
        let same = qt(&[2, 3], dt, 0.1, 5);
        let got = run_bytes(
            &layer,
            &[
                (same.clone(), a.clone()),
                (qt(&[2, 2], dt, 0.1, 5), b.clone()),
            ],
            &qt(&[2, 5], dt, 0.1, 5),
        )
        .unwrap();
        let want: Vec<u8> = (0..2)
            .flat_map(|r| {
                a[r * 3..r * 3 + 3]
                    .iter()
                    .chain(&b[r * 2..r * 2 + 2])
                    .copied()
            })
            .collect();
        assert_eq!(got, want);
    }

    /// Pad with 0.0 fills with the zero point and keeps the input's bytes; Transpose moves
    /// bytes.
    #[test]
    fn quantized_pad_and_transpose_move_bytes() {
        let dt = DataType::QAsymmU8;
        let x = vec![1u8, 2, 3, 4, 5, 6];
        let info = qt(&[2, 3], dt, 0.5, 77);
        let pad = LayerDescriptor::Pad(PadDescriptor {
            padding: vec![
                PadPair {
                    before: 0,
                    after: 1,
                },
                PadPair {
                    before: 1,
                    after: 0,
                },
            ]
            .into(),
            value: 0.0,
            mode: PadMode::Constant,
        });
        let got = run_bytes(
            &pad,
            &[(info.clone(), x.clone())],
            &qt(&[3, 4], dt, 0.5, 77),
        )
        .unwrap();
        assert_eq!(got, vec![77, 1, 2, 3, 77, 4, 5, 6, 77, 77, 77, 77]);
        let tr = LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![1, 0].into(),
        });
        let got = run_bytes(&tr, &[(info, x)], &qt(&[3, 2], dt, 0.5, 77)).unwrap();
        assert_eq!(got, vec![1, 4, 2, 5, 3, 6]);
    }

    /// Resize nearest (2x, asymmetric, floor) keeps the bytes; a `Mean` over another axis
    /// than the spatial pair is the f64 mean of the dequantised values, quantised.
    #[test]
    fn quantized_resize_nearest_and_mean() {
        use backplane_api::{
            CoordinateTransformation, MeanDescriptor, NearestRounding, ResizeDescriptor,
            ResizeMethod,
        };
        let dt = DataType::QAsymmS8;
        let info = qt(&[1, 1, 2, 2], dt, 0.25, -3);
        let x = vec![0x80u8, 0x7F, 5, 0xFB];
        let resize = LayerDescriptor::Resize(ResizeDescriptor {
            method: ResizeMethod::Nearest,
            coordinates: CoordinateTransformation::Asymmetric,
            nearest: NearestRounding::Floor,
            height: 4,
            width: 4,
            scale_y: 2.0,
            scale_x: 2.0,
        });
        let got = run_bytes(
            &resize,
            &[(info, x.clone())],
            &qt(&[1, 1, 4, 4], dt, 0.25, -3),
        )
        .unwrap();
        let want: Vec<u8> = (0..16).map(|i| x[(i / 8) * 2 + (i % 4) / 2]).collect();
        assert_eq!(got, want);

        let mut rng = XorShift(5);
        let (lo, hi) = range(dt);
        let xb = rng.bytes(2 * 3 * 4);
        let mean = LayerDescriptor::Mean(MeanDescriptor {
            axes: vec![1].into(),
            keep_dims: false,
        });
        let got = run_bytes(
            &mean,
            &[(qt(&[2, 3, 4], dt, 0.3, 10), xb.clone())],
            &qt(&[2, 4], dt, 0.1, -20),
        )
        .unwrap();
        for n in 0..2 {
            for k in 0..4 {
                let sum: f64 = (0..3)
                    .map(|c| f64::from(value(dt, xb[(n * 3 + c) * 4 + k]) - 10) * 0.3f32 as f64)
                    .sum();
                let v = sum / 3.0 / f64::from(0.1f32);
                assert_rounded(value(dt, got[n * 4 + k]), v, -20, (lo, hi), "mean");
            }
        }
    }
}
