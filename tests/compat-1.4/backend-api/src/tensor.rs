//! Views of tensor data handed to workloads.

use abi_stable::{
    StableAbi,
    std_types::{RSlice, RSliceMut, RVec},
};

use crate::{BackendError, DataType, TensorInfo};

/// A read-only view of a tensor: its info and its bytes.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// Shape and element type.
    pub info: &'a TensorInfo,
    /// The elements, densely packed, row-major.
    pub data: RSlice<'a, u8>,
}

/// A writable view of a tensor: its info and its bytes.
#[repr(C)]
#[derive(StableAbi, Debug)]
pub struct TensorViewMut<'a> {
    /// Shape and element type.
    pub info: &'a TensorInfo,
    /// The elements, densely packed, row-major.
    pub data: RSliceMut<'a, u8>,
}

/// An element type a tensor's bytes can be read as: the Rust type of a [`DataType`].
pub trait Element: bytemuck::Pod + Default + Send + Sync + 'static {
    /// The data type whose elements this type holds (the first of several, for a type that
    /// holds more than one: `u8` holds `Boolean` and `QAsymmU8`).
    const DATA_TYPE: DataType;

    /// `true` when a tensor of `data_type` stores its elements as this type.
    fn accepts(data_type: DataType) -> bool {
        data_type == Self::DATA_TYPE
    }
}

impl Element for f32 {
    const DATA_TYPE: DataType = DataType::Float32;
}

impl Element for i32 {
    const DATA_TYPE: DataType = DataType::Signed32;
}

/// `Boolean`'s element (one byte, 0 or 1) and `QAsymmU8`'s (Backend API 1.2).
impl Element for u8 {
    const DATA_TYPE: DataType = DataType::Boolean;

    fn accepts(data_type: DataType) -> bool {
        matches!(data_type, DataType::Boolean | DataType::QAsymmU8)
    }
}

/// The element of `QAsymmS8` and `QSymmS8` (Backend API 1.2).
impl Element for i8 {
    const DATA_TYPE: DataType = DataType::QAsymmS8;

    fn accepts(data_type: DataType) -> bool {
        matches!(data_type, DataType::QAsymmS8 | DataType::QSymmS8)
    }
}

fn check_type<T: Element>(info: &TensorInfo, len: usize) -> Result<(), BackendError> {
    if !T::accepts(info.data_type) {
        // Named by the Rust type: `u8` reads Boolean and QAsymmU8 alike.
        return Err(BackendError::invalid_argument(format!(
            "tensor {info} cannot be read as {}",
            std::any::type_name::<T>()
        )));
    }
    match info.num_bytes() {
        Some(n) if n == len => Ok(()),
        n => Err(BackendError::invalid_argument(format!(
            "tensor {info} needs {n:?} bytes, the buffer has {len}"
        ))),
    }
}

fn cast_error<T: Element>(info: &TensorInfo, e: bytemuck::PodCastError) -> BackendError {
    BackendError::invalid_argument(format!(
        "tensor {info}: buffer cannot be read as {}: {e:?}",
        T::DATA_TYPE
    ))
}

impl<'a> TensorView<'a> {
    /// Builds a view.
    pub fn new(info: &'a TensorInfo, data: &'a [u8]) -> Self {
        Self {
            info,
            data: RSlice::from_slice(data),
        }
    }

    /// The data as `f32`s, after checking the type, the length and the alignment.
    pub fn as_f32(&self) -> Result<&'a [f32], BackendError> {
        self.as_slice::<f32>()
    }

    /// The elements, after checking that the tensor is of `T`'s data type and that the buffer
    /// has exactly its size and `T`'s alignment.
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T], BackendError> {
        let bytes: &'a [u8] = self.data.as_slice();
        check_type::<T>(self.info, bytes.len())?;
        bytemuck::try_cast_slice(bytes).map_err(|e| cast_error::<T>(self.info, e))
    }
}

impl<'a> TensorViewMut<'a> {
    /// Builds a view.
    pub fn new(info: &'a TensorInfo, data: &'a mut [u8]) -> Self {
        Self {
            info,
            data: RSliceMut::from_mut_slice(data),
        }
    }

    /// The data as `f32`s, after checking the type, the length and the alignment.
    pub fn as_f32_mut(&mut self) -> Result<&mut [f32], BackendError> {
        self.as_mut_slice::<f32>()
    }

