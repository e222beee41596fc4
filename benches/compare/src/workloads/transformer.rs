//! A synthetic training loop of a decoder-only transformer, as PyTorch's autograd and Adam
//! allocate it: fp32 weights persistent; per step, bf16 activations allocated through the
//! forward pass and saved for backward (temporaries freed at once), freed in reverse through
//! the backward pass while weight gradients are allocated; Adam's two state tensors allocated
//! at the first optimizer step and kept; gradients freed by `zero_grad(set_to_none=True)`.
//! Sequence lengths vary from step to step, so the attention scores (`s^2`) change size.

use crate::ops::{OpsBuilder, Rng, Workload};

/// The model and batch.
#[derive(Clone, Copy, Debug)]
pub struct Model {
    /// Transformer blocks.
    pub layers: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Attention heads.
    pub heads: usize,
    /// Sequences per batch.
    pub batch: usize,
    /// Vocabulary size.
    pub vocab: usize,
}

/// A GPT-2-medium-like model, batch 4.
pub const MEDIUM: Model = Model {
    layers: 24,
    hidden: 1024,
    heads: 16,
    batch: 4,
    vocab: 50_304,
};

/// Sequence lengths training steps draw from.
const SEQ_LENS: [usize; 6] = [128, 256, 384, 512, 768, 1024];
/// Bytes per activation element (bf16) and per weight or optimizer element (fp32).
const ACT: usize = 2;
const F32: usize = 4;

/// `steps` training steps of `model`.
pub fn build(model: Model, steps: usize, seed: u64) -> Workload {
    let mut rng = Rng::new(seed ^ 0x7A11_0C47);
    let mut b = OpsBuilder::new();
    let h = model.hidden;
    // Per block: qkv, attention out, MLP up, MLP down, two layer norms (weight + bias).
    let mut param_sizes = vec![model.vocab * h * F32];
    for _ in 0..model.layers {
        param_sizes.extend([3 * h * h, h * h, 4 * h * h, 4 * h * h, 2 * h, 2 * h].map(|n| n * F32));
    }
    param_sizes.push(2 * h * F32);
    for &size in &param_sizes {
        b.alloc(size, 0);
    }
    let mut adam_state_allocated = false;
    for _ in 0..steps {
        let s = SEQ_LENS[rng.range(0, SEQ_LENS.len() as u64 - 1) as usize];
        let t = model.batch * s;
        let scores = model.batch * model.heads * s * s * ACT;
        let ids = b.alloc(t * 8, 0);
        let mut x = b.alloc(t * h * ACT, 0);
        // Forward: what backward needs stays, per block.
        let mut saved: Vec<Vec<u32>> = Vec::with_capacity(model.layers);
        for _ in 0..model.layers {
            let ln1 = b.alloc(t * h * ACT, 0);
            let qkv = b.alloc(t * 3 * h * ACT, 0);
            let raw = b.alloc(scores, 0);
            let probs = b.alloc(scores, 0);
            b.free(raw);
            let attn = b.alloc(t * h * ACT, 0);
            let proj = b.alloc(t * h * ACT, 0);
            let x1 = b.alloc(t * h * ACT, 0);
            b.free(proj);
            let ln2 = b.alloc(t * h * ACT, 0);
            let up = b.alloc(t * 4 * h * ACT, 0);
            let gelu = b.alloc(t * 4 * h * ACT, 0);
            let down = b.alloc(t * h * ACT, 0);
            let x2 = b.alloc(t * h * ACT, 0);
            b.free(down);
            saved.push(vec![x, ln1, qkv, probs, attn, x1, ln2, up, gelu]);
            x = x2;
        }
        let logits = b.alloc(t * model.vocab * ACT, 0);
        let loss = b.alloc(4, 0);
        // Backward.
        let grad_logits = b.alloc(t * model.vocab * ACT, 0);
        b.free(logits);
        b.free(loss);
        let mut grad_x = b.alloc(t * h * ACT, 0);
        b.free(grad_logits);
        b.free(x);
        let mut grads = vec![b.alloc(param_sizes[param_sizes.len() - 1], 0)];
        for (layer, tensors) in saved.into_iter().enumerate().rev() {
            let first_param = 1 + layer * 6;
            for &size in param_sizes[first_param..first_param + 6].iter().rev() {
                grads.push(b.alloc(size, 0));
            }
            let g_mlp = b.alloc(t * 4 * h * ACT, 0);
            let g_act = b.alloc(t * 4 * h * ACT, 0);
            b.free(g_mlp);
            let g_scores = b.alloc(scores, 0);
            let g_qkv = b.alloc(t * 3 * h * ACT, 0);
            b.free(g_scores);
            let g_in = b.alloc(t * h * ACT, 0);
            b.free(g_act);
            b.free(g_qkv);
            for slot in tensors.into_iter().rev() {
                b.free(slot);
            }
            b.free(grad_x);
            grad_x = g_in;
        }
        grads.push(b.alloc(param_sizes[0], 0));
        b.free(grad_x);
        b.free(ids);
        // Adam: state once, one temporary per parameter each step; then zero_grad.
        if !adam_state_allocated {
            for &size in &param_sizes {
                b.alloc(size, 0);
                b.alloc(size, 0);
            }
            adam_state_allocated = true;
        }
        for &size in &param_sizes {
            let temp = b.alloc(size, 0);
            b.free(temp);
        }
        for grad in grads {
            b.free(grad);
        }
    }
    b.finish(format!("transformer/24x1024/{steps}_steps"), "transformer")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Op;

    #[test]
    fn a_step_frees_its_activations_and_keeps_weights_and_adam_state() {
        let small = Model {
            layers: 2,
            hidden: 64,
            heads: 2,
            batch: 1,
            vocab: 100,
        };
        let w = build(small, 3, 1);
        let params = 1 + 2 * 6 + 1;
        // The run ends with the last Adam temporary's free, zero_grad (one gradient per
        // parameter), then finish() freeing the weights and both Adam tensors of each.
        let tail_frees = w
            .ops
            .iter()
            .rev()
            .take_while(|op| matches!(op, Op::Free { .. }))
            .count();
        assert_eq!(tail_frees, 1 + params + 3 * params);
    }
}
