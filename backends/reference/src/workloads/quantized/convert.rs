//! `Quantize`, `Dequantize` and `Requantize`: ONNX `QuantizeLinear` and `DequantizeLinear`
//! element by element, per tensor or per axis (see the parent module for the formulas).
//! `Requantize` is exactly a `Dequantize` then a `Quantize` in f32, so that a folded
//! `DequantizeLinear`/`QuantizeLinear` pair keeps its bytes.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{QParams, check_len};
use crate::workloads::{ExpectedShapes, expect_counts, invalid_layer};

/// What one conversion reads and writes.
#[derive(Debug)]
enum Conversion {
    /// Float32 to the output's parameters.
    Quantize(QParams),
    /// The input's parameters to Float32.
    Dequantize(QParams),
    /// The input's parameters, through f32, to the output's.
    Requantize(QParams, QParams),
}

/// One of the three conversions.
#[derive(Debug)]
pub struct ConvertWorkload {
    conversion: Conversion,
    shape: Vec<u32>,
    shapes: ExpectedShapes,
}

/// Creates the workload of a `Quantize`, `Dequantize` or `Requantize` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, y) = (&desc.inputs[0], &desc.outputs[0]);
    if x.shape != y.shape {
        return Err(invalid_layer(desc, format_args!("{x} converted into {y}")));
    }
    let conversion = match desc.layer {
        LayerDescriptor::Quantize(_) => Conversion::Quantize(QParams::of(desc, y)?),
        LayerDescriptor::Dequantize => Conversion::Dequantize(QParams::of(desc, x)?),
        LayerDescriptor::Requantize(_) => {
            Conversion::Requantize(QParams::of(desc, x)?, QParams::of(desc, y)?)
        }
        other => {
            return Err(invalid_layer(
                desc,
                format_args!("{} is not a quantization layer", other.kind()),
            ));
        }
    };
    Ok(Box::new(ConvertWorkload {
        conversion,
        shape: x.shape.to_vec(),
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for ConvertWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let shape = &self.shape;
        match &self.conversion {
            Conversion::Quantize(q) => {
                let x = inputs[0].as_f32()?;
                let out = &mut outputs[0];
                check_len(out.info, out.data.as_slice())?;
                q.quantize_all(shape, x, out.data.as_mut_slice());
            }
            Conversion::Dequantize(q) => {
                let x = inputs[0].data.as_slice();
                check_len(inputs[0].info, x)?;
                let out = outputs[0].as_f32_mut()?;
                out.copy_from_slice(&q.dequantize_all(shape, x));
            }
            Conversion::Requantize(from, to) => {
                let x = inputs[0].data.as_slice();
                check_len(inputs[0].info, x)?;
                let out = &mut outputs[0];
                check_len(out.info, out.data.as_slice())?;
                to.quantize_all(
                    shape,
                    &from.dequantize_all(shape, x),
                    out.data.as_mut_slice(),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, TensorInfo};

    use super::super::test_support::{XorShift, qt, qt_axis, range, run_bytes, sat, value};
    use crate::workloads::test_support::{Bytes, try_run_typed};

    /// Quantize, per tensor and per axis, against `sat(rne(x / s) + zp)` written in the test;
    /// the inputs include exact ties (k + 0.5 steps) and values far outside the range.
    #[test]
    fn quantize_matches_definition() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for dt in [DataType::QAsymmU8, DataType::QAsymmS8, DataType::QSymmS8] {
            let (lo, hi) = range(dt);
            let offset = if dt == DataType::QSymmS8 {
                0
            } else {
                rng.int(lo, hi)
            };
            let shape = [2u32, 3, 4];
            let scales = [0.5f32, 0.25, 0.1];
            for per_axis in [false, true] {
                let out = if per_axis {
                    qt_axis(&shape, dt, 1, &scales, offset)
                } else {
                    qt(&shape, dt, 0.5, offset)
                };
                let x: Vec<f32> = (0..24)
                    .map(|i| match i % 4 {
                        0 => (rng.int(-300, 300) as f32 + 0.5) * if per_axis { 1.0 } else { 0.5 },
                        1 => rng.float(-400.0, 400.0),
                        2 => rng.float(-3.0, 3.0),
                        _ => rng.int(-20, 20) as f32 * 0.25,
                    })
                    .collect();
                let got = try_run_typed(
                    &backplane_api::LayerDescriptor::Quantize(dt),
                    &[(TensorInfo::new(&shape, DataType::Float32), Bytes::of(&x))],
                    &out,
                )
                .unwrap();
                for (i, (&g, &xv)) in got.bytes().iter().zip(&x).enumerate() {
                    let s = if per_axis { scales[(i / 4) % 3] } else { 0.5 };
                    let want = sat(xv / s, offset, lo, hi);
                    assert_eq!(value(dt, g), want, "{dt} per_axis={per_axis} x={xv} s={s}");
                }
            }
        }
    }

    /// Dequantize per axis, and Requantize equal to Dequantize then Quantize.
    #[test]
    fn dequantize_and_requantize_match_definition() {
        let mut rng = XorShift(42);
        let shape = [3u32, 5];
        let x_info = qt_axis(&shape, DataType::QAsymmS8, 0, &[0.02, 0.5, 3.0], -3);
        let xb = rng.bytes(15);
        let deq = try_run_typed(
            &backplane_api::LayerDescriptor::Dequantize,
            &[(x_info.clone(), Bytes::of(xb.as_slice()))],
            &TensorInfo::new(&shape, DataType::Float32),
        )
        .unwrap()
        .to_vec::<f32>();
        let scales = [0.02f32, 0.5, 3.0];
        for (i, (&d, &b)) in deq.iter().zip(&xb).enumerate() {
            let want = (i32::from(b as i8) + 3) as f32 * scales[i / 5];
            assert_eq!(d.to_bits(), want.to_bits());
        }
        let y_info = qt(&shape, DataType::QAsymmU8, 0.7, 100);
        let got = run_bytes(
            &backplane_api::LayerDescriptor::Requantize(DataType::QAsymmU8),
            &[(x_info, xb.clone())],
            &y_info,
        )
        .unwrap();
        for (i, (&g, &b)) in got.iter().zip(&xb).enumerate() {
            let real = (i32::from(b as i8) + 3) as f32 * scales[i / 5];
            assert_eq!(i32::from(g), sat(real / 0.7, 100, 0, 255));
        }
    }
}
