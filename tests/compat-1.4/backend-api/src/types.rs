//! Tensor metadata: data types, layouts, quantisation and [`TensorInfo`].

use std::fmt;

use abi_stable::{
    StableAbi,
    std_types::{ROption, RVec},
};

/// Element type of a tensor.
#[repr(u8)]
#[derive(
    StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash,
)]
pub enum DataType {
    /// IEEE 754 binary32.
    Float32,
    /// IEEE 754 binary16.
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
}

impl DataType {
    /// Every data type of Backend API 1.0.
    pub const ALL: [DataType; 7] = [
        DataType::Float32,
        DataType::Float16,
        DataType::QAsymmU8,
        DataType::QAsymmS8,
        DataType::QSymmS8,
        DataType::Signed32,
        DataType::Boolean,
    ];

    /// Size of one element in bytes.
    pub const fn size_in_bytes(self) -> usize {
        match self {
            DataType::Float32 | DataType::Signed32 => 4,
            DataType::Float16 => 2,
            DataType::QAsymmU8 | DataType::QAsymmS8 | DataType::QSymmS8 | DataType::Boolean => 1,
        }
    }

    /// `true` for the quantised 8-bit types.
    pub const fn is_quantized(self) -> bool {
        matches!(
            self,
            DataType::QAsymmU8 | DataType::QAsymmS8 | DataType::QSymmS8
        )
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
