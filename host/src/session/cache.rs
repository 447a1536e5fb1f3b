//! The plans a session keeps: the input shapes of a run fitted to the declared ones (rank,
//! fixed dimensions, one size per symbolic name), and per set of shapes a plan, made on the
//! first run at those shapes and kept within [`CacheLimits`](super::CacheLimits), least
//! recently used dropped first.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
};

use super::{CacheLimits, Plan, Session, SessionError, Source};
use crate::memory::budget::MemoryBudget;
use crate::onnx::{self, DeclaredTensor, Dim, ImportError};

/// The plans a session keeps, most recently used first, with the shapes (in the order of
/// [`Session::inputs`]) each was made for.
#[derive(Debug, Default)]
pub(super) struct Cache {
    pub(super) plans: VecDeque<(Vec<Vec<u32>>, Arc<Plan>)>,
}

impl Cache {
    /// The plan of `shapes`, moved to the front (most recently used), if cached.
    pub(super) fn touch(&mut self, shapes: &[Vec<u32>]) -> Option<Arc<Plan>> {
        let k = self.plans.iter().position(|(s, _)| *s == shapes)?;
        let entry = self.plans.remove(k)?;
        let plan = entry.1.clone();
        self.plans.push_front(entry);
        Some(plan)
    }
}

/// What a session's plan cache holds now ([`Session::cache_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheStats {
    /// Plans kept.
    pub entries: usize,
    /// Their bytes (see [`CacheLimits`]).
    pub bytes: u64,
    /// The limits.
    pub limits: CacheLimits,
    /// Each plan's input shapes, by input name, most recently used first.
    pub shapes: Vec<Vec<(String, Vec<u32>)>>,
}

