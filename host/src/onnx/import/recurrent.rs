//! `LSTM` in the form Backend API 1.5's `Lstm` layer computes: `layout` 0, the default
//! activations (`Sigmoid`, `Tanh`, `Tanh` per direction, without parameters), no `clip`, no
//! peepholes, `input_forget` 0, every sequence its full length, Float32 or Float64, and its
//! `Y_c` unused. An absent bias or initial state is a constant of zeros; `Y_h` is the slice of
//! `Y` at each direction's last step. Every other form is unrolled over the sequence
//! (`expand/recurrent.rs`).

use backplane_api::{
    ConcatDescriptor, ConstTensor, DataType, LayerDescriptor, LstmDescriptor, RecurrentDirection,
    ReshapeDescriptor, SliceDescriptor,
};

use super::{
    Importer, NResult, Node, Value,
    attributes::{attr_float, attr_floats, attr_int, attr_string, attr_strings},
    unsupported,
};

/// What an `LSTM` node the layer computes is: its direction, hidden size, `[seq, batch,
/// input]` and element type.
struct Form {
    direction: RecurrentDirection,
    hidden: u32,
    x: [u32; 3],
    data_type: DataType,
}

/// Whether `LSTM` node `n` is unrolled (`expand/recurrent.rs`) rather than one `Lstm` layer.
pub(super) fn is_unrolled_lstm(im: &Importer, n: &Node<'_>) -> bool {
    im.lstm_form(n).is_err()
}

impl Importer {
    /// `n`'s [`Form`], or why the layer does not compute it.
    fn lstm_form(&self, n: &Node<'_>) -> NResult<Form> {
        let refuse = |why: &str| Err(unsupported(format!("LSTM {why} (unrolled instead)")));
        let direction = match attr_string(n, "direction")?.as_deref() {
            None | Some("forward") => RecurrentDirection::Forward,
            Some("reverse") => RecurrentDirection::Reverse,
            Some("bidirectional") => RecurrentDirection::Bidirectional,
            Some(_) => return refuse("of another direction"),
        };
        if attr_int(n, "layout")?.unwrap_or(0) != 0
            || attr_int(n, "input_forget")?.unwrap_or(0) != 0
            || attr_float(n, "clip")?.is_some()
            || attr_floats(n, "activation_alpha")?.is_some()
            || attr_floats(n, "activation_beta")?.is_some()
        {
            return refuse("with layout 1, input_forget, clip or activation parameters");
        }
        if let Some(acts) = attr_strings(n, "activations")? {
            let default = ["sigmoid", "tanh", "tanh"];
            let all_default = acts.len() == 3 * direction.count()
                && acts
                    .iter()
                    .enumerate()
                    .all(|(i, a)| a.eq_ignore_ascii_case(default[i % 3]));
            if !all_default {
                return refuse("with other activations");
            }
        }
        let used = |i: usize| {
            n.proto
                .output
                .get(i)
                .is_some_and(|o| !o.is_empty() && self.q_targets.is_read(o))
        };
        let given = |i: usize| n.proto.input.get(i).is_some_and(|o| !o.is_empty());
        if used(2) || given(7) {
            return refuse("with peepholes or its Y_c read");
        }
        let (_, xv) = self.req(n, 0)?;
        let xs = self.shape(&xv)?;
        let Ok(x) = <[u32; 3]>::try_from(xs.as_slice()) else {
            return refuse("of an input that is not 3-D");
        };
        if given(4) {
            match self.arg(n, 4)? {
                Some((_, Value::I64(c))) if c.data.iter().all(|&l| l == i64::from(x[0])) => {}
                _ => return refuse("with sequence lengths"),
            }
        }
        let data_type = self.data_type(&xv)?;
        if !matches!(data_type, DataType::Float32 | DataType::Float64) {
            return refuse("of a type other than Float32 and Float64");
        }
        let hidden = match attr_int(n, "hidden_size")? {
            Some(h) if h > 0 => u32::try_from(h).map_err(|_| unsupported("hidden_size"))?,
            _ => return refuse("without a hidden_size"),
        };
        Ok(Form {
            direction,
            hidden,
            x,
            data_type,
        })
    }

    /// `LSTM` as one `Lstm` layer ([`Form`]); `Y_h` sliced from its `Y`.
    pub(super) fn lstm(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let f = self.lstm_form(n)?;
        let [seq, batch, _] = f.x;
        let (dirs, h) = (f.direction.count() as u32, f.hidden);
        let zeros = |im: &mut Self, what: &str, shape: &[u32]| -> NResult<_> {
            let count: u32 = shape.iter().product();
            let c = match f.data_type {
                DataType::Float64 => ConstTensor::from_elements(shape, &vec![0f64; count as usize]),
                _ => ConstTensor::from_elements(shape, &vec![0f32; count as usize]),
            };
            let name = im.unique(&format!("{}/{what}", n.name));
            Ok(im.builder.add_constant(&name, c)?)
        };
        let mut inputs = Vec::new();
        for (slot, what, shape) in [
            (0, "x", vec![]),
            (1, "w", vec![]),
            (2, "r", vec![]),
            (3, "bias", vec![dirs, 8 * h]),
            (5, "initial_h", vec![dirs, batch, h]),
            (6, "initial_c", vec![dirs, batch, h]),
        ] {
            inputs.push(match self.arg(n, slot)? {
                Some((name, v)) => self.tensor(&name, &v)?,
                None if !shape.is_empty() => zeros(self, what, &shape)?,
                None => return Err(unsupported(format!("LSTM without {what}"))),
            });
        }
        let d = LayerDescriptor::Lstm(LstmDescriptor {
            hidden_size: h,
            direction: f.direction,
        });
        let y = self.layer(n, None, d, &inputs)?;
        if !n
            .proto
            .output
            .get(1)
            .is_some_and(|o| !o.is_empty() && self.q_targets.is_read(o))
        {
            return Ok(vec![Value::Tensor(y)]);
        }
        // Y_h: direction d's h after its last step (step seq - 1 forward, 0 in reverse).
        let mut last = Vec::new();
        for d in 0..dirs {
            let reverse = f.direction == RecurrentDirection::Reverse || d == 1;
            let t = if reverse { 0 } else { seq - 1 };
            let s = LayerDescriptor::Slice(SliceDescriptor {
                begin: vec![t, d, 0, 0].into(),
                step: vec![1; 4].into(),
                size: vec![1, 1, batch, h].into(),
            });
            let s = self.layer(n, Some("y_h"), s, &[y])?;
            let r = LayerDescriptor::Reshape(ReshapeDescriptor {
                target_shape: vec![1, batch, h].into(),
            });
            last.push(self.layer(n, Some("y_h"), r, &[s])?);
        }
        let yh = if let [one] = last[..] {
            one
        } else {
            let c = LayerDescriptor::Concat(ConcatDescriptor { axis: 0 });
            self.layer(n, Some("y_h"), c, &last)?
        };
        Ok(vec![Value::Tensor(y), Value::Tensor(yh)])
    }
}
