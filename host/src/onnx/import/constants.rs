//! The importer's constants: decoding a `TensorProto` (initializers, `Constant` values)
//! or a [`ConstTensor`] (promoted graph inputs) into a [`Value`], charging each against the
//! model's budget of [`MAX_CONSTANT_BYTES`], and encoding a float constant back into a
//! [`ConstTensor`] for a `Constant` layer.

use std::sync::Arc;

use backplane_api::{ConstTensor, DataType, TensorInfo};

use super::{MAX_CONSTANT_BYTES, Value};
use crate::onnx::{
    fold::{Const, numel},
    proto::{TensorProto, data_type},
};

pub(super) fn charge(budget: &mut usize, elements: usize, size: usize) -> Result<(), String> {
    let bytes = elements.saturating_mul(size);
    *budget = budget.checked_sub(bytes).ok_or_else(|| {
        format!(
            "the model's constants exceed the limit of {MAX_CONSTANT_BYTES} bytes, or the \
             load's memory budget when it is smaller: {bytes} more bytes asked, {budget} left"
        )
    })?;
    Ok(())
}

fn raw_values<T>(raw: &[u8], n: usize, size: usize, read: impl Fn(&[u8]) -> T) -> Option<Vec<T>> {
    (raw.len() == n.checked_mul(size)?).then(|| raw.chunks_exact(size).map(read).collect())
}

