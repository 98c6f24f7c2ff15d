//! A small model of PyTorch autograd's saved tensors, for transformer forwards written op by op
//! (see [`super::forward`]). Each op records what its backward node keeps, by the rules
//! measured in `shared/reference/autograd-saved-tensors.md` and `tools/llm/README.md`:
//!
//! - a backward node exists only when some input requires grad; `mul(a, b)` keeps `b` for `a`'s
//!   gradient and `a` for `b`'s; a linear layer keeps its input for the weight's gradient and the
//!   weight for the input's; unary ops keep their input (silu, gelu, pow) or their result (tanh,
//!   sigmoid, softmax, rsqrt);
//! - a saved tensor pins its whole storage, and a storage is counted once however many ops keep
//!   views of it (`q`, `k`, `v` split from one fused projection cost the fused output);
//! - CPU autocast lowers linear, matmul and attention to the half type: their inputs are cast
//!   (a new storage unless already half), weights get a cast copy (reported apart); everything
//!   else runs in the dtype it receives, with PyTorch's type promotion.
//!
//! Parameters, inputs and autocast weight copies are tracked but are not activations.

use crate::ir::DType;

/// What a storage holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Activation,
    Parameter,
    Input,
    /// Autocast's half copy of a weight.
    WeightCopy,
}

/// A tensor: the storage it views, its elements, its dtype and whether it requires grad.
#[derive(Clone, Copy, Debug)]
pub struct X {
    storage: usize,
    pub numel: u64,
    pub dtype: DType,
    pub grad: bool,
}

#[derive(Clone, Debug)]
struct Storage {
    bytes: u64,
    numel: u64,
    dtype: DType,
    kind: Kind,
    /// Requires grad (a trained parameter, or an activation on the gradient's path).
    grad: bool,
    saved: bool,
    /// Saved inside a checkpointed block: made again when backward reaches the block's last
    /// storage (this position), held until its own backward.
    recomputed_at: Option<usize>,
    /// The first and the last position that read it (a parameter's gradient is made at the
    /// last in backward; a second reader, as a tied embedding has, adds its contribution).
    first_read: Option<usize>,
    last_read: usize,
    /// Bytes of the gradients of the inputs of the op that made it (live in its backward).
    in_grad: u64,
}

/// The tape: every storage made by a forward, and which are saved for backward.
#[derive(Clone, Debug)]
pub struct Tape {
    storages: Vec<Storage>,
    /// `torch.autocast`'s half type, when on.
    pub autocast: Option<DType>,
    /// Off inside a checkpointed region: ops run, nothing is kept.
    pub recording: bool,
    /// Set when a size overflowed (the totals are then not to be trusted).
    pub overflow: bool,
    /// Where the current checkpointed block began (its storages are recomputed in backward).
    region: Option<usize>,
    /// The gradient bytes of the inputs the op being recorded read.
    pending_in_grad: u64,
    /// CUDA's kernels: dropout keeps a bool mask instead of the CPU's scaled noise.
    cuda: bool,
}

/// Bytes saved for backward, by what the storages hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedBytes {
    pub activation: u64,
    pub weight_copy: u64,
    pub storages: u64,
}

fn bytes_of(numel: u64, dtype: DType) -> Option<u64> {
    dtype.bytes_for(numel)
}

/// PyTorch's promotion for the float types the forwards mix.
fn promote(a: DType, b: DType) -> DType {
    use DType::*;
    match (a, b) {
        (x, y) if x == y => x,
        (F64, _) | (_, F64) => F64,
        (F32, _) | (_, F32) => F32,
        (BF16, F16) | (F16, BF16) => F32,
        (x, _) => x,
    }
}

impl Tape {
    pub fn new(autocast: Option<DType>) -> Tape {
        Tape {
            storages: Vec::new(),
            autocast,
            recording: true,
            overflow: false,
            region: None,
            pending_in_grad: 0,
            cuda: false,
        }
    }

    /// The tape of CUDA's kernels (`true`) or the CPU's.
    pub fn on_cuda(mut self, cuda: bool) -> Tape {
        self.cuda = cuda;
        self
    }

