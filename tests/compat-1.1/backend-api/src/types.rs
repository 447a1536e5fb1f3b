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
}
