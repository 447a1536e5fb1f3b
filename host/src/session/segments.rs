//! Running a model whose shapes depend on values computed at run time: its plan is the first
//! segment ([`onnx::Instance::Cut`]); each run runs it, keeps the values it computed, and takes
//! the next segment's plan from the segment's own cache, keyed by what decides it
//! ([`onnx::Resume::key`]: the deciding values and the shapes carried over), or makes it
//! (import from the [`onnx::Resume`], optimise, load) — until the last segment, whose outputs
//! are the model's. A run at values already seen makes nothing: it runs one plan per segment.

use std::{
    borrow::Cow,
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
};

use backplane_api::TensorInfo;

use super::{OwnedTensor, Plan};
use crate::memory::budget::MemoryBudget;
use crate::{
    exec::{ExecuteError, InputTensor, OutputTensor},
    graph::{network::Network, optimizer::OptimizerOptions},
    onnx,
    runtime::ScratchMemory,
};

/// The most plans one segment keeps for the segment after it (least recently used dropped).
pub const NEXT_PLANS: usize = 16;

/// What a session makes a segment's plan with.
#[derive(Debug)]
pub(super) struct Context {
    pub(super) preferences: Vec<String>,
    pub(super) optimizer: OptimizerOptions,
    pub(super) scratch: ScratchMemory,
    /// The memory budget of each segment's load, in bytes.
    pub(super) max_memory: u64,
}

/// A plan's place in a dynamic model.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Its network's inputs: (input layer name, key of the value).
    pub(super) inputs: Vec<(String, String)>,
    /// What follows (none for the last segment).
    pub(super) tail: Option<Tail>,
}

/// What follows a segment that is not the last.
#[derive(Debug)]
pub(crate) struct Tail {
    /// Its network's outputs: (output layer name, key the value is kept under).
    outputs: Vec<(String, String)>,
    next: Box<onnx::Resume>,
    context: Arc<Context>,
    /// The next segment's plans, by key, most recently used first.
    plans: Mutex<VecDeque<(Vec<u8>, Arc<Plan>)>>,
}

/// The values of one run, by key: the caller's inputs (borrowed, not copied), then what each
/// segment computed.
type Values<'a> = HashMap<String, (Cow<'a, TensorInfo>, Cow<'a, [u8]>)>;

impl Segment {
    /// The network of `instance`, and its place in the model.
    pub(super) fn split(instance: onnx::Instance, context: &Arc<Context>) -> (Network, Self) {
        match instance {
            onnx::Instance::Complete { network, inputs } => (network, Self { inputs, tail: None }),
            onnx::Instance::Cut {
                network,
                inputs,
                outputs,
                next,
            } => (
                network,
                Self {
                    inputs,
                    tail: Some(Tail {
                        outputs,
                        next,
                        context: context.clone(),
                        plans: Mutex::default(),
                    }),
                },
            ),
        }
    }
}

