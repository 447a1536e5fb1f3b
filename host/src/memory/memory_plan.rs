//! Planning intermediate tensor memory by lifetime: a tensor's buffer is reused once its last
//! reader has run.

/// What the planner needs to know about one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorLife {
    /// Bytes needed.
    pub bytes: usize,
    /// Step (layer index) that writes it.
    pub defined: usize,
    /// Last step that reads it (`defined` if nobody does).
    pub last_use: usize,
    /// Never shared or reused: constants (written once at load), network inputs (copied in
    /// before the first step) and tensors read by network outputs (copied out after the last).
    pub pinned: bool,
}

/// The plan: a buffer per tensor, and the buffers' sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Buffer index of each tensor (same order as the input).
    pub buffer_of: Vec<usize>,
    /// Size of each buffer in bytes.
    pub buffer_sizes: Vec<usize>,
}

impl MemoryPlan {
    /// Bytes of all buffers (the planned peak).
    pub fn peak_bytes(&self) -> usize {
        self.buffer_sizes
            .iter()
            .fold(0usize, |n, &b| n.saturating_add(b))
    }
}

/// Plans buffers for `tensors`, which must be listed in definition order. A tensor gets the
/// smallest free buffer that fits, or a new one; a buffer becomes free after the step that
/// last reads its tensor, so a layer never writes into a buffer it reads.
pub fn plan(tensors: &[TensorLife]) -> MemoryPlan {
    let mut buffer_sizes: Vec<usize> = Vec::new();
    let mut buffer_of = Vec::with_capacity(tensors.len());
    // (free after this step, buffer)
    let mut busy: Vec<(usize, usize)> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    for t in tensors {
        busy.retain(|&(until, buffer)| {
            let done = until < t.defined;
            if done {
                free.push(buffer);
            }
            !done
        });
        let fit = if t.pinned {
            None
        } else {
            free.iter()
                .enumerate()
                .filter(|(_, b)| buffer_sizes[**b] >= t.bytes)
                .min_by_key(|(_, b)| buffer_sizes[**b])
                .map(|(i, _)| i)
        };
        let buffer = match fit {
            Some(i) => free.swap_remove(i),
            None => {
                buffer_sizes.push(t.bytes);
                buffer_sizes.len() - 1
            }
        };
        if !t.pinned {
            busy.push((t.last_use, buffer));
        }
        buffer_of.push(buffer);
    }
    MemoryPlan {
        buffer_of,
        buffer_sizes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(bytes: usize, defined: usize, last_use: usize) -> TensorLife {
        TensorLife {
            bytes,
            defined,
            last_use,
            pinned: false,
        }
    }

    #[test]
    fn chain_reuses_two_buffers() {
        // a -> b -> c -> d, each read only by the next.
        let p = plan(&[
            life(100, 0, 1),
            life(100, 1, 2),
            life(100, 2, 3),
            life(100, 3, 3),
        ]);
        assert_eq!(p.buffer_of, vec![0, 1, 0, 1]);
        assert_eq!(p.peak_bytes(), 200);
    }

    #[test]
    fn a_layer_never_writes_what_it_reads_and_pins_stay() {
        // t0 read at steps 1 and 2; t1 read at 2; t2 (step 2) must not reuse t0 or t1.
        let mut ts = vec![life(64, 0, 2), life(64, 1, 2), life(64, 2, 3)];
        ts.insert(
            0,
            TensorLife {
                bytes: 32,
                defined: 0,
                last_use: 0,
                pinned: true,
            },
        );
        let p = plan(&ts);
        assert_eq!(p.buffer_of, vec![0, 1, 2, 3]);
        // After step 2 both are free; a later tensor takes the smallest that fits.
        ts.push(life(10, 3, 4));
        let p = plan(&ts);
        assert_eq!(p.buffer_of[4], 1);
        assert!(
            !p.buffer_of[1..].contains(&0),
            "the pinned buffer is never reused"
        );
    }
}
