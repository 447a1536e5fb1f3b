//! Tensor metadata: data types, layouts, quantisation and [`TensorInfo`].

use std::fmt;

use abi_stable::{
    StableAbi,
    std_types::{ROption, RVec},
};

/// Element type of a tensor.
///
/// Backend API 1.0 listed the first seven; 1.2 gave the quantised ones their meaning and 1.5
/// appended every other numeric type of ONNX and gave `Float16` its meaning. A plugin built
/// against an older minor is never handed a type its minor did not define
/// ([`crate::additions::gate_tensors`]).
///
/// Integer arithmetic wraps as two's complement (ONNX's rule for `Add`, `Sub`, `Mul`), a cast
/// between integer types keeps the low bits, and a cast from a floating type to an integer type
/// truncates toward zero (out-of-range values are implementation-defined in ONNX; the host's
/// oracles saturate). `Float16` is IEEE 754 binary16 and `BFloat16` the upper half of a
/// binary32; both are stored as 2 bytes and computed in binary32, rounding to nearest-even on
/// store, once per layer (as numpy's float16 does; onnxruntime rounds once per chain of
/// float16 nodes it has no float16 kernel for, so a chain can differ by a rounding per node).
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum DataType {
    /// IEEE 754 binary32.
    Float32,
    /// IEEE 754 binary16 (meaningful from Backend API 1.5).
    Float16,
    /// Asymmetric quantised unsigned 8-bit (`real = scale * (q - offset)`).
    QAsymmU8,
    /// Asymmetric quantised signed 8-bit.
    QAsymmS8,
    /// Symmetric quantised signed 8-bit (offset 0, optionally per axis).
    QSymmS8,
    /// Signed 32-bit integer.
    Signed32,
    /// One byte per element, 0 or 1.
    Boolean,
    /// Signed 64-bit integer (ONNX `int64`; Backend API 1.5).
    Signed64,
    /// IEEE 754 binary64 (ONNX `double`; Backend API 1.5).
    Float64,
    /// Plain unsigned 8-bit integer, not quantised (ONNX `uint8`; Backend API 1.5).
    UnsignedInt8,
    /// Plain signed 8-bit integer, not quantised (ONNX `int8`; Backend API 1.5).
    Signed8,
    /// Signed 16-bit integer (ONNX `int16`; Backend API 1.5).
    Signed16,
    /// Unsigned 16-bit integer (ONNX `uint16`; Backend API 1.5).
    UnsignedInt16,
    /// Unsigned 32-bit integer (ONNX `uint32`; Backend API 1.5).
    UnsignedInt32,
    /// Unsigned 64-bit integer (ONNX `uint64`; Backend API 1.5).
    UnsignedInt64,
    /// The upper 16 bits of an IEEE 754 binary32 (ONNX `bfloat16`; Backend API 1.5).
    BFloat16,
}

impl DataType {
    /// Every data type, in the order of their discriminants.
    pub const ALL: [DataType; 16] = [
        DataType::Float32,
        DataType::Float16,
        DataType::QAsymmU8,
        DataType::QAsymmS8,
        DataType::QSymmS8,
        DataType::Signed32,
        DataType::Boolean,
        DataType::Signed64,
        DataType::Float64,
        DataType::UnsignedInt8,
        DataType::Signed8,
        DataType::Signed16,
        DataType::UnsignedInt16,
        DataType::UnsignedInt32,
        DataType::UnsignedInt64,
        DataType::BFloat16,
    ];

    /// The data types of Backend API 1.0 (to 1.4): the first seven of [`DataType::ALL`].
    pub const V1_0: &'static [DataType] = Self::ALL.split_at(7).0;

