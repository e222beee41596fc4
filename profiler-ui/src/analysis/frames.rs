//! Whose code a recorded frame is: the capture and interpreter machinery PyTorch's memory_viz
//! hides, the allocator and operator-dispatch plumbing between an operator and the allocator,
//! library code (torch, installed packages, the Python standard library, Rust's std), and the
//! rest, the user's own code. The autograd node a backward allocation ran under, and how a
//! frame is written in a site name.
//!
//! PyTorch records Python frames with a `.py` file and a line, and C++ frames (with
//! `stacks="all"`) with a demangled name, a file that is often `??` or empty, and line 0.

use blockpool::trace::Frame;

/// Which frames name a site and make up the stack tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FrameView {
    /// The user's own code: library frames and the allocator's and dispatcher's plumbing are
    /// skipped (see [`crate::analysis::sites::site_of`]).
    #[default]
    User,
    /// Every frame memory_viz shows: only the capture and interpreter machinery is hidden, so
    /// torch's wrappers and the allocator itself can name a site.
    All,
}

impl FrameView {
    /// `All` when `all_frames`, else `User`.
    pub fn from_flag(all_frames: bool) -> FrameView {
        if all_frames {
            FrameView::All
        } else {
            FrameView::User
        }
    }
}

/// Function names memory_viz's frame filter drops (substrings): the stack capture itself and
/// the interpreter's call machinery.
const HIDDEN_FUNCTIONS: [&str; 8] = [
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];