    fn alloc(&mut self, numel: u64, dtype: DType, grad: bool, kind: Kind) -> X {
        let bytes = bytes_of(numel, dtype).unwrap_or_else(|| {
            self.overflow = true;
            0
        });
        let pos = self.storages.len();
        let in_grad = if kind == Kind::Activation && grad {
            std::mem::take(&mut self.pending_in_grad)
        } else {
            0
        };
        self.storages.push(Storage {
            bytes,
            numel,
            dtype,
            kind,
            grad,
            saved: false,
            recomputed_at: None,
            first_read: None,
            last_read: pos,
            in_grad,
        });
        X {
            storage: self.storages.len() - 1,
            numel,
            dtype,
            grad,
        }
    }

    /// A new activation (an op's output).
    pub fn new_act(&mut self, numel: u64, dtype: DType, grad: bool) -> X {
        self.alloc(numel, dtype, grad, Kind::Activation)
    }

    pub fn param(&mut self, numel: u64, dtype: DType, trainable: bool) -> X {
        self.alloc(numel, dtype, trainable, Kind::Parameter)
    }

    pub fn input(&mut self, numel: u64, dtype: DType) -> X {
        self.alloc(numel, dtype, false, Kind::Input)
    }

    /// Keeps `x`'s storage for backward; inside a checkpointed block, marks it as made again
    /// in backward.
    pub fn save(&mut self, x: X) {
        let pos = self.storages.len();
        let st = &mut self.storages[x.storage];
        st.last_read = st.last_read.max(pos);
        if self.recording {
            st.saved = true;
        } else if st.recomputed_at.is_none() {
            st.recomputed_at = Some(usize::MAX);
        }
    }

    /// Records that the next op reads `xs`: a parameter's gradient is made in that op's
    /// backward (the last reader's), and the gradients of the inputs on the gradient's path
    /// are live while it runs.
    pub fn reads(&mut self, xs: &[X]) {
        let pos = self.storages.len();
        for x in xs {
            let st = &mut self.storages[x.storage];
            st.last_read = st.last_read.max(pos);
            st.first_read.get_or_insert(pos);
        }
        self.pending_in_grad = xs
            .iter()
            .filter(|x| x.grad && self.storages[x.storage].kind != Kind::Parameter)
            .fold(0u64, |s, x| {
                s.saturating_add(bytes_of(x.numel, x.dtype).unwrap_or(0))
            });
    }

    /// Starts a checkpointed block: nothing it makes is kept, and what it would keep is made
    /// again when backward reaches it.
    pub fn begin_recompute(&mut self) {
        self.recording = false;
        self.region = Some(self.storages.len());
    }

    /// Ends the block [`Tape::begin_recompute`] started.
    pub fn end_recompute(&mut self) {
        self.recording = true;
        let end = self.storages.len();
        if let Some(start) = self.region.take() {
            for st in &mut self.storages[start..end] {
                if st.recomputed_at == Some(usize::MAX) {
                    st.recomputed_at = Some(end - 1);
                }
            }
        }
    }

    /// Backward as [`crate::analysis::step::account`] walks it: one step per storage, from the
    /// last made to the first. A step's trained-parameter gradients appear at their last
    /// reader; its transient is the gradient of what it made and of the inputs it read; the
    /// saved storage is freed after it. Returns the steps and the trained elements they name.
    pub fn backward(&self) -> (Vec<crate::analysis::step::BackwardStep>, u64) {
        use crate::analysis::step::BackwardStep;
        let n = self.storages.len();
        let mut steps = vec![BackwardStep::default(); n];
        let mut named = 0u64;
        for (p, st) in self.storages.iter().enumerate() {
            match st.kind {
                Kind::Parameter if st.grad => {
                    let at = st.last_read.min(n.saturating_sub(1));
                    steps[at].grads = steps[at].grads.saturating_add(st.numel);
                    named = named.saturating_add(st.numel);
                    // an earlier reader's contribution (a tied embedding's lookup) arrives when
                    // the gradient exists: the new gradient and their sum, each the parameter's
                    // size (measured on GPT-2 small with PyTorch's CPU allocator: +2 x 154 MB)
                    if let Some(first) = st.first_read.filter(|&f| f < at) {
                        let add = st.bytes.saturating_mul(2);
                        steps[first].transient = steps[first].transient.saturating_add(add);
                    }
                }
                Kind::Activation | Kind::WeightCopy => {
                    if st.grad && st.kind == Kind::Activation {
                        steps[p].transient = steps[p]
                            .transient
                            .saturating_add(st.bytes)
                            .saturating_add(st.in_grad);
                    }
                    if st.saved {
                        steps[p].freed = steps[p].freed.saturating_add(st.bytes);
                    } else if let Some(at) = st.recomputed_at.filter(|&a| a < n) {
                        steps[at].recomputed = steps[at].recomputed.saturating_add(st.bytes);
                        steps[p].freed = steps[p].freed.saturating_add(st.bytes);
                    }
                }
                _ => {}
            }
        }
        steps.reverse();
        (steps, named)
    }

