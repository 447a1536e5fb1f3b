//! Signal operators: the windows (`HannWindow`, `HammingWindow`, `BlackmanWindow`: constants
//! once their size is known), `STFT` (framed by a `Gather`, windowed, then transformed) and
//! `DFT`, as products with constant cosine and sine matrices:
//! the transformed axis moved last, `Re·C ± Im·S` by `MatMul`, the length `dft_length` (the
//! input's by default) truncating or zero-extending the signal, `onesided` keeping the first
//! `L/2 + 1` frequencies, `inverse` dividing by `L`, and the one-sided inverse (a real signal
//! from half a spectrum) weighting each frequency but the first and the middle twice.

use std::f64::consts::PI;

use super::{Expansion, int, rearrange::first_output};
use crate::onnx::import::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_int, normalize_axis},
    invalid,
    queue::Pending,
    unsupported,
};

/// An integer scalar input that sizes the output: a constant, or (computed at run time) a
/// value the session's next segment is planned from.
fn size_input(im: &Importer, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<i64>> {
    match im.arg(n, i)? {
        None => Ok(None),
        Some((_, Value::I64(c))) if c.data.len() == 1 => Ok(Some(c.data[0])),
        Some((_, Value::F32(c))) if c.data.len() == 1 => Ok(Some(c.data[0] as i64)),
        Some((name, Value::Tensor(_))) => Err(NodeError::NeedsValue {
            message: format!(
                "{what} ({name}) is computed at run time: it sizes the output (a session \
                 runs the model in segments)"
            ),
            names: vec![name],
        }),
        Some((name, _)) => Err(invalid(format!("{what} ({name}) must be one integer"))),
    }
}

/// A float scalar input: a constant, or a value a run gives (the session's next segment is
/// planned from it).
fn float_input(im: &Importer, n: &Node<'_>, i: usize, what: &str) -> NResult<f64> {
    match im.arg(n, i)? {
        Some((_, Value::F32(c))) if c.data.len() == 1 => Ok(f64::from(c.data[0])),
        // An integer count as a frequency: exact below 2^53.
        #[allow(clippy::cast_precision_loss)]
        // reason: a frequency in hertz, far below 2^53
        Some((_, Value::I64(c))) if c.data.len() == 1 => Ok(c.data[0] as f64),
        Some((name, Value::Tensor(_))) => Err(NodeError::NeedsValue {
            message: format!(
                "{what} ({name}) is computed at run time: it decides a constant (a session \
                 runs the model in segments)"
            ),
            names: vec![name],
        }),
        Some((name, _)) => Err(invalid(format!("{what} ({name}) must be one number"))),
        None => Err(invalid(format!("{what} is required"))),
    }
}

impl Importer {
    /// `MelWeightMatrix` (opset 17): a constant, computed by ONNX's definition once its five
    /// scalar inputs are known: `num_mel_bins + 2` points equally spaced on the mel scale
    /// (`2595 log10(1 + f / 700)`) from the lower to the upper edge (the step being the span
    /// over `num_mel_bins + 2`), each turned back into hertz and into a spectrogram bin
    /// (`floor((dft_length + 1) f / sample_rate)`); mel bin `i` is the triangle rising from
    /// point `i` to 1 at point `i + 1` and falling to 0 at point `i + 2`.
    pub(in crate::onnx::import) fn mel_weight_matrix(
        &mut self,
        n: &Node<'_>,
    ) -> NResult<Vec<Value>> {
        let need =
            |v: Option<i64>, what: &str| v.ok_or_else(|| invalid(format!("{what} is required")));
        let mels = need(size_input(self, n, 0, "num_mel_bins")?, "num_mel_bins")?;
        let dft = need(size_input(self, n, 1, "dft_length")?, "dft_length")?;
        let rate = need(size_input(self, n, 2, "sample_rate")?, "sample_rate")?;
        let low = float_input(self, n, 3, "lower_edge_hertz")?;
        let high = float_input(self, n, 4, "upper_edge_hertz")?;
        if mels <= 0 || dft <= 0 || rate <= 0 {
            return Err(invalid(format!(
                "num_mel_bins {mels}, dft_length {dft} and sample_rate {rate} must be positive"
            )));
        }
        let bins = dft / 2 + 1;
        super::check_elements(bins.saturating_mul(mels), "MelWeightMatrix's output")?;
        let mel = |f: f64| 2595.0 * (f / 700.0).ln_1p() / std::f64::consts::LN_10;
        let (low_mel, high_mel) = (mel(low), mel(high));
        let step = (high_mel - low_mel) / (mels + 2) as f64;
        let points: Vec<i64> = (0..mels + 2)
            .map(|k| {
                let hz = 700.0
                    * ((k as f64 * step + low_mel) / 2595.0 * std::f64::consts::LN_10).exp_m1();
                // A bin index: small and non-negative for a valid model (checked below).
                (((dft + 1) as f64 * hz) / rate as f64).floor() as i64
            })
            .collect();
        let (bins_u, mels_u) = (bins as usize, mels as usize);
        let mut out = vec![0f32; bins_u * mels_u];
        let mut set = |j: i64, i: usize, v: f64| -> NResult<()> {
            let j = usize::try_from(j)
                .ok()
                .filter(|&j| j < bins_u)
                .ok_or_else(|| {
                    invalid(format!(
                        "mel point {j} is outside the {bins} spectrogram bins"
                    ))
                })?;
            out[j * mels_u + i] = v as f32;
            Ok(())
        };
        for i in 0..mels_u {
            let (left, center, right) = (points[i], points[i + 1], points[i + 2]);
            if center == left {
                set(center, i, 1.0)?;
            } else {
                for j in left..=center {
                    set(j, i, (j - left) as f64 / (center - left) as f64)?;
                }
            }
            if right > center {
                for j in center..right {
                    set(j, i, (right - j) as f64 / (right - center) as f64)?;
                }
            }
        }
        let c =
            crate::onnx::fold::Const::new(vec![bins as u32, mels as u32], out).map_err(invalid)?;
        let to = attr_int(n, "output_datatype")?.unwrap_or(1);
        if let (Some(o), Ok(to)) = (n.proto.output.first(), i32::try_from(to))
            && to != crate::onnx::proto::data_type::FLOAT
        {
            self.local_types.insert(o.clone(), to);
        }
        Ok(vec![self.store_f32(c)?])
    }

    /// `HannWindow`, `HammingWindow` and `BlackmanWindow`.
    pub(in crate::onnx::import) fn window(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let size = size_input(self, n, 0, "the window size")?
            .ok_or_else(|| invalid("the window size is required"))?;
        if !(1..=1 << 24).contains(&size) {
            return Err(invalid(format!("a window of {size}")));
        }
        let periodic = attr_int(n, "periodic")?.unwrap_or(1) != 0;
        let to = attr_int(n, "output_datatype")?.unwrap_or(1);
        let denominator = if periodic { size } else { size - 1 }.max(1) as f64;
        let f: fn(f64) -> f64 = match n.op() {
            "HannWindow" => |t| 0.5 - 0.5 * (2.0 * PI * t).cos(),
            "HammingWindow" => |t| 25.0 / 46.0 - 21.0 / 46.0 * (2.0 * PI * t).cos(),
            _ => |t| 0.42 - 0.5 * (2.0 * PI * t).cos() + 0.08 * (4.0 * PI * t).cos(),
        };
        super::check_elements(size, "the window")?;
        let values: Vec<f32> = (0..size)
            .map(|k| f(k as f64 / denominator) as f32)
            .collect();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let w = e.f32s(&values, &[size]);
        let w = if to == 1 {
            w
        } else {
            e.op("Cast", &[&w], vec![int("to", to)])
        };
        e.bind(&w, &out);
        Ok(e.finish())
    }

    /// `DFT` (opset 17 and later).
    pub(in crate::onnx::import) fn dft(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let rank = xs.len();
        let last = *xs.last().ok_or_else(|| invalid("a scalar signal"))?;
        if rank < 2 || !(last == 1 || last == 2) {
            return Err(invalid(format!(
                "the signal's last dimension must be 1 or 2, got {xs:?}"
            )));
        }
        let axis = if self.opset >= 20 {
            size_input(self, n, 2, "axis")?.unwrap_or(-2)
        } else {
            attr_int(n, "axis")?.unwrap_or(1)
        };
        let axis = normalize_axis(axis, rank)?;
        if axis == rank - 1 {
            return Err(invalid(
                "the axis cannot be the last (real, imaginary) dimension",
            ));
        }
        let inverse = attr_int(n, "inverse")?.unwrap_or(0) != 0;
        let onesided = attr_int(n, "onesided")?.unwrap_or(0) != 0;
        let m = i64::from(xs[axis]);
        let length = match size_input(self, n, 1, "dft_length")? {
            Some(l) => l,
            None if inverse && onesided => 2 * (m - 1),
            None => m,
        };
        if length <= 0 || length > 1 << 16 {
            return Err(unsupported(format!("a DFT of length {length}")));
        }
        let elem = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        // The signal's real and imaginary parts, the transformed axis last.
        let part = |e: &mut Expansion, k: i64| {
            let s = e.slice(&xn, &[k], &[k + 1], &[rank as i64 - 1]);
            e.squeeze(&s, &[rank as i64 - 1])
        };
        // Among the signal's axes (the last, real and imaginary, aside).
        let (perm, back) = super::axis_last(rank - 1, axis);
        let moved = |e: &mut Expansion, t: &str| e.transpose(t, &perm);
        let re = part(&mut e, 0);
        let re = moved(&mut e, &re);
        let im = if last == 2 {
            let p = part(&mut e, 1);
            Some(moved(&mut e, &p))
        } else {
            None
        };
        // The transform's matrices: at most two of input × output bins.
        super::check_elements(2 * m * length, "the DFT's matrices")?;
        let l = length as usize;
        let matrix = |e: &mut Expansion, rows: i64, cols: i64, f: &dyn Fn(i64, i64) -> f64| {
            let mut v = Vec::with_capacity((rows * cols) as usize);
            for r in 0..rows {
                for c in 0..cols {
                    v.push(f(r, c) as f32);
                }
            }
            e.f32s_like(&v, &[rows, cols], &xn, elem)
        };
        let theta = |a: i64, b: i64| 2.0 * PI * ((a * b) as f64 % length as f64) / length as f64;
        let mul = |e: &mut Expansion, x: &str, w: &str| e.op("MatMul", &[x, w], Vec::new());
        let (yr, yi) = if inverse && onesided {
            // Half a spectrum (m bins, those past L/2 unused) to a real signal of L.
            let bins = m.min(length / 2 + 1);
            let weight = |k: i64| {
                if k == 0 || (length % 2 == 0 && k == length / 2) {
                    1.0
                } else {
                    2.0
                }
            };
            let a = matrix(&mut e, m, length, &|k, t| {
                if k < bins {
                    weight(k) * theta(k, t).cos() / l as f64
                } else {
                    0.0
                }
            });
            let mut y = mul(&mut e, &re, &a);
            if let Some(im) = &im {
                let b = matrix(&mut e, m, length, &|k, t| {
                    if k < bins {
                        -weight(k) * theta(k, t).sin() / l as f64
                    } else {
                        0.0
                    }
                });
                let yb = mul(&mut e, im, &b);
                y = e.op("Add", &[&y, &yb], Vec::new());
            }
            (y, None)
        } else {
            let bins = if onesided && !inverse {
                length / 2 + 1
            } else {
                length
            };
            let (yr, yi) = transform(
                &mut e,
                (&re, im.as_deref()),
                m,
                length,
                bins,
                inverse,
                (&xn, elem),
            );
            (yr, Some(yi))
        };
        let last_axis = rank as i64 - 1;
        let yr = e.unsqueeze(&yr, &[last_axis]);
        let y = match yi {
            Some(yi) => {
                let yi = e.unsqueeze(&yi, &[last_axis]);
                e.op("Concat", &[&yr, &yi], vec![int("axis", last_axis)])
            }
            None => yr,
        };
        let mut full_back = back;
        full_back.push(last_axis);
        let y = e.transpose(&y, &full_back);
        e.bind(&y, &out);
        Ok(e.finish())
    }
}

/// The discrete Fourier transform along the last axis of `(re, im)` (that axis `rows` long,
/// zero past `length`), `bins` frequencies: `(re + i·im) · (cos ∓ i·sin)(2π t k / length)`,
/// divided by `length` for the inverse. `like` is the input and its ONNX type, for the
/// constants. Returns the real and imaginary parts.
fn transform(
    e: &mut Expansion,
    (re, im): (&str, Option<&str>),
    rows: i64,
    length: i64,
    bins: i64,
    inverse: bool,
    (like, elem): (&str, i32),
) -> (String, String) {
    let (sign, scale) = if inverse {
        (1.0, 1.0 / length as f64)
    } else {
        (-1.0, 1.0)
    };
    let theta = |a: i64, b: i64| 2.0 * PI * ((a * b) as f64 % length as f64) / length as f64;
    let mut matrix = |f: &dyn Fn(i64, i64) -> f64| {
        let mut v = Vec::with_capacity((rows * bins) as usize);
        for t in 0..rows {
            for k in 0..bins {
                // Rows past the length (a truncated signal) are zero.
                v.push(if t < length {
                    (f(t, k) * scale) as f32
                } else {
                    0.0
                });
            }
        }
        e.f32s_like(&v, &[rows, bins], like, elem)
    };
    let c = matrix(&|t, k| theta(t, k).cos());
    let s = matrix(&|t, k| sign * theta(t, k).sin());
    // (re + i·im)(cos + i·s): re·cos − im·s, re·s + im·cos.
    let mut yr = e.op("MatMul", &[re, &c], Vec::new());
    let mut yi = e.op("MatMul", &[re, &s], Vec::new());
    if let Some(im) = im {
        let a = e.op("MatMul", &[im, &s], Vec::new());
        yr = e.op("Sub", &[&yr, &a], Vec::new());
        let b = e.op("MatMul", &[im, &c], Vec::new());
        yi = e.op("Add", &[&yi, &b], Vec::new());
    }
    (yr, yi)
}

impl Importer {
    /// `STFT` (opset 17): frames of `frame_length` (the window's, else the input's) every
    /// `frame_step` samples (`1 + (length - frame_length) / frame_step` of them) gathered,
    /// weighted by the window (ones without one) and transformed, `onesided` (the default)
    /// keeping `frame_length / 2 + 1` frequencies: `[batch, frames, bins, 2]`.
    pub(in crate::onnx::import) fn stft(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let (xn, xv) = self.req(n, 0)?;
        let xs: Vec<i64> = self.shape(&xv)?.iter().map(|&d| i64::from(d)).collect();
        let [_, samples, last] = <[i64; 3]>::try_from(xs.as_slice()).map_err(|_| {
            invalid(format!(
                "the signal must be [batch, length, 1 or 2], got {xs:?}"
            ))
        })?;
        if !(last == 1 || last == 2) {
            return Err(invalid(format!("the signal's last dimension is {last}")));
        }
        let step = size_input(self, n, 1, "frame_step")?
            .ok_or_else(|| invalid("frame_step is required"))?;
        let window = self.arg(n, 2)?.map(|(name, v)| (name, self.shape(&v)));
        let frame = match (&window, size_input(self, n, 3, "frame_length")?) {
            (Some((_, shape)), _) => i64::from(
                *shape
                    .as_ref()
                    .map_err(|_| invalid("the window"))?
                    .first()
                    .unwrap_or(&0),
            ),
            (None, Some(l)) => l,
            (None, None) => return Err(invalid("STFT needs a window or a frame_length")),
        };
        if step <= 0 || frame <= 0 || frame > samples {
            return Err(invalid(format!(
                "frames of {frame} every {step} over {samples} samples"
            )));
        }
        let frames = 1 + (samples - frame) / step;
        let onesided = attr_int(n, "onesided")?.unwrap_or(1) != 0;
        let bins = if onesided { frame / 2 + 1 } else { frame };
        super::check_elements(frames * frame, "the STFT's frame positions")?;
        super::check_elements(2 * frame * bins, "the STFT's matrices")?;
        let elem = self.data_type(&xv)?.onnx_code();
        let out = first_output(n)?;
        let mut e = Expansion::new(self, n);
        let positions: Vec<i64> = (0..frames)
            .flat_map(|f| (0..frame).map(move |t| f * step + t))
            .collect();
        let idx = e.i64s(&positions, &[frames, frame]);
        // [batch, frames, frame, 1 or 2]
        let framed = e.op("Gather", &[&xn, &idx], vec![int("axis", 1)]);
        let part = |e: &mut Expansion, k: i64| {
            let p = e.slice(&framed, &[k], &[k + 1], &[3]);
            let p = e.squeeze(&p, &[3]);
            match &window {
                Some((w, _)) => e.op("Mul", &[&p, w], Vec::new()),
                None => p,
            }
        };
        let re = part(&mut e, 0);
        let im = (last == 2).then(|| part(&mut e, 1));
        let (yr, yi) = transform(
            &mut e,
            (&re, im.as_deref()),
            frame,
            frame,
            bins,
            false,
            (&xn, elem),
        );
        let yr = e.unsqueeze(&yr, &[3]);
        let yi = e.unsqueeze(&yi, &[3]);
        let y = e.op("Concat", &[&yr, &yi], vec![int("axis", 3)]);
        e.bind(&y, &out);
        Ok(e.finish())
    }
}
