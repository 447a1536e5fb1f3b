//! Reading a node's attributes, and checking the integers and axes they and constant
//! inputs give: every reader returns `Ok(None)` for an absent attribute and an
//! [`invalid`] error for one of the wrong type or out of range.

use backplane_api::shapes;

use super::{NResult, Node, invalid};
use crate::onnx::proto::{AttributeProto, GraphProto, TensorProto, attribute_type};

fn find_attr<'a>(n: &'a Node<'_>, name: &str) -> Option<&'a AttributeProto> {
    n.proto.attribute.iter().find(|a| a.name == name)
}

fn typed<'a>(n: &'a Node<'_>, name: &str, ty: i32) -> NResult<Option<&'a AttributeProto>> {
    match find_attr(n, name) {
        None => Ok(None),
        Some(a) if a.r#type == ty || a.r#type == attribute_type::UNDEFINED => Ok(Some(a)),
        Some(a) => Err(invalid(format!(
            "attribute {name} must be {}, got {}",
            attribute_type::name(ty),
            attribute_type::name(a.r#type)
        ))),
    }
}

pub(super) fn attr_int(n: &Node<'_>, name: &str) -> NResult<Option<i64>> {
    Ok(typed(n, name, attribute_type::INT)?.map(|a| a.i))
}

pub(super) fn attr_float(n: &Node<'_>, name: &str) -> NResult<Option<f32>> {
    Ok(typed(n, name, attribute_type::FLOAT)?.map(|a| a.f))
}

pub(super) fn attr_string(n: &Node<'_>, name: &str) -> NResult<Option<String>> {
    Ok(typed(n, name, attribute_type::STRING)?.map(|a| String::from_utf8_lossy(&a.s).into_owned()))
}

/// The strings of a `strings` attribute (each UTF-8).
pub(super) fn attr_strings(n: &Node<'_>, name: &str) -> NResult<Option<Vec<String>>> {
    let Some(a) = typed(n, name, attribute_type::STRINGS)? else {
        return Ok(None);
    };
    a.strings
        .iter()
        .map(|s| {
            String::from_utf8(s.clone())
                .map_err(|_| invalid(format!("attribute {name} is not UTF-8")))
        })
        .collect::<NResult<Vec<_>>>()
        .map(Some)
}

pub(super) fn attr_ints(n: &Node<'_>, name: &str) -> NResult<Option<Vec<i64>>> {
    Ok(typed(n, name, attribute_type::INTS)?.map(|a| a.ints.clone()))
}

pub(super) fn attr_floats(n: &Node<'_>, name: &str) -> NResult<Option<Vec<f32>>> {
    Ok(typed(n, name, attribute_type::FLOATS)?.map(|a| a.floats.clone()))
}

pub(super) fn attr_tensor<'a>(n: &'a Node<'_>, name: &str) -> NResult<Option<&'a TensorProto>> {
    match typed(n, name, attribute_type::TENSOR)? {
        None => Ok(None),
        Some(a) => {
            a.t.as_ref()
                .map(Some)
                .ok_or_else(|| invalid(format!("attribute {name} holds no tensor")))
        }
    }
}

/// A graph attribute (a branch of `If`, the body of `Loop`).
pub(super) fn attr_graph<'a>(n: &'a Node<'_>, name: &str) -> NResult<Option<&'a GraphProto>> {
    match typed(n, name, attribute_type::GRAPH)? {
        None => Ok(None),
        Some(a) => {
            a.g.as_deref()
                .map(Some)
                .ok_or_else(|| invalid(format!("attribute {name} holds no graph")))
        }
    }
}

/// A boolean (0/1) integer attribute.
pub(super) fn attr_flag(n: &Node<'_>, name: &str, default: bool) -> NResult<bool> {
    match attr_int(n, name)? {
        None => Ok(default),
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        Some(v) => Err(invalid(format!("attribute {name} must be 0 or 1, got {v}"))),
    }
}

pub(super) fn to_u32(v: i64, what: &str) -> NResult<u32> {
    u32::try_from(v).map_err(|_| invalid(format!("{what} {v} is out of range")))
}

pub(super) fn positive_u32(v: i64, what: &str) -> NResult<u32> {
    match u32::try_from(v) {
        Ok(x) if x >= 1 => Ok(x),
        _ => Err(invalid(format!("{what} must be at least 1, got {v}"))),
    }
}

/// A 2-element attribute of values >= 1 (strides, dilations), `[y, x]`.
pub(super) fn pair(n: &Node<'_>, name: &str) -> NResult<[u32; 2]> {
    match attr_ints(n, name)? {
        None => Ok([1, 1]),
        Some(v) if v.len() == 2 => Ok([positive_u32(v[0], name)?, positive_u32(v[1], name)?]),
        Some(v) => Err(invalid(format!(
            "{name} must have 2 values for a 2-D window, got {v:?}"
        ))),
    }
}

pub(super) fn normalize_axis(axis: i64, rank: usize) -> NResult<usize> {
    shapes::normalize_axis(axis, rank).map_err(invalid)
}

/// Normalised, sorted, distinct axes.
pub(super) fn distinct_axes(axes: &[i64], rank: usize) -> NResult<Vec<usize>> {
    let mut out = axes
        .iter()
        .map(|&a| normalize_axis(a, rank))
        .collect::<NResult<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(invalid(format!("axes {axes:?} repeat an axis")));
    }
    Ok(out)
}