    /// A view of `x` with `numel` elements (slices, reshapes, transposes): the same storage.
    pub fn view(&self, x: X, numel: u64) -> X {
        X { numel, ..x }
    }

    /// `x.to(dtype)`: `x` itself when it already has that dtype.
    pub fn to(&mut self, x: X, dtype: DType) -> X {
        if x.dtype == dtype {
            x
        } else {
            self.reads(&[x]);
            self.new_act(x.numel, dtype, x.grad)
        }
    }

    /// An op that keeps nothing (add, neg, cat, a product with a Python scalar, ...), with an
    /// output of `numel` elements.
    pub fn plain(&mut self, inputs: &[X], numel: u64) -> X {
        let grad = inputs.iter().any(|x| x.grad);
        let dtype = inputs
            .iter()
            .map(|x| x.dtype)
            .reduce(promote)
            .unwrap_or(DType::F32);
        self.reads(inputs);
        self.new_act(numel, dtype, grad)
    }

    /// Elementwise `a * b` (broadcast to the larger).
    pub fn mul(&mut self, a: X, b: X) -> X {
        if b.grad {
            self.save(a);
        }
        if a.grad {
            self.save(b);
        }
        let numel = a.numel.max(b.numel);
        self.reads(&[a, b]);
        self.new_act(numel, promote(a.dtype, b.dtype), a.grad || b.grad)
    }

    /// `a / b`: keeps both when `b` requires grad, `b` alone otherwise.
    pub fn div(&mut self, a: X, b: X) -> X {
        if b.grad {
            self.save(a);
            self.save(b);
        } else if a.grad {
            self.save(b);
        }
        self.reads(&[a, b]);
        self.new_act(
            a.numel.max(b.numel),
            promote(a.dtype, b.dtype),
            a.grad || b.grad,
        )
    }

    /// A unary op whose backward needs its input (silu, gelu, pow).
    pub fn keeps_input(&mut self, x: X) -> X {
        if x.grad {
            self.save(x);
        }
        self.reads(&[x]);
        self.new_act(x.numel, x.dtype, x.grad)
    }

    /// A unary op whose backward needs its result (tanh, sigmoid, rsqrt, exp), of `numel`
    /// elements in `dtype`.
    pub fn keeps_result(&mut self, x: X, numel: u64, dtype: DType) -> X {
        self.reads(&[x]);
        let out = self.new_act(numel, dtype, x.grad);
        if x.grad {
            self.save(out);
        }
        out
    }

    /// The cast autocast makes of an op's input: `x` itself when already half.
    pub fn lower(&mut self, x: X) -> X {
        match self.autocast {
            Some(h) if x.dtype.is_float() => self.to(x, h),
            _ => x,
        }
    }

    /// The cast copy autocast makes of a weight.
    fn lower_weight(&mut self, w: X) -> X {
        match self.autocast {
            Some(h) if w.dtype != h => self.alloc(w.numel, h, w.grad, Kind::WeightCopy),
            _ => w,
        }
    }