/// A tensor from a `TensorProto` (initializer or `Constant` attribute). Malformed data is an
/// error; an element type the importer does not handle gives [`Value::Unusable`].
pub(super) fn tensor_value(t: &TensorProto, budget: &mut usize) -> Result<Value, String> {
    let shape = t
        .dims
        .iter()
        .map(|&d| {
            u32::try_from(d).map_err(|_| format!("dimension {d} of {:?} is out of range", t.dims))
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let n = numel(&shape)?;
    let ty = t.data_type;
    let raw = t.raw_data.as_slice();
    let wrong = |got: usize| {
        format!(
            "{} tensor of shape {shape:?} needs {n} values, holds {got} (or {} raw bytes); external data is not supported",
            data_type::name(ty),
            raw.len()
        )
    };
    let le8 = |c: &[u8]| <[u8; 8]>::try_from(c).unwrap_or_default();
    let le4 = |c: &[u8]| <[u8; 4]>::try_from(c).unwrap_or_default();
    let le2 = |c: &[u8]| <[u8; 2]>::try_from(c).unwrap_or_default();
    let floats = |typed: Vec<f32>, raw_f: Option<Vec<f32>>| -> Result<Vec<f32>, String> {
        if !raw.is_empty() {
            raw_f.ok_or_else(|| wrong(0))
        } else if typed.len() == n {
            Ok(typed)
        } else {
            Err(wrong(typed.len()))
        }
    };
    let ints = |typed: Vec<i64>, raw_i: Option<Vec<i64>>| -> Result<Vec<i64>, String> {
        if !raw.is_empty() {
            raw_i.ok_or_else(|| wrong(0))
        } else if typed.len() == n {
            Ok(typed)
        } else {
            Err(wrong(typed.len()))
        }
    };
    let int32s = || {
        t.int32_data
            .iter()
            .map(|&v| i64::from(v))
            .collect::<Vec<_>>()
    };
    match ty {
        data_type::FLOAT => {
            let data = floats(
                t.float_data.clone(),
                raw_values(raw, n, 4, |c| f32::from_le_bytes(le4(c))),
            )?;
            charge(budget, n, 4)?;
            Ok(Value::F32(Arc::new(Const::new(shape, data)?)))
        }
        data_type::DOUBLE => {
            let data = floats(
                t.double_data.iter().map(|&v| v as f32).collect(),
                raw_values(raw, n, 8, |c| f64::from_le_bytes(le8(c)) as f32),
            )?;
            charge(budget, n, 4)?;
            Ok(Value::F32(Arc::new(Const::new(shape, data)?)))
        }
        data_type::INT64
        | data_type::INT32
        | data_type::INT16
        | data_type::INT8
        | data_type::UINT64
        | data_type::UINT32
        | data_type::UINT16
        | data_type::UINT8
        | data_type::BOOL => {
            // A uint64 beyond i64::MAX is an error, never a wrapped value.
            let too_big =
                |v: u64| i64::try_from(v).map_err(|_| format!("uint64 value {v} is beyond int64"));
            if ty == data_type::UINT64 {
                let data: Vec<i64> = if raw.is_empty() {
                    if t.uint64_data.len() != n {
                        return Err(wrong(t.uint64_data.len()));
                    }
                    t.uint64_data
                        .iter()
                        .map(|&v| too_big(v))
                        .collect::<Result<_, _>>()?
                } else {
                    raw_values(raw, n, 8, |c| u64::from_le_bytes(le8(c)))
                        .ok_or_else(|| wrong(0))?
                        .into_iter()
                        .map(too_big)
                        .collect::<Result<_, _>>()?
                };
                charge(budget, n, 8)?;
                return Ok(Value::I64(Arc::new(Const::new(shape, data)?)));
            }
            let raw_i = match ty {
                data_type::INT64 => raw_values(raw, n, 8, |c| i64::from_le_bytes(le8(c))),
                data_type::UINT32 => {
                    raw_values(raw, n, 4, |c| i64::from(u32::from_le_bytes(le4(c))))
                }
                data_type::INT32 => {
                    raw_values(raw, n, 4, |c| i64::from(i32::from_le_bytes(le4(c))))
                }
                data_type::INT16 => {
                    raw_values(raw, n, 2, |c| i64::from(i16::from_le_bytes(le2(c))))
                }
                data_type::UINT16 => {
                    raw_values(raw, n, 2, |c| i64::from(u16::from_le_bytes(le2(c))))
                }
                data_type::INT8 => raw_values(raw, n, 1, |c| i64::from(c[0] as i8)),
                _ => raw_values(raw, n, 1, |c| i64::from(c[0])),
            };
            let typed = match ty {
                data_type::INT64 => t.int64_data.clone(),
                data_type::UINT32 => t
                    .uint64_data
                    .iter()
                    .map(|&v| {
                        u32::try_from(v)
                            .map(i64::from)
                            .map_err(|_| format!("uint32 value {v} is beyond uint32"))
                    })
                    .collect::<Result<_, _>>()?,
                _ => int32s(),
            };
            let data = ints(typed, raw_i)?;
            charge(budget, n, 8)?;
            Ok(Value::I64(Arc::new(Const::new(shape, data)?)))
        }
        // Widened to f32 exactly; a tensor of it is made of the declared type again.
        data_type::FLOAT16 | data_type::BFLOAT16 => {
            let bits: Vec<u16> = if raw.is_empty() {
                let bits = t
                    .int32_data
                    .iter()
                    .map(|&v| u16::try_from(v).map_err(|_| format!("{v} is not 16 bits")))
                    .collect::<Result<Vec<u16>, String>>()?;
                if bits.len() != n {
                    return Err(wrong(bits.len()));
                }
                bits
            } else {
                raw_values(raw, n, 2, |c| u16::from_le_bytes(le2(c))).ok_or_else(|| wrong(0))?
            };
            let data = if ty == data_type::BFLOAT16 {
                bits.iter()
                    .map(|&b| half::bf16::from_bits(b).to_f32())
                    .collect()
            } else {
                bits.iter()
                    .map(|&b| half::f16::from_bits(b).to_f32())
                    .collect()
            };
            charge(budget, n, 4)?;
            Ok(Value::F32(Arc::new(Const::new(shape, data)?)))
        }
        _ => Ok(Value::Unusable(format!(
            "{} constants are not supported (only float32, float64 and integer types)",
            data_type::name(ty)
        ))),
    }
}

/// The value of a tensor given by its bytes (a constant input, or a value a run computed):
/// float types as float32 (double rounded, 16-bit floats widened exactly), integer and bool
/// types as integers (a uint64 over `i64::MAX` is refused, never wrapped).
pub(super) fn const_tensor_value(c: &ConstTensor, budget: &mut usize) -> Result<Value, String> {
    if c.info.num_bytes() != Some(c.data.len()) {
        return Err(format!("constant {} holds {} bytes", c.info, c.data.len()));
    }
    let shape = c.info.shape.to_vec();
    let n = numel(&shape)?;
    let bytes = c.data.as_slice();
    fn words<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
        b.chunks_exact(N).map(|w| w.try_into().unwrap_or([0; N]))
    }
    let floats: Option<Vec<f32>> = match c.info.data_type {
        DataType::Float32 => Some(words::<4>(bytes).map(f32::from_le_bytes).collect()),
        #[allow(clippy::cast_possible_truncation)]
        // reason: double values round to f32, as the importer reads double initializers
        DataType::Float64 => Some(
            words::<8>(bytes)
                .map(|w| f64::from_le_bytes(w) as f32)
                .collect(),
        ),
        DataType::Float16 => Some(
            words::<2>(bytes)
                .map(|w| half::f16::from_le_bytes(w).to_f32())
                .collect(),
        ),
        DataType::BFloat16 => Some(
            words::<2>(bytes)
                .map(|w| half::bf16::from_le_bytes(w).to_f32())
                .collect(),
        ),
        _ => None,
    };
    if let Some(data) = floats {
        charge(budget, n, 4)?;
        return Ok(Value::F32(Arc::new(Const::new(shape, data)?)));
    }
    let ints: Vec<i64> = match c.info.data_type {
        DataType::Signed32 => words::<4>(bytes)
            .map(|w| i64::from(i32::from_le_bytes(w)))
            .collect(),
        DataType::Signed64 => words::<8>(bytes).map(i64::from_le_bytes).collect(),
        DataType::Signed16 => words::<2>(bytes)
            .map(|w| i64::from(i16::from_le_bytes(w)))
            .collect(),
        DataType::UnsignedInt16 => words::<2>(bytes)
            .map(|w| i64::from(u16::from_le_bytes(w)))
            .collect(),
        DataType::UnsignedInt32 => words::<4>(bytes)
            .map(|w| i64::from(u32::from_le_bytes(w)))
            .collect(),
        DataType::UnsignedInt64 => words::<8>(bytes)
            .map(|w| {
                let v = u64::from_le_bytes(w);
                i64::try_from(v)
                    .map_err(|_| format!("the uint64 value {v} is over the largest int64"))
            })
            .collect::<Result<_, _>>()?,
        DataType::Signed8 => bytes.iter().map(|&b| i64::from(b.cast_signed())).collect(),
        DataType::UnsignedInt8 => bytes.iter().map(|&b| i64::from(b)).collect(),
        DataType::Boolean => bytes.iter().map(|&b| i64::from(b != 0)).collect(),
        t => return Err(format!("a {t} tensor cannot be a constant of the importer")),
    };
    charge(budget, n, 8)?;
    Ok(Value::I64(Arc::new(Const::new(shape, ints)?)))
}

pub(super) fn to_const_tensor(c: &Const<f32>) -> ConstTensor {
    ConstTensor {
        info: TensorInfo::new(&c.shape, DataType::Float32).constant(),
        data: c.data.iter().flat_map(|v| v.to_le_bytes()).collect(),
    }
}