    /// Size of one element in bytes.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DataType::Float64 | DataType::Signed64 | DataType::UnsignedInt64 => 8,
            DataType::Float32 | DataType::Signed32 | DataType::UnsignedInt32 => 4,
            DataType::Float16
            | DataType::BFloat16
            | DataType::Signed16
            | DataType::UnsignedInt16 => 2,
            DataType::QAsymmU8
            | DataType::QAsymmS8
            | DataType::QSymmS8
            | DataType::Boolean
            | DataType::UnsignedInt8
            | DataType::Signed8 => 1,
        }
    }

    /// `true` for the quantised 8-bit types.
    pub const fn is_quantized(self) -> bool {
        matches!(
            self,
            DataType::QAsymmU8 | DataType::QAsymmS8 | DataType::QSymmS8
        )
    }

    /// `true` for the floating-point types (`Float16`, `BFloat16`, `Float32`, `Float64`).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float32 | DataType::Float16 | DataType::Float64 | DataType::BFloat16
        )
    }

    /// `true` for the plain (not quantised) integer types, signed or not; not `Boolean`.
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            DataType::Signed32
                | DataType::Signed64
                | DataType::UnsignedInt8
                | DataType::Signed8
                | DataType::Signed16
                | DataType::UnsignedInt16
                | DataType::UnsignedInt32
                | DataType::UnsignedInt64
        )
    }

    /// `true` for the signed plain integer types.
    pub const fn is_signed_integer(self) -> bool {
        matches!(
            self,
            DataType::Signed8 | DataType::Signed16 | DataType::Signed32 | DataType::Signed64
        )
    }

    /// `true` for a type Backend API 1.5 appended, or `Float16` (which 1.5 gave its meaning):
    /// what [`crate::additions::gate_tensors`] keeps from a plugin older than 1.5.
    pub const fn is_from_1_5(self) -> bool {
        matches!(self, DataType::Float16) || self as u8 >= DataType::Signed64 as u8
    }

    /// The type's ONNX `TensorProto.DataType` code (`FLOAT` = 1, `INT64` = 7, …); the
    /// quantised types give the code of their storage (`uint8` = 2, `int8` = 3).
    pub const fn onnx_code(self) -> i32 {
        match self {
            DataType::Float32 => 1,
            DataType::UnsignedInt8 | DataType::QAsymmU8 => 2,
            DataType::Signed8 | DataType::QAsymmS8 | DataType::QSymmS8 => 3,
            DataType::UnsignedInt16 => 4,
            DataType::Signed16 => 5,
            DataType::Signed32 => 6,
            DataType::Signed64 => 7,
            DataType::Boolean => 9,
            DataType::Float16 => 10,
            DataType::Float64 => 11,
            DataType::UnsignedInt32 => 12,
            DataType::UnsignedInt64 => 13,
            DataType::BFloat16 => 16,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Memory layout of a 4-D activation tensor.
#[repr(u8)]
#[derive(
    StableAbi,
    serde::Serialize,
    serde::Deserialize,
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
)]
pub enum DataLayout {
    /// Batch, channels, height, width (the default).
    #[default]
    Nchw,
    /// Batch, height, width, channels.
    Nhwc,
}

/// Per-axis quantisation (for example per output channel of convolution weights).
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct PerAxisQuantization {
    /// The axis the scales run along.
    pub axis: u32,
    /// One scale per index of `axis`.
    pub scales: RVec<f32>,
}

/// Quantisation parameters of a quantised tensor.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct Quantization {
    /// Scale of the whole tensor (ignored when `per_axis` is set).
    pub scale: f32,
    /// Zero point.
    pub offset: i32,
    /// Per-axis scales, when the tensor is quantised per axis.
    pub per_axis: ROption<PerAxisQuantization>,
}

impl Quantization {
    /// Per-tensor quantisation.
    pub fn per_tensor(scale: f32, offset: i32) -> Self {
        Self {
            scale,
            offset,
            per_axis: ROption::RNone,
        }
    }
}

/// Shape, element type and quantisation of a tensor.
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Dimensions, outermost first. An empty shape is a scalar.
    pub shape: RVec<u32>,
    /// Element type.
    pub data_type: DataType,
    /// Quantisation parameters, for quantised types.
    pub quantization: ROption<Quantization>,
    /// `true` when the tensor's value is fixed when the network is built (weights, biases).
    pub is_constant: bool,
}

impl TensorInfo {
    /// A non-quantised, non-constant tensor.
    pub fn new(shape: &[u32], data_type: DataType) -> Self {
        Self {
            shape: shape.iter().copied().collect(),
            data_type,
            quantization: ROption::RNone,
            is_constant: false,
        }
    }

    /// The same tensor marked constant.
    pub fn constant(mut self) -> Self {
        self.is_constant = true;
        self
    }

    /// The same tensor with quantisation parameters.
    pub fn with_quantization(mut self, q: Quantization) -> Self {
        self.quantization = ROption::RSome(q);
        self
    }

    /// Number of elements (1 for a scalar), or `None` on overflow.
    pub fn num_elements(&self) -> Option<usize> {
        self.shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
    }

    /// Number of bytes the tensor's data occupies, or `None` on overflow.
    pub fn num_bytes(&self) -> Option<usize> {
        self.num_elements()?
            .checked_mul(self.data_type.size_in_bytes())
    }
}