    /// The elements, writable, checked as [`TensorView::as_slice`] checks them.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], BackendError> {
        let info = self.info;
        let bytes: &mut [u8] = self.data.as_mut_slice();
        check_type::<T>(info, bytes.len())?;
        bytemuck::try_cast_slice_mut(bytes).map_err(|e| cast_error::<T>(info, e))
    }
}

/// A tensor that owns its value: a constant (weights, biases, a Constant layer's output).
#[repr(C)]
#[derive(StableAbi, serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub struct ConstTensor {
    /// Shape and element type (`is_constant` is set).
    pub info: TensorInfo,
    /// The elements, densely packed, row-major, little-endian.
    pub data: RVec<u8>,
}

impl ConstTensor {
    /// A Float32 constant. Panics if `values` does not match `shape` (a programming error).
    pub fn from_f32(shape: &[u32], values: &[f32]) -> Self {
        Self::from_elements(shape, values)
    }

    /// A constant of `T`'s data type with `values` in row-major order.
    ///
    /// # Panics
    /// If `values.len()` is not the number of elements of `shape`.
    pub fn from_elements<T: Element>(shape: &[u32], values: &[T]) -> Self {
        let info = TensorInfo::new(shape, T::DATA_TYPE).constant();
        assert_eq!(
            info.num_elements(),
            Some(values.len()),
            "shape {shape:?} vs {} values",
            values.len()
        );
        Self {
            info,
            data: bytemuck::cast_slice(values).iter().copied().collect(),
        }
    }

    /// A read-only view of this constant.
    pub fn view(&self) -> TensorView<'_> {
        TensorView::new(&self.info, self.data.as_slice())
    }

    /// The value as `f32`s (copied, so the buffer's alignment does not matter).
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, BackendError> {
        self.to_vec::<f32>()
    }

    /// The elements as `T`, after checking the data type and size (the bytes need no
    /// alignment).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>, BackendError> {
        check_type::<T>(&self.info, self.data.len())?;
        Ok(self
            .data
            .chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_views_check_type_and_length() {
        let info = TensorInfo::new(&[2], DataType::Float32);
        let values = [1.5f32, -2.0];
        let view = TensorView::new(&info, bytemuck::cast_slice(&values));
        assert_eq!(view.as_f32().unwrap(), &values);
        let short = TensorView::new(&info, &bytemuck::cast_slice::<f32, u8>(&values)[..4]);
        assert_eq!(
            short.as_f32().unwrap_err().code,
            crate::ErrorCode::InvalidArgument
        );
        let int_info = TensorInfo::new(&[2], DataType::Signed32);
        assert!(
            TensorView::new(&int_info, bytemuck::cast_slice(&values))
                .as_f32()
                .is_err()
        );
        let c = ConstTensor::from_f32(&[2], &values);
        assert_eq!(c.to_f32_vec().unwrap(), values);
    }

    /// `u8` reads Boolean and QAsymmU8 tensors, `i8` QAsymmS8 and QSymmS8 ones (Backend API
    /// 1.2); anything else is refused, naming the Rust type asked for.
    #[test]
    fn eight_bit_views_read_their_quantized_types() {
        let bytes = [0u8, 127, 128, 255];
        for (dt, as_u8, as_i8) in [
            (DataType::Boolean, true, false),
            (DataType::QAsymmU8, true, false),
            (DataType::QAsymmS8, false, true),
            (DataType::QSymmS8, false, true),
        ] {
            let info = TensorInfo::new(&[4], dt);
            let view = TensorView::new(&info, &bytes);
            assert_eq!(view.as_slice::<u8>().is_ok(), as_u8, "{dt}");
            assert_eq!(view.as_slice::<i8>().is_ok(), as_i8, "{dt}");
        }
        let info = TensorInfo::new(&[4], DataType::QAsymmS8);
        let view = TensorView::new(&info, &bytes);
        assert_eq!(view.as_slice::<i8>().unwrap(), &[0, 127, -128, -1]);
        assert_eq!(
            view.as_slice::<u8>().unwrap_err().message.as_str(),
            "tensor [4] QAsymmS8 cannot be read as u8"
        );
    }
}
