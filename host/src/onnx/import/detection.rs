//! The detection operators: `NonMaxSuppression` is Backend API 1.5's layer of the same name
//! (its three scalar inputs known at import, or given by a run: a session runs the model in
//! segments), imported in steps as `NonZero` is (its result's extent is the count the layer
//! writes); `RoiAlign` is the 1.5 layer of the same name.

use backplane_api::{
    DataType, LayerDescriptor, NonMaxSuppressionDescriptor, RoiAlignDescriptor, RoiPooling,
};

use super::{
    Importer, NResult, Node, NodeError, Value,
    attributes::{attr_float, attr_int, attr_string},
    invalid,
    queue::Pending,
    unsupported,
};

impl Importer {
    /// Optional scalar input `i` of `n` as a number (`None` when absent or empty), which must
    /// be known: a constant, or a value a run gives (the import then stops before `n` until a
    /// session has run the nodes before it).
    fn known_scalar(&self, n: &Node<'_>, i: usize, what: &str) -> NResult<Option<f64>> {
        let Some((name, v)) = self.arg(n, i)? else {
            return Ok(None);
        };
        let data: Vec<f64> = match v {
            Value::F32(c) => c.data.iter().map(|&v| f64::from(v)).collect(),
            // Exact for every count a model can mean (below 2^53).
            #[allow(clippy::cast_precision_loss)]
            // reason: the scalar is a count or a threshold
            Value::I64(c) => c.data.iter().map(|&v| v as f64).collect(),
            Value::Tensor(_) => {
                return Err(NodeError::NeedsValue {
                    message: format!(
                        "{what} ({name}) is computed at run time (a session runs the model in \
                         segments)"
                    ),
                    names: vec![name],
                });
            }
            _ => return Err(unsupported(format!("{what} ({name}) is not available"))),
        };
        match data.as_slice() {
            [] => Ok(None),
            [v] => Ok(Some(*v)),
            _ => Err(invalid(format!(
                "{what} ({name}) has {} elements, not one",
                data.len()
            ))),
        }
    }

    /// `NonMaxSuppression`: Backend API 1.5's layer, its result sliced to the count a run
    /// gives ([`Importer::counted`]).
    pub(super) fn non_max_suppression(&mut self, n: &Node<'_>) -> NResult<Vec<Pending>> {
        let center_point_box = match attr_int(n, "center_point_box")?.unwrap_or(0) {
            0 => false,
            1 => true,
            v => return Err(invalid(format!("center_point_box {v}: must be 0 or 1"))),
        };
        let max = self
            .known_scalar(n, 2, "max_output_boxes_per_class")?
            .unwrap_or(0.0);
        if max <= 0.0 {
            return Err(unsupported(
                "max_output_boxes_per_class is 0: NonMaxSuppression selects nothing, and empty \
                 tensors are not supported yet",
            ));
        }
        // Float to integer saturates: any count above the boxes' number means all of them.
        let max = max.min(f64::from(u32::MAX)) as u32;
        let iou = self.known_scalar(n, 3, "iou_threshold")?.unwrap_or(0.0);
        let score = self
            .known_scalar(n, 4, "score_threshold")?
            .unwrap_or(f64::NEG_INFINITY);
        let (boxes_name, boxes) = self.req(n, 0)?;
        let (scores_name, scores) = self.req(n, 1)?;
        let boxes = self.tensor(&boxes_name, &boxes)?;
        let scores = self.tensor(&scores_name, &scores)?;
        // Thresholds are f32 in the model (ONNX's tensor(float)): exact.
        #[allow(clippy::cast_possible_truncation)]
        // reason: the thresholds were f32 values widened
        let d = NonMaxSuppressionDescriptor {
            center_point_box,
            max_output_boxes_per_class: max,
            iou_threshold: iou as f32,
            score_threshold: score as f32,
        };
        let padded = self.layer(
            n,
            Some("selected"),
            LayerDescriptor::NonMaxSuppression(d),
            &[boxes, scores],
        )?;
        self.counted(n, padded, 3, true)
    }

    /// `RoiAlign` (opsets 10 and 16): Backend API 1.5's layer. Opset 10 has no
    /// `coordinate_transformation_mode` and means `output_half_pixel`; opset 16's default is
    /// `half_pixel`.
    pub(super) fn roi_align(&mut self, n: &Node<'_>) -> NResult<Vec<Value>> {
        let mode = attr_string(n, "mode")?.unwrap_or_else(|| "avg".into());
        let pooling = match mode.as_str() {
            "avg" => RoiPooling::Average,
            "max" => RoiPooling::Max,
            m => return Err(invalid(format!("mode {m:?}: must be avg or max"))),
        };
        let default_transform = if self.opset >= 16 {
            "half_pixel"
        } else {
            "output_half_pixel"
        };
        let half_pixel = match attr_string(n, "coordinate_transformation_mode")?
            .as_deref()
            .unwrap_or(default_transform)
        {
            "half_pixel" => true,
            "output_half_pixel" => false,
            m => return Err(invalid(format!("coordinate_transformation_mode {m:?}"))),
        };
        let positive = |name: &str, default: i64| -> NResult<u32> {
            let v = attr_int(n, name)?.unwrap_or(default);
            u32::try_from(v).map_err(|_| invalid(format!("{name} {v}: must be 0 to 2^32 - 1")))
        };
        let d = RoiAlignDescriptor {
            pooling,
            output_height: positive("output_height", 1)?,
            output_width: positive("output_width", 1)?,
            sampling_ratio: positive("sampling_ratio", 0)?,
            spatial_scale: attr_float(n, "spatial_scale")?.unwrap_or(1.0),
            half_pixel,
        };
        let mut inputs = Vec::with_capacity(3);
        for i in 0..3 {
            let (name, v) = self.req(n, i)?;
            inputs.push(self.tensor(&name, &v)?);
        }
        let x_type = self.data_type(&Value::Tensor(inputs[0]))?;
        if !matches!(x_type, DataType::Float32 | DataType::Float64) {
            return Err(unsupported(format!(
                "RoiAlign of {x_type}: Float32 and Float64 (onnxruntime's types)"
            )));
        }
        let out = self.layer(n, None, LayerDescriptor::RoiAlign(d), &inputs)?;
        Ok(vec![Value::Tensor(out)])
    }
}