/// File names memory_viz's frame filter drops (substrings): the dispatcher's boxing and
/// registration glue and CPython's evaluation loop.
const HIDDEN_FILES: [&str; 10] = [
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// Whether memory_viz hides `frame` (its `_frame_filter`): never shown, in either view.
pub fn is_hidden(frame: &Frame) -> bool {
    HIDDEN_FUNCTIONS.iter().any(|f| frame.name.contains(f))
        || HIDDEN_FILES.iter().any(|f| frame.filename.contains(f))
}

/// The frames of a stack a report shows, innermost first: every one with `full`, else all but
/// those memory_viz hides and the allocator's and dispatcher's plumbing ([`is_plumbing`]), so
/// that the operator and the user's code come first rather than the stack capture and the
/// caching allocator.
pub fn shown_frames(frames: &[Frame], full: bool) -> Vec<&Frame> {
    frames
        .iter()
        .filter(|frame| full || !is_plumbing(frame))
        .collect()
}

/// A frame as stacks print it: `file:line:function`.
pub fn stack_line(frame: &Frame) -> String {
    format!("{}:{}:{}", frame.filename, frame.line_text(), frame.name)
}

/// Whether `frame` is a Python frame: a `.py` file, or a pseudo-file such as
/// `<frozen importlib._bootstrap>` or `<ipython-input-3-...>`.
pub fn is_python(frame: &Frame) -> bool {
    let file = &*frame.filename;
    file.ends_with(".py") || (file.starts_with('<') && file.ends_with('>'))
}

/// Whether `frame` is library code rather than the user's: a Python frame inside torch, an
/// installed package (`site-packages`, `dist-packages`), the standard library or a `<frozen
/// ...>` module; or a Rust frame of the standard library or a registry crate.
pub fn is_library(frame: &Frame) -> bool {
    let file = frame.filename.replace('\\', "/");
    if is_python(frame) {
        let lower = file.to_ascii_lowercase();
        return file.starts_with("<frozen")
            || lower.contains("/site-packages/")
            || lower.contains("/dist-packages/")
            || lower.contains("/lib/python")
            || lower.contains("/lib64/python")
            || file.starts_with("torch/")
            || file.contains("/torch/");
    }
    let name = frame.name.trim_start_matches('<');
    file.starts_with("/rustc/")
        || file.contains("/.cargo/registry/")
        || ["std::", "core::", "alloc::"]
            .iter()
            .any(|p| name.starts_with(p))
}

/// Function names (substrings) of the C++ plumbing between an operator and the allocator: the
/// caching allocator, tensor factories, the dispatcher and its generated wrappers, autograd's
/// type wrappers and structured kernels' output allocation.
const PLUMBING_FUNCTIONS: [&str; 22] = [
    "CachingAllocator",
    "c10::Allocator",
    "c10::cuda::",
    "at::detail::empty",
    "at::detail::_empty",
    "_empty_generic",
    "at::native::empty_",
    "at::empty",
    "at::_ops::",
    "c10::impl::",
    "c10::Dispatcher",
    "c10::KernelFunction",
    "c10::BoxedKernel",
    "wrap_kernel_functor",
    "::redispatch",
    "::create_out",
    "set_output_raw_strided",
    "at::meta::",
    "::wrapper_",
    "VariableType::",
    "at::Tensor::",
    "at::TensorBase::",
];

/// File names (prefixes or substrings) of the same plumbing.
const PLUMBING_FILES: [&str; 4] = [
    "CUDACachingAllocator",
    "Register",
    "VariableType",
    "Redispatch",
];

/// Whether `frame` is allocator or dispatcher plumbing: it never names a site in the user view.
pub fn is_plumbing(frame: &Frame) -> bool {
    let file = frame.filename.rsplit('/').next().unwrap_or("");
    PLUMBING_FUNCTIONS.iter().any(|f| frame.name.contains(f))
        || PLUMBING_FILES.iter().any(|f| file.starts_with(f))
        || is_hidden(frame)
}

/// The autograd node `frame` runs, from a C++ frame like
/// `torch::autograd::generated::BmmBackward0::apply(...)`: `BmmBackward0`.
pub fn autograd_node(frame: &Frame) -> Option<&str> {
    if is_python(frame) || !frame.name.contains("torch::autograd::") {
        return None;
    }
    let function = short_name(&frame.name);
    let owner = function.strip_suffix("::apply")?;
    let node = last_component(owner);
    (!node.is_empty()).then_some(node)
}

/// The last `::` component of `path` that is not inside template brackets.
fn last_component(path: &str) -> &str {
    let mut depth = 0i32;
    let bytes = path.as_bytes();
    let mut start = 0;
    for i in 0..bytes.len() {
        match bytes[i] {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b':' if depth == 0 && i + 1 < bytes.len() && bytes[i + 1] == b':' => start = i + 2,
            _ => {}
        }
    }
    &path[start.min(path.len())..]
}

/// A C++ function name without its argument list, qualifiers and return type:
/// `void at::cuda::blas::gemm<float>(char, ...) const` is `at::cuda::blas::gemm<float>`.
/// Names it cannot read (unbalanced brackets) come back whole.
pub fn short_name(name: &str) -> &str {
    let mut end = name.trim_end();
    for qualifier in [" const", " &&", " &", " volatile", " noexcept"] {
        if let Some(rest) = end.strip_suffix(qualifier) {
            end = rest.trim_end();
        }
    }
    // The argument list: the brackets that close at the end.
    if end.ends_with(')') {
        let mut depth = 0i32;
        let mut open = None;
        for (i, c) in end.char_indices().rev() {
            match c {
                ')' => depth += 1,
                '(' => {
                    depth -= 1;
                    if depth == 0 {
                        open = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        match open {
            // `(anonymous namespace)` alone, or a name that is all brackets: keep it.
            Some(0) | None => return name,
            Some(i) => end = end[..i].trim_end(),
        }
    }
    // A return type: the last space outside brackets.
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in end.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ' ' if depth == 0 => start = i + 1,
            _ => {}
        }
    }
    if start >= end.len() {
        return name;
    }
    &end[start..]
}

/// How `frame` is written as a site or a tree node: `file:line:function` for a Python frame
/// (memory_viz's form, with the whole path), the function without arguments for a native one.
pub fn label(frame: &Frame) -> String {
    if is_python(frame) {
        format!("{}:{}:{}", frame.filename, frame.line_text(), frame.name)
    } else {
        short_name(&frame.name).to_string()
    }
}

/// A frame named `name` in `filename` at `line`, for the analysis modules' tests.
#[cfg(test)]
pub fn frame(name: &str, filename: &str, line: u32) -> Frame {
    Frame {
        name: name.into(),
        filename: filename.into(),
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_viz_hides_the_capture_and_the_interpreter() {
        assert!(is_hidden(&frame("torch::unwind::unwind()", "??", 0)));
        assert!(is_hidden(&frame("_PyEval_EvalFrameDefault", "ceval.c", 0)));
        assert!(is_hidden(&frame(
            "c10::impl::call_functor",
            "aten/src/ATen/core/boxing/impls.h",
            0
        )));
        assert!(!is_hidden(&frame("forward", "/home/me/model.py", 42)));
    }

    #[test]
    fn library_frames_are_torch_packages_and_the_standard_library() {
        for file in [
            "/root/.venv/lib/python3.12/site-packages/torch/functional.py",
            "/usr/lib/python3/dist-packages/numpy/core.py",
            "/usr/lib/python3.11/contextlib.py",
            "<frozen importlib._bootstrap>",
            "/home/me/src/pytorch/torch/nn/modules/module.py",
            "C:\\Python311\\Lib\\site-packages\\transformers\\x.py",
        ] {
            assert!(is_library(&frame("f", file, 1)), "{file} is library code");
        }
        for file in [
            "/root/assignment2-systems/cs336_systems/adapters.py",
            "<ipython-input-3-abc>",
            "train.py",
        ] {
            assert!(!is_library(&frame("f", file, 1)), "{file} is the user's");
        }
        assert!(is_library(&frame(
            "core::ops::function::FnOnce::call_once",
            "/rustc/abc/library/core/src/ops/function.rs",
            250
        )));
        assert!(!is_library(&frame(
            "my_app::train_step",
            "./src/main.rs",
            42
        )));
    }

    #[test]
    fn short_names_drop_arguments_qualifiers_and_return_types() {
        assert_eq!(
            short_name("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)"),
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"
        );
        assert_eq!(
            short_name(
                "at::Tensor at::_sum_to<c10::SymInt>(at::Tensor, c10::ArrayRef<c10::SymInt>, bool)"
            ),
            "at::_sum_to<c10::SymInt>"
        );
        assert_eq!(
            short_name("torch::cuda::(anonymous namespace)::gather_with_cpp()"),
            "torch::cuda::(anonymous namespace)::gather_with_cpp"
        );
        assert_eq!(
            short_name("at::Tensor::new_zeros_symint(c10::ArrayRef<c10::SymInt>, c10::TensorOptions) const"),
            "at::Tensor::new_zeros_symint"
        );
        assert_eq!(short_name("clone"), "clone");
        assert_eq!(short_name("f(("), "f((", "unbalanced: whole");
    }

    #[test]
    fn autograd_nodes_are_read_from_their_apply_frames() {
        let bmm = frame(
            "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
            "??",
            0,
        );
        assert_eq!(autograd_node(&bmm), Some("BmmBackward0"));
        assert_eq!(
            autograd_node(&frame(
                "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor> &&)",
                "",
                0
            )),
            Some("AccumulateGrad")
        );
        assert_eq!(
            autograd_node(&frame(
                "torch::autograd::Node::operator()(std::vector<at::Tensor>&&)",
                "",
                0
            )),
            None
        );
        assert_eq!(autograd_node(&frame("apply", "model.py", 3)), None);
    }

    #[test]
    fn plumbing_is_the_allocator_factories_and_dispatcher() {
        for (name, file) in [
            ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp"),
            ("at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", "??"),
            ("at::_ops::bmm::call(at::Tensor const&, at::Tensor const&)", "??"),
            ("at::(anonymous namespace)::wrapper_CUDA_bmm(at::Tensor const&, at::Tensor const&)", "RegisterCUDA.cpp"),
            ("torch::autograd::VariableType::(anonymous namespace)::bmm(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)", "VariableType_3.cpp"),
        ] {
            assert!(is_plumbing(&frame(name, file, 0)), "{name}");
        }
        assert!(!is_plumbing(&frame("at::cuda::getNewWorkspace()", "", 0)));
        assert!(!is_plumbing(&frame(
            "torch::autograd::generated::BmmBackward0::apply(std::vector<at::Tensor>&&)",
            "??",
            0
        )));
    }
}