impl Plan {
    /// Runs the segments from this one to the last, and returns the model's outputs.
    pub(super) fn run_segments(
        &self,
        inputs: &[InputTensor<'_>],
    ) -> Result<Vec<OwnedTensor>, ExecuteError> {
        let mut values: Values = inputs
            .iter()
            .map(|t| {
                (
                    t.name.to_owned(),
                    (Cow::Borrowed(t.info), Cow::Borrowed(t.data)),
                )
            })
            .collect();
        let mut next = match self.run_segment(&mut values)? {
            Ok(outputs) => return Ok(outputs),
            Err(next) => next,
        };
        loop {
            next = match next.run_segment(&mut values)? {
                Ok(outputs) => return Ok(outputs),
                Err(n) => n,
            };
        }
    }

    /// [`Plan::run_segments`] into the caller's buffers, which must have the shapes the
    /// outputs have at this run.
    pub(super) fn run_segments_into(
        &self,
        inputs: &[InputTensor<'_>],
        outputs: &mut [OutputTensor<'_>],
    ) -> Result<(), ExecuteError> {
        let got = self.run_segments(inputs)?;
        for out in outputs.iter_mut() {
            let Some(t) = got.iter().find(|t| t.name == out.name) else {
                return Err(ExecuteError::Binding(format!(
                    "no network output named {:?}",
                    out.name
                )));
            };
            if t.info.shape != out.info.shape || t.info.data_type != out.info.data_type {
                return Err(ExecuteError::Binding(format!(
                    "output {}: this run computed {} (the model's shapes depend on its \
                     values), the buffer given is for {}",
                    out.name, t.info, out.info
                )));
            }
            if out.data.len() != t.data.len() {
                return Err(ExecuteError::Binding(format!(
                    "output {}: {} bytes given for {} bytes",
                    out.name,
                    out.data.len(),
                    t.data.len()
                )));
            }
            out.data.copy_from_slice(&t.data);
        }
        Ok(())
    }

    /// Runs this segment on `values`: the model's outputs when it is the last, else the plan
    /// of the next segment (with the values this one computed added).
    fn run_segment(
        &self,
        values: &mut Values<'_>,
    ) -> Result<Result<Vec<OwnedTensor>, Arc<Plan>>, ExecuteError> {
        let segment = self.segment.as_ref().ok_or_else(|| {
            ExecuteError::Binding("a plan that is not a segment run as one".to_owned())
        })?;
        let missing = |key: &str| ExecuteError::Segment {
            node: String::new(),
            message: format!("the value {key} is not available"),
        };
        let bound = segment
            .inputs
            .iter()
            .map(|(layer, key)| {
                let (info, data) = values.get(key).ok_or_else(|| missing(key))?;
                Ok(InputTensor {
                    name: layer,
                    info,
                    data,
                })
            })
            .collect::<Result<Vec<_>, ExecuteError>>()?;
        let buffers = self.run_network(&bound)?;
        drop(bound);
        let Some(tail) = &segment.tail else {
            return Ok(Ok(self.owned(buffers)));
        };
        for ((layer, info), data) in self.outputs().iter().zip(buffers) {
            if let Some((_, key)) = tail.outputs.iter().find(|(l, _)| l == layer) {
                values.insert(key.clone(), (Cow::Owned(info.clone()), Cow::Owned(data)));
            }
        }
        Ok(Err(tail.next_plan(self, values)?))
    }
}

impl Tail {
    /// The next segment's plan for these values: cached, or made now.
    fn next_plan(&self, plan: &Plan, values: &Values<'_>) -> Result<Arc<Plan>, ExecuteError> {
        let (node, op) = self.next.at();
        let failed = |message: String| ExecuteError::Segment {
            node: format!("{node} ({op})"),
            message,
        };
        let lookup = |k: &str| values.get(k).map(|(i, d)| (i.as_ref(), d.as_ref()));
        let key = self.next.key(lookup).map_err(|e| failed(e.to_string()))?;
        {
            let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(k) = plans.iter().position(|(have, _)| *have == key)
                && let Some(entry) = plans.remove(k)
            {
                let found = entry.1.clone();
                plans.push_front(entry);
                return Ok(found);
            }
        }
        let start = std::time::Instant::now();
        // One budget for this segment's load: what the importer folds for it, then its plan.
        let budget = std::sync::Arc::new(MemoryBudget::new(self.context.max_memory));
        let instance = self
            .next
            .resume(lookup, Some(budget.clone()))
            .map_err(|e| failed(e.to_string()))?;
        let (network, segment) = Segment::split(instance, &self.context);
        let prefs: Vec<&str> = self
            .context
            .preferences
            .iter()
            .map(String::as_str)
            .collect();
        let runtime = plan.runtime.clone();
        let optimized = runtime
            .optimize(&network, &prefs, &self.context.optimizer)
            .map_err(|e| failed(e.to_string()))?;
        let mut next = Plan::load(runtime, optimized, &self.context.scratch, &budget)?;
        next.segment = Some(segment);
        let next = Arc::new(next);
        log::debug!(
            "segment after {node} ({op}) made in {:.1} ms for the values of this run",
            start.elapsed().as_secs_f64() * 1e3
        );
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.push_front((key, next.clone()));
        plans.truncate(NEXT_PLANS);
        Ok(next)
    }

    /// The plans made so far for the next segment, most recently used first.
    pub(crate) fn plans(&self) -> Vec<Arc<Plan>> {
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// The node the next segment starts at: (name, operator).
    pub(crate) fn at(&self) -> (&str, &str) {
        self.next.at()
    }
}
