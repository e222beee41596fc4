//! What a live allocation holds, as far as its call stack tells it: parameters, gradients,
//! optimizer state, activations, other (a stack that is none of these: inputs, losses, a
//! user's temporaries) or unknown (no stack recorded).
//!
//! The stack is read outermost-in from the frames PyTorch records; the first rule that matches
//! wins, in this order:
//! 1. optimizer state: a frame in `torch/optim/` (an optimizer's `step`, its state made on the
//!    first step);
//! 2. gradients: the backward pass: an autograd node (`...Backward0::apply`,
//!    `AccumulateGrad`), autograd's engine, or `torch/autograd/` (`backward`);
//! 3. parameters: building or moving a module: `torch/nn/parameter.py`, a module's `__init__`,
//!    `reset_parameters`, `_apply` (behind `.to()` and `.cuda()`), `load_state_dict`,
//!    `from_pretrained`;
//! 4. activations: a module's forward (`torch/nn/modules/module.py`'s `_call_impl`, or a
//!    `forward` frame);
//! 5. other: any other recorded stack; unknown: none.
//!
//! A stack cannot tell a temporary from a tensor kept for later, so temporaries are counted
//! where they were made (an activation's scratch space is an activation).

use super::frames::autograd_node;
use blockpool::trace::Frame;
use serde::Serialize;

/// What an allocation holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Model weights.
    Parameters,
    /// Made in the backward pass.
    Gradients,
    /// Made by an optimizer.
    OptimizerState,
    /// Made in a module's forward.
    Activations,
    /// A recorded stack that is none of the above.
    Other,
    /// No stack recorded.
    Unknown,
}

impl Category {
    /// Every category, in the order reports list them.
    pub const ALL: [Category; 6] = [
        Category::Parameters,
        Category::Gradients,
        Category::OptimizerState,
        Category::Activations,
        Category::Other,
        Category::Unknown,
    ];

    /// The name reports print.
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer state",
            Category::Activations => "activations",
            Category::Other => "other",
            Category::Unknown => "unknown",
        }
    }
}

/// A category and whether a frame is of it.
type Rule = (Category, fn(&Frame) -> bool);

/// The category of an allocation whose stack is `frames`, innermost first (as recorded).
pub fn categorize(frames: &[Frame]) -> Category {
    if frames.is_empty() {
        return Category::Unknown;
    }
    let rules: [Rule; 4] = [
        (Category::OptimizerState, is_optimizer),
        (Category::Gradients, is_backward),
        (Category::Parameters, is_parameter_setup),
        (Category::Activations, is_forward),
    ];
    rules
        .iter()
        .find(|(_, rule)| frames.iter().any(rule))
        .map_or(Category::Other, |(category, _)| *category)
}

/// The file with `/` separators, for matching paths of any system.
fn file(frame: &Frame) -> String {
    frame.filename.replace('\\', "/")
}

fn in_torch(frame: &Frame, dir: &str) -> bool {
    let file = file(frame);
    file.contains(&format!("/torch/{dir}")) || file.starts_with(&format!("torch/{dir}"))
}

fn is_optimizer(frame: &Frame) -> bool {
    in_torch(frame, "optim/")
}

fn is_backward(frame: &Frame) -> bool {
    autograd_node(frame).is_some()
        || frame.name.contains("torch::autograd::Engine")
        || frame.name.contains("AccumulateGrad")
        || in_torch(frame, "autograd/")
}

/// Functions that make or move a module's weights.
const PARAMETER_FUNCTIONS: [&str; 6] = [
    "reset_parameters",
    "_apply",
    "load_state_dict",
    "_load_from_state_dict",
    "from_pretrained",
    "_load_state_dict_into_model",
];

fn is_parameter_setup(frame: &Frame) -> bool {
    let name = &*frame.name;
    file(frame).ends_with("torch/nn/parameter.py")
        || PARAMETER_FUNCTIONS.contains(&name)
        || (name == "__init__" && in_torch(frame, "nn/modules/"))
}

fn is_forward(frame: &Frame) -> bool {
    let name = &*frame.name;
    name == "forward" || (name == "_call_impl" && in_torch(frame, "nn/modules/module.py"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, filename: &str) -> Frame {
        crate::analysis::frames::frame(name, filename, 1)
    }

    const TORCH: &str = "/venv/lib/python3.12/site-packages/torch";

    #[test]
    fn each_rule_names_its_category() {
        let cases = [
            (
                vec![
                    frame("_init_group", &format!("{TORCH}/optim/adam.py")),
                    frame("train", "train.py"),
                ],
                Category::OptimizerState,
            ),
            (
                vec![
                    frame("at::native::mm", "??"),
                    frame("torch::autograd::generated::MmBackward0::apply", "??"),
                ],
                Category::Gradients,
            ),
            (
                vec![frame("backward", &format!("{TORCH}/autograd/__init__.py"))],
                Category::Gradients,
            ),
            (
                vec![
                    frame("reset_parameters", &format!("{TORCH}/nn/modules/linear.py")),
                    frame("__init__", &format!("{TORCH}/nn/modules/linear.py")),
                ],
                Category::Parameters,
            ),
            (
                vec![
                    frame("__init__", &format!("{TORCH}/nn/modules/linear.py")),
                    frame("__init__", "model.py"),
                ],
                Category::Parameters,
            ),
            (
                vec![
                    frame("_apply", &format!("{TORCH}/nn/modules/module.py")),
                    frame("to", &format!("{TORCH}/nn/modules/module.py")),
                ],
                Category::Parameters,
            ),
            (
                vec![
                    frame("einsum", &format!("{TORCH}/functional.py")),
                    frame("forward", "model.py"),
                    frame("_call_impl", &format!("{TORCH}/nn/modules/module.py")),
                ],
                Category::Activations,
            ),
            (vec![frame("load_batch", "data.py")], Category::Other),
            (vec![], Category::Unknown),
        ];
        for (frames, expected) in cases {
            assert_eq!(categorize(&frames), expected, "{frames:?}");
        }
    }

    #[test]
    fn the_first_rule_wins() {
        // A stack two rules match takes the earlier: a backward node under a forward frame
        // (checkpointing's recompute) is a gradient, a closure's forward under an optimizer's
        // step is optimizer state.
        let backward_under_forward = [
            frame("torch::autograd::generated::BmmBackward0::apply", "??"),
            frame("forward", "model.py"),
        ];
        assert_eq!(categorize(&backward_under_forward), Category::Gradients);
        let step = [
            frame("forward", "model.py"),
            frame("step", &format!("{TORCH}/optim/sgd.py")),
        ];
        assert_eq!(categorize(&step), Category::OptimizerState);
        // A user's own `__init__` outside torch.nn is not a module's weights.
        assert_eq!(
            categorize(&[frame("__init__", "dataset.py")]),
            Category::Other
        );
    }
}
