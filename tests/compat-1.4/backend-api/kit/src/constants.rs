//! Reading the value of a constant input when a workload is made (weights, biases,
//! parameters to fold), with its length checked against its description.
//!
//! Errors are sentences for the plugin to wrap in its own `invalid_argument` error (which
//! names the layer).

use backplane_api::WorkloadDesc;

/// The bytes of constant input `slot` of `desc`, exactly as many as its description says.
///
/// # Errors
/// `input {slot} must be constant`, or `constant input {slot} holds {n} bytes for {info}`.
pub fn constant_bytes<'a>(desc: &WorkloadDesc<'a>, slot: usize) -> Result<&'a [u8], String> {
    let view = desc
        .constant(slot)
        .ok_or_else(|| format!("input {slot} must be constant"))?;
    let bytes = view.data.as_slice();
    if Some(bytes.len()) != view.info.num_bytes() {
        return Err(format!(
            "constant input {slot} holds {} bytes for {}",
            bytes.len(),
            view.info
        ));
    }
    Ok(bytes)
}

/// The value of constant input `slot` of `desc` as `f32`s (copied: a constant's bytes need
/// not be aligned). The caller knows the input is Float32 (its layer support said so).
///
/// # Errors
/// As [`constant_bytes`].
pub fn constant_f32(desc: &WorkloadDesc<'_>, slot: usize) -> Result<Vec<f32>, String> {
    Ok(constant_bytes(desc, slot)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// The value of constant input `slot` of `desc` as `i32`s (copied), for a Signed32 input.
///
/// # Errors
/// As [`constant_bytes`].
pub fn constant_i32(desc: &WorkloadDesc<'_>, slot: usize) -> Result<Vec<i32>, String> {
    Ok(constant_bytes(desc, slot)?
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, LayerDescriptor, ROption, RSlice, TensorInfo};

    use super::*;

    #[test]
    fn values_and_refusals() {
        let f: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i: Vec<u8> = [7i32, -3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let inputs = [
            TensorInfo::new(&[2], DataType::Float32),
            TensorInfo::new(&[2], DataType::Float32).constant(),
            TensorInfo::new(&[2], DataType::Signed32).constant(),
            TensorInfo::new(&[3], DataType::Float32).constant(),
        ];
        let constants = [
            ROption::RNone,
            ROption::RSome(RSlice::from_slice(&f)),
            ROption::RSome(RSlice::from_slice(&i)),
            ROption::RSome(RSlice::from_slice(&f)),
        ];
        let layer = LayerDescriptor::MemCopy;
        let desc = WorkloadDesc {
            name: "l".into(),
            layer: &layer,
            inputs: RSlice::from_slice(&inputs),
            outputs: RSlice::from_slice(&inputs[..1]),
            constants: RSlice::from_slice(&constants),
        };
        assert_eq!(constant_f32(&desc, 1), Ok(vec![1.5, -2.0]));
        assert_eq!(constant_i32(&desc, 2), Ok(vec![7, -3]));
        assert_eq!(
            constant_f32(&desc, 0),
            Err("input 0 must be constant".to_owned())
        );
        assert_eq!(
            constant_f32(&desc, 9),
            Err("input 9 must be constant".to_owned())
        );
        assert_eq!(
            constant_f32(&desc, 3),
            Err(format!("constant input 3 holds 8 bytes for {}", inputs[3]))
        );
    }
}