    /// `F.linear(x, w, b)` with `out` output elements.
    pub fn linear(&mut self, x: X, w: X, out: u64) -> X {
        let xi = self.lower(x);
        let wi = self.lower_weight(w);
        if w.grad {
            self.save(xi);
        }
        if x.grad {
            self.save(wi);
        }
        self.reads(&[xi, w]);
        self.new_act(out, xi.dtype, x.grad || w.grad)
    }

    /// A batched matmul `a @ b` with `out` elements (lowered by autocast).
    pub fn matmul(&mut self, a: X, b: X, out: u64) -> X {
        let ai = self.lower(a);
        let bi = self.lower(b);
        if b.grad {
            self.save(ai);
        }
        if a.grad {
            self.save(bi);
        }
        self.reads(&[ai, bi]);
        self.new_act(out, ai.dtype, a.grad || b.grad)
    }

    /// A grouped (MoE) matmul: not lowered by autocast; keeps the input for the weights.
    pub fn grouped_mm(&mut self, x: X, w: X, out: u64) -> X {
        if w.grad {
            self.save(x);
        }
        if x.grad {
            self.save(w);
        }
        self.reads(&[x, w]);
        self.new_act(out, x.dtype, x.grad || w.grad)
    }

    /// Softmax over the last axis in `dtype` (the result is kept).
    pub fn softmax(&mut self, x: X, dtype: DType) -> X {
        let x = self.to(x, dtype);
        self.keeps_result(x, x.numel, dtype)
    }

    /// `scaled_dot_product_attention` on CPU (the flash kernel): keeps q, k, v, the output, an
    /// fp32 logsumexp of `lse` elements and the mask when one is passed. Returns the output
    /// (`out` elements, q's storage layout).
    pub fn sdpa(&mut self, q: X, k: X, v: X, mask: Option<X>, out: u64, lse: u64) -> X {
        let (q, k, v) = (self.lower(q), self.lower(k), self.lower(v));
        let grad = q.grad || k.grad || v.grad;
        self.reads(&[q, k, v]);
        let o = self.new_act(out, q.dtype, grad);
        if grad {
            let l = self.new_act(lse, DType::F32, false);
            for t in [q, k, v, o, l] {
                self.save(t);
            }
            if let Some(m) = mask {
                let m = self.to(m, q.dtype);
                self.save(m);
            }
        }
        o
    }

    /// `scaled_dot_product_attention` with `dropout_p > 0` on CPU: no fused kernel takes dropout,
    /// so PyTorch runs its math path, upcasting half inputs to fp32: `matmul(q·s, kᵀ·s)` keeps
    /// both scaled operands, `_safe_softmax` its probabilities, dropout its noise and
    /// `matmul(p, v)` the dropped probabilities and v, all fp32 ([B, h, S, S] for the
    /// probabilities; k and v as repeated to q's heads). A given mask is added in place and
    /// not kept. Returns the output, `q_numel` elements in q's (lowered) dtype, laid out
    /// [B, h, S, d] (the caller's transpose copies it).
    pub fn sdpa_math(&mut self, q: X, k: X, v: X, q_numel: u64, probs: u64) -> X {
        let (q, k, v) = (self.lower(q), self.lower(k), self.lower(v));
        let scores = q.grad || k.grad;
        // q·s for k's gradient, k·s for q's; the probabilities and the noise when the scores
        // require grad; the dropped probabilities for v's gradient, v for theirs
        for (n, keep) in [
            (q_numel, k.grad),
            (q_numel, q.grad),
            (probs, scores),
            (probs, scores),
            (probs, v.grad),
            (q_numel, scores),
        ] {
            if keep {
                let t = self.new_act(n, DType::F32, false);
                self.save(t);
            }
        }
        self.reads(&[q, k, v]);
        self.new_act(q_numel, q.dtype, scores || v.grad)
    }

    /// `F.dropout(x, p)` in training: on CPU `x * noise`, which keeps the noise (`x`'s dtype
    /// and size) when `x` requires grad; on CUDA the fused kernel keeps a bool mask (a byte an
    /// element); `p = 0` returns `x` itself.
    pub fn dropout(&mut self, x: X, p: f64) -> X {
        if p <= 0.0 {
            return x;
        }
        if x.grad {
            let dtype = if self.cuda { DType::Bool } else { x.dtype };
            let noise = self.new_act(x.numel, dtype, false);
            self.save(noise);
        }
        self.reads(&[x]);
        self.new_act(x.numel, x.dtype, x.grad)
    }