impl TensorInfo {
    /// Checks the quantisation parameters against the data type and shape (Backend API 1.2):
    /// a quantised type has them; each scale is finite and positive; the offset lies in the
    /// type's range (0 for `QSymmS8` and for a `Signed32` bias); per-axis scales name an axis
    /// of the shape and hold one scale per index of it. Float32 and Boolean carry none.
    pub fn check_quantization(&self) -> Result<(), String> {
        let Some(q) = self.quantization.as_ref().into_option() else {
            return if self.data_type.is_quantized() {
                Err(format!("{self} has no quantization parameters"))
            } else {
                Ok(())
            };
        };
        let range = match self.data_type {
            DataType::QAsymmU8 => 0..=255,
            DataType::QAsymmS8 => -128..=127,
            DataType::QSymmS8 | DataType::Signed32 => 0..=0,
            other => return Err(format!("{other} tensors carry no quantization parameters")),
        };
        if !range.contains(&q.offset) {
            return Err(format!(
                "{self}: zero point {} is outside {}..={}",
                q.offset,
                range.start(),
                range.end()
            ));
        }
        let bad = |s: f32| !(s.is_finite() && s > 0.0);
        match q.per_axis.as_ref() {
            ROption::RNone if bad(q.scale) => {
                Err(format!("{self}: scale {} is not positive", q.scale))
            }
            ROption::RNone => Ok(()),
            ROption::RSome(p) => {
                let Some(&dim) = self.shape.get(p.axis as usize) else {
                    return Err(format!(
                        "{self}: quantization axis {} is not a dimension",
                        p.axis
                    ));
                };
                if p.scales.len() != dim as usize {
                    return Err(format!(
                        "{self}: {} scales along axis {} of size {dim}",
                        p.scales.len(),
                        p.axis
                    ));
                }
                match p.scales.iter().find(|&&s| bad(s)) {
                    Some(s) => Err(format!("{self}: scale {s} is not positive")),
                    None => Ok(()),
                }
            }
        }
    }

    /// The scale of index `i` of the quantisation axis (the tensor's scale when it is
    /// quantised per tensor), or `None` without parameters.
    pub fn scale_at(&self, i: usize) -> Option<f32> {
        let q = self.quantization.as_ref().into_option()?;
        Some(match q.per_axis.as_ref() {
            ROption::RSome(p) => *p.scales.get(i)?,
            ROption::RNone => q.scale,
        })
    }
}

impl fmt::Display for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} {}", self.shape.as_slice(), self.data_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        let t = TensorInfo::new(&[1, 3, 224, 224], DataType::Float32);
        assert_eq!(t.num_elements(), Some(150_528));
        assert_eq!(t.num_bytes(), Some(602_112));
        assert_eq!(
            TensorInfo::new(&[], DataType::QAsymmU8).num_bytes(),
            Some(1)
        );
        assert_eq!(
            TensorInfo::new(&[u32::MAX, u32::MAX, u32::MAX], DataType::Float32).num_bytes(),
            None
        );
    }

    #[test]
    fn quantization_checked() {
        let u8q = |scale, offset| {
            TensorInfo::new(&[2, 3], DataType::QAsymmU8)
                .with_quantization(Quantization::per_tensor(scale, offset))
        };
        assert_eq!(u8q(0.5, 255).check_quantization(), Ok(()));
        assert_eq!(
            u8q(0.5, 256).check_quantization(),
            Err("[2, 3] QAsymmU8: zero point 256 is outside 0..=255".to_owned())
        );
        assert_eq!(
            u8q(0.0, 1).check_quantization(),
            Err("[2, 3] QAsymmU8: scale 0 is not positive".to_owned())
        );
        assert_eq!(
            TensorInfo::new(&[2], DataType::QAsymmS8).check_quantization(),
            Err("[2] QAsymmS8 has no quantization parameters".to_owned())
        );
        let per_axis = |scales: Vec<f32>| {
            TensorInfo::new(&[2, 3], DataType::QSymmS8).with_quantization(Quantization {
                scale: 0.0,
                offset: 0,
                per_axis: ROption::RSome(PerAxisQuantization {
                    axis: 0,
                    scales: scales.into(),
                }),
            })
        };
        assert_eq!(per_axis(vec![0.5, 0.25]).check_quantization(), Ok(()));
        assert_eq!(per_axis(vec![0.5, 0.25]).scale_at(1), Some(0.25));
        assert_eq!(
            per_axis(vec![0.5]).check_quantization(),
            Err("[2, 3] QSymmS8: 1 scales along axis 0 of size 2".to_owned())
        );
        assert_eq!(
            TensorInfo::new(&[2], DataType::Float32)
                .with_quantization(Quantization::per_tensor(1.0, 0))
                .check_quantization(),
            Err("Float32 tensors carry no quantization parameters".to_owned())
        );
    }
}
