//! The forward lines behind backward-pass allocations. PyTorch runs a CUDA backward pass on the
//! autograd engine's own thread, so its allocations record C++ frames only (the operator, the
//! autograd node such as `BmmBackward0::apply`, the engine) and never the user's line. The
//! forward pass records both: the operator's dispatcher entry (`at::_ops::bmm::call`) under the
//! user's Python frames. A node is named after the operator whose backward it is
//! (`BmmBackward0` is `bmm`'s, `NativeLayerNormBackward0` is `native_layer_norm`'s), so the
//! forward lines that called that operator are the lines that created such nodes.
//!
//! [`ForwardLines`] gathers, from every recorded stack of a trace, the user's lines (the
//! innermost Python frame outside library code, as sites name them) that called each
//! operator; a backward allocation's site is then the one line that called its node's
//! operator, or the first of several with how many others there are.

use super::frames::{is_library, is_python, label};
use blockpool::trace::{Frame, Snapshot};
use std::collections::BTreeMap;

/// Per operator (`bmm`, `pow`), the user's lines that called it in the trace's stacks, each
/// with how many stacks it is in.
#[derive(Debug, Default)]
pub struct ForwardLines {
    by_operator: BTreeMap<String, BTreeMap<String, usize>>,
}

impl ForwardLines {
    /// Gathers the lines of every context of `snapshot`.
    pub fn of(snapshot: &Snapshot) -> ForwardLines {
        let mut lines = ForwardLines::default();
        for (_, context) in snapshot.contexts.iter() {
            lines.add(&context.frames);
        }
        lines
    }

    /// Notes the operator and user line of one stack (innermost first), if it has both.
    fn add(&mut self, stack: &[Frame]) {
        let Some(operator) = stack.iter().find_map(|f| operator_of(&f.name)) else {
            return;
        };
        let Some(user) = stack.iter().find(|f| is_python(f) && !is_library(f)) else {
            return;
        };
        *self
            .by_operator
            .entry(operator.to_string())
            .or_default()
            .entry(label(user))
            .or_default() += 1;
    }

    /// The site of an allocation made under autograd node `node` (`BmmBackward0`): the line
    /// that called its operator, or of several the one in most stacks (then the first by name)
    /// with how many others there are (`model.py:9:forward +2 other bmm lines`); `None` when
    /// no recorded stack called it.
    pub fn site_of_node(&self, node: &str) -> Option<String> {
        let operator = operator_of_node(node)?;
        // `mean` is recorded as `mean_dim`, `pow` as `pow_Tensor_Scalar`: an overload follows
        // the name after `_`.
        let prefix = format!("{operator}_");
        let mut lines: BTreeMap<&String, usize> = BTreeMap::new();
        for (name, called) in &self.by_operator {
            if *name == operator || name.starts_with(&prefix) {
                for (line, stacks) in called {
                    *lines.entry(line).or_default() += stacks;
                }
            }
        }
        // The most stacks first; the map's order breaks ties by name.
        let first = lines
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(line, _)| *line)?;
        Some(match lines.len() - 1 {
            0 => first.clone(),
            1 => format!("{first} +1 other {operator} line"),
            n => format!("{first} +{n} other {operator} lines"),
        })
    }
}

/// The operator of a dispatcher frame: `bmm` of `at::_ops::bmm::call(...)`, with its overload
/// (`pow_Tensor_Scalar`).
fn operator_of(function: &str) -> Option<&str> {
    let rest = &function[function.find("at::_ops::")? + "at::_ops::".len()..];
    let end = rest.find("::")?;
    let operator = &rest[..end];
    let tail = &rest[end..];
    (tail.starts_with("::call") && !operator.is_empty()).then_some(operator)
}

/// The operator whose backward `node` is: `BmmBackward0` is `bmm`, `NativeLayerNormBackward0`
/// `native_layer_norm`; `None` for a node not named `...Backward<N>` (`AccumulateGrad`).
fn operator_of_node(node: &str) -> Option<String> {
    let stem = node.trim_end_matches(|c: char| c.is_ascii_digit());
    let camel = stem.strip_suffix("Backward")?;
    if camel.is_empty() {
        return None;
    }
    let mut snake = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    Some(snake)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::frames::frame;

    #[test]
    fn nodes_are_named_after_their_operators() {
        assert_eq!(operator_of_node("BmmBackward0").as_deref(), Some("bmm"));
        assert_eq!(
            operator_of_node("NativeLayerNormBackward0").as_deref(),
            Some("native_layer_norm")
        );
        assert_eq!(operator_of_node("MeanBackward1").as_deref(), Some("mean"));
        assert_eq!(operator_of_node("AccumulateGrad"), None);
        assert_eq!(operator_of_node("Backward0"), None);
        assert_eq!(
            operator_of("at::_ops::pow_Tensor_Scalar::call(at::Tensor const&, c10::Scalar const&)"),
            Some("pow_Tensor_Scalar")
        );
        assert_eq!(operator_of("at::_ops::bmm::redispatch(...)"), None);
        assert_eq!(operator_of("at::native::bmm"), None);
    }

    #[test]
    fn a_node_gets_the_forward_lines_that_called_its_operator() {
        let torch = "/venv/lib/python3.12/site-packages/torch/functional.py";
        let mut lines = ForwardLines::default();
        lines.add(&[
            frame(
                "at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)",
                "",
                0,
            ),
            frame("einsum", torch, 10),
            frame("forward", "model.py", 42),
        ]);
        lines.add(&[
            frame("at::_ops::exp::call(at::Tensor const&)", "", 0),
            frame("softmax", "model.py", 7),
        ]);
        // Twice: the line in the most stacks names the site.
        for _ in 0..2 {
            lines.add(&[
                frame("at::_ops::bmm::call(...)", "", 0),
                frame("attend", "model.py", 9),
            ]);
        }
        lines.add(&[
            frame("at::_ops::mean_dim::call(...)", "", 0),
            frame("norm", "model.py", 3),
        ]);
        // No user line: not counted.
        lines.add(&[
            frame("at::_ops::exp::call(...)", "", 0),
            frame("f", torch, 1),
        ]);
        assert_eq!(
            lines.site_of_node("ExpBackward0").as_deref(),
            Some("model.py:7:softmax")
        );
        assert_eq!(
            lines.site_of_node("BmmBackward0").as_deref(),
            Some("model.py:9:attend +1 other bmm line"),
            "the line in most stacks"
        );
        assert_eq!(
            lines.site_of_node("MeanBackward1").as_deref(),
            Some("model.py:3:norm")
        );
        assert_eq!(lines.site_of_node("MulBackward0"), None);
        assert_eq!(lines.site_of_node("AccumulateGrad"), None);
    }
}