    /// `F.embedding(ids, w)`: keeps the indices for the weight's gradient.
    pub fn embedding(&mut self, ids: X, w: X, out: u64) -> X {
        if w.grad {
            self.save(ids);
        }
        self.reads(&[ids, w]);
        self.new_act(out, w.dtype, w.grad)
    }

    /// `F.layer_norm` over rows of `hidden` (`x.numel / hidden` rows): keeps the input and the
    /// mean and rstd of every row (on CPU in the promoted dtype of input and weight: bf16 for a
    /// bf16 model, fp32 under autocast).
    pub fn layer_norm(&mut self, x: X, w: X, hidden: u64) -> X {
        let grad = x.grad || w.grad;
        if grad {
            self.save(x);
            let rows = x.numel / hidden.max(1);
            let dt = promote(x.dtype, w.dtype);
            let mean = self.new_act(rows, dt, false);
            let rstd = self.new_act(rows, dt, false);
            self.save(mean);
            self.save(rstd);
        }
        self.reads(&[x, w]);
        self.new_act(x.numel, x.dtype, grad)
    }

    /// Cross-entropy of `logits` (rows of `classes`) against `target`: log_softmax keeps its
    /// result, nll_loss the target and a scalar total weight. Autocast runs it in fp32.
    pub fn cross_entropy(&mut self, logits: X, target: X) -> X {
        let logits = if self.autocast.is_some() {
            self.to(logits, DType::F32)
        } else {
            logits
        };
        let logp = self.keeps_result(logits, logits.numel, logits.dtype);
        if logp.grad {
            self.save(target);
            let w = self.new_act(1, logits.dtype, false);
            self.save(w);
        }
        self.reads(&[logp]);
        self.new_act(1, logits.dtype, logp.grad)
    }

    /// The saved activation storages: bytes and dtype (for diagnostics).
    pub fn saved_list(&self) -> Vec<(u64, DType)> {
        self.storages
            .iter()
            .filter(|s| s.saved && s.kind == Kind::Activation)
            .map(|s| (s.bytes, s.dtype))
            .collect()
    }

    /// Bytes of the saved storages, by kind.
    pub fn saved(&self) -> SavedBytes {
        let mut s = SavedBytes::default();
        for st in self.storages.iter().filter(|s| s.saved) {
            match st.kind {
                Kind::Activation => {
                    s.activation = s.activation.saturating_add(st.bytes);
                    s.storages += 1;
                }
                Kind::WeightCopy => s.weight_copy = s.weight_copy.saturating_add(st.bytes),
                Kind::Parameter | Kind::Input => {}
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_kept_by_two_ops_is_counted_once() {
        let mut t = Tape::new(None);
        let w = t.param(4, DType::F32, true);
        let x = t.new_act(8, DType::F32, true);
        t.linear(x, w, 8);
        t.keeps_input(x);
        assert_eq!(t.saved().activation, 32);
    }

    #[test]
    fn ops_on_tensors_without_grad_keep_nothing() {
        let mut t = Tape::new(None);
        let w = t.param(4, DType::F32, false);
        let x = t.input(8, DType::F32);
        let y = t.linear(x, w, 8);
        let z = t.keeps_input(y);
        t.keeps_result(z, 8, DType::F32);
        assert_eq!(t.saved().activation, 0);
    }

    #[test]
    fn autocast_casts_linear_inputs_and_copies_weights() {
        let mut t = Tape::new(Some(DType::BF16));
        let w = t.param(16, DType::F32, true);
        let x = t.new_act(8, DType::F32, true);
        let y = t.linear(x, w, 8);
        assert_eq!(y.dtype, DType::BF16);
        let s = t.saved();
        assert_eq!(s.activation, 16); // the bf16 copy of x, not x
        assert_eq!(s.weight_copy, 32);
    }
}