impl Session {
    /// The shapes of the plan made at load: every input's declared dimensions when they are
    /// fixed, a leading symbolic (batch) dimension taken as 1; `None` when another dimension
    /// is symbolic or an input has no declared shape.
    pub(super) fn first_shapes(&self) -> Option<Vec<Vec<u32>>> {
        self.inputs
            .iter()
            .map(|i| {
                let dims = i.dims.as_ref()?;
                dims.iter()
                    .enumerate()
                    .map(|(k, d)| match d {
                        Dim::Fixed(v) => Some(*v),
                        _ if k == 0 => {
                            log::info!(
                                "input {} is declared {}: its batch dimension is taken as 1 \
                                 for the plan made at load",
                                i.name,
                                i.dims_text()
                            );
                            Some(1)
                        }
                        _ => None,
                    })
                    .collect()
            })
            .collect()
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The plan of the latest run (or the one made at load), if any.
    pub fn current(&self) -> Option<Arc<Plan>> {
        self.lock().plans.front().map(|(_, p)| p.clone())
    }

    /// The plan of the latest run, or an error saying which input's shape must be given
    /// first ([`ImportError::SymbolicInput`]).
    ///
    /// # Errors
    /// No plan yet: the first input whose shape is not known.
    pub fn current_or_shapes_needed(&self) -> Result<Arc<Plan>, SessionError> {
        if let Some(plan) = self.current() {
            return Ok(plan);
        }
        let input = self
            .inputs
            .iter()
            .find(|i| !i.is_fixed())
            .or(self.inputs.first());
        Err(ImportError::SymbolicInput {
            input: input.map(|i| i.name.clone()).unwrap_or_default(),
            declared: input.map(DeclaredTensor::dims_text).unwrap_or_default(),
        }
        .into())
    }

    /// What the plan cache holds now.
    pub fn cache_stats(&self) -> CacheStats {
        let cache = self.lock();
        CacheStats {
            entries: cache.plans.len(),
            bytes: cache.plans.iter().map(|(_, p)| p.bytes()).sum::<u64>()
                + self.scratch.bytes() as u64,
            limits: self.options.cache,
            shapes: cache
                .plans
                .iter()
                .map(|(shapes, _)| {
                    self.inputs
                        .iter()
                        .zip(shapes)
                        .map(|(i, s)| (i.name.clone(), s.clone()))
                        .collect()
                })
                .collect(),
        }
    }

    /// The input shapes in the order of [`Session::inputs`], checked against the declared
    /// ones.
    pub(super) fn fit(&self, given: &[(&str, &[u32])]) -> Result<Vec<Vec<u32>>, SessionError> {
        let names = || {
            self.inputs
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
        };
        for (name, _) in given {
            if !self.inputs.iter().any(|i| i.name == *name) {
                return Err(SessionError::Input(format!(
                    "no network input named {name:?} (the network has {:?})",
                    names()
                )));
            }
        }
        let mut symbols: HashMap<&str, (u32, &str)> = HashMap::new();
        let mut shapes = Vec::with_capacity(self.inputs.len());
        for input in &self.inputs {
            let Some((_, shape)) = given.iter().find(|(n, _)| *n == input.name) else {
                return Err(SessionError::Input(format!(
                    "network input {} is not bound",
                    input.name
                )));
            };
            if let Some(dims) = &input.dims {
                if dims.len() != shape.len() {
                    return Err(SessionError::Input(format!(
                        "input {}: got rank {} ({shape:?}), the model requires rank {}: {}",
                        input.name,
                        shape.len(),
                        dims.len(),
                        input.dims_text()
                    )));
                }
                for (k, (d, &v)) in dims.iter().zip(shape.iter()).enumerate() {
                    match d {
                        Dim::Fixed(want) if *want != v => {
                            return Err(SessionError::Input(format!(
                                "input {}: dimension {k} is {v}, the model requires {want} \
                                 (declared {})",
                                input.name,
                                input.dims_text()
                            )));
                        }
                        // "?" is PaddlePaddle's name for any unknown dimension.
                        Dim::Named(sym) if sym == "?" => {}
                        Dim::Named(sym) => match symbols.get(sym.as_str()) {
                            Some(&(size, other)) if size != v => {
                                return Err(SessionError::Input(format!(
                                    "input {}: dimension {k} ({sym}) is {v}, but input {other} \
                                     has {sym} = {size}",
                                    input.name
                                )));
                            }
                            Some(_) => {}
                            None => {
                                symbols.insert(sym, (v, &input.name));
                            }
                        },
                        _ => {}
                    }
                }
            }
            shapes.push(shape.to_vec());
        }
        Ok(shapes)
    }

    /// The plan for these input shapes (every input by name): the cached one, or one made,
    /// loaded and cached now.
    ///
    /// # Errors
    /// [`SessionError::Input`] for shapes that do not fit the declared ones,
    /// [`SessionError::Shape`] when the model cannot run at them.
    pub fn plan(&self, given: &[(&str, &[u32])]) -> Result<Arc<Plan>, SessionError> {
        let shapes = self.fit(given)?;
        if let Some(plan) = self.lock().touch(&shapes) {
            return Ok(plan);
        }
        self.make_plan(shapes, given, true)
    }

    /// Makes, caches and returns the plan for `shapes` (the order of [`Session::inputs`]);
    /// with `at_shape`, an import that fails is a [`SessionError::Shape`] naming them.
    pub(super) fn make_plan(
        &self,
        shapes: Vec<Vec<u32>>,
        given: &[(&str, &[u32])],
        at_shape: bool,
    ) -> Result<Arc<Plan>, SessionError> {
        let plan = self.build(&shapes).map_err(|error| {
            // An import that fails at these shapes is theirs (a size that makes a layer
            // invalid); an optimiser's or a backend's refusal is not.
            if !at_shape || !matches!(error, SessionError::Import(_)) {
                return error;
            }
            SessionError::Shape {
                shapes: given
                    .iter()
                    .map(|(n, s)| format!("{n}={s:?}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                error: Box::new(error),
            }
        })?;
        let mut cache = self.lock();
        // Another thread may have made the same plan meanwhile: keep one.
        if let Some(kept) = cache.touch(&shapes) {
            return Ok(kept);
        }
        cache.plans.push_front((shapes, plan.clone()));
        let limits = self.options.cache;
        let mut bytes: u64 =
            cache.plans.iter().map(|(_, p)| p.bytes()).sum::<u64>() + self.scratch.bytes() as u64;
        while cache.plans.len() > limits.entries.max(1)
            || (bytes > limits.bytes && cache.plans.len() > 1)
        {
            if let Some((old, dropped)) = cache.plans.pop_back() {
                log::debug!(
                    "plan cache: dropping the plan of shapes {old:?} ({} bytes)",
                    dropped.bytes()
                );
                bytes -= dropped.bytes();
            }
        }
        Ok(plan)
    }

    /// The backend preferences plans are optimised for.
    fn preferences(&self) -> Vec<String> {
        if self.options.backends.is_empty() {
            self.runtime.default_preferences()
        } else {
            self.options.backends.clone()
        }
    }

    /// Imports (for a model), optimises and loads a plan for `shapes`.
    pub(super) fn build(&self, shapes: &[Vec<u32>]) -> Result<Arc<Plan>, SessionError> {
        let start = std::time::Instant::now();
        // One budget for this load: the import's folded and copied constants, then the
        // loaded network's memory.
        let budget = Arc::new(MemoryBudget::new(self.options.max_memory()));
        let imported;
        let mut segment = None;
        let network = match &self.source {
            Source::Compiled(optimized) => {
                let plan = Plan::load(
                    self.runtime.clone(),
                    (**optimized).clone(),
                    &self.scratch,
                    &budget,
                )?;
                log::debug!(
                    "plan of a compiled network loaded in {:.1} ms ({} bytes)",
                    start.elapsed().as_secs_f64() * 1e3,
                    plan.bytes()
                );
                return Ok(Arc::new(plan));
            }
            Source::Network(n) => n,
            Source::Model(m) => {
                let import = onnx::ImportOptions {
                    input_shapes: self
                        .inputs
                        .iter()
                        .zip(shapes)
                        .map(|(i, s)| (i.name.clone(), s.clone()))
                        .collect(),
                    memory: Some(budget.clone()),
                    ..onnx::ImportOptions::default()
                };
                let instance = m.instantiate_dynamic(&import)?;
                let context = std::sync::Arc::new(super::segments::Context {
                    preferences: self.preferences(),
                    optimizer: self.options.optimizer.clone(),
                    scratch: self.scratch.clone(),
                    max_memory: self.options.max_memory(),
                });
                let (network, s) = super::segments::Segment::split(instance, &context);
                if s.tail.is_some() {
                    segment = Some(s);
                }
                imported = network;
                &imported
            }
        };
        let preferences = self.preferences();
        let prefs: Vec<&str> = preferences.iter().map(String::as_str).collect();
        let imported_at = start.elapsed();
        let optimized = self
            .runtime
            .optimize(network, &prefs, &self.options.optimizer)?;
        let optimized_at = start.elapsed();
        let mut plan = Plan::load(self.runtime.clone(), optimized, &self.scratch, &budget)?;
        plan.segment = segment;
        log::debug!(
            "plan for shapes {shapes:?}: imported in {:.1} ms, optimised in {:.1} ms, loaded in \
             {:.1} ms ({} bytes)",
            imported_at.as_secs_f64() * 1e3,
            (optimized_at - imported_at).as_secs_f64() * 1e3,
            (start.elapsed() - optimized_at).as_secs_f64() * 1e3,
            plan.bytes()
        );
        Ok(Arc::new(plan))
    }
}
