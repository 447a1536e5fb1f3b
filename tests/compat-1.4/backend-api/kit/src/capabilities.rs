//! Folding what a backend runs into its [`Capabilities`]: a capability named after each layer
//! kind, and one per element-wise binary operation.

use backplane_api::{BinaryOperation, Capabilities, LayerKind};

/// `caps` with `kind` (its name, as `Convolution2d`) enabled for each of `kinds`.
pub fn with_layer_kinds(caps: Capabilities, kinds: &[LayerKind]) -> Capabilities {
    kinds
        .iter()
        .fold(caps, |caps, kind| caps.with_bool(&kind.to_string(), true))
}

/// `caps` with `ElementwiseBinary<Op>` (as `ElementwiseBinaryAdd`) enabled for every
/// [`BinaryOperation`].
pub fn with_all_binary_operations(caps: Capabilities) -> Capabilities {
    BinaryOperation::ALL.iter().fold(caps, |caps, op| {
        caps.with_bool(&format!("ElementwiseBinary{op:?}"), true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_operations_are_enabled() {
        let caps = with_all_binary_operations(with_layer_kinds(
            Capabilities::new(),
            &[LayerKind::Convolution2d, LayerKind::PreCompiled],
        ));
        for name in [
            "Convolution2d",
            "PreCompiled",
            "ElementwiseBinaryAdd",
            "ElementwiseBinarySquaredDifference",
            "ElementwiseBinaryPower",
        ] {
            assert!(caps.is_enabled(name), "{name}");
        }
        assert!(!caps.is_enabled("Pooling2d"));
        assert!(!caps.is_enabled("ElementwiseBinary"));
    }
}
