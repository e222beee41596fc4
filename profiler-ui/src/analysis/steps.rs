//! What a step of a training loop is in a trace file, for the leak report: the ranges of an
//! annotation the user names by prefix (default `ProfilerStep#`, the step PyTorch's profiler
//! marks with `record_function("ProfilerStep#N")`), else, said so, the outermost annotation
//! ranges (the rule before step names: `Optimizer.zero_grad .. Optimizer.step` is then two
//! steps), else none; and how sites are named inside a step, without the step's own tag, so
//! that the same code is one site in every step.

use super::frames::FrameView;
use super::sites::{site_of, SiteName, SiteNames, NO_STACK};
use super::timeline::{steps_by, Step};
use blockpool::trace::{Context, ContextId, Snapshot};
use serde::Serialize;
use std::sync::Arc;

/// The prefix of the annotation that marks a step when the user names none: PyTorch's
/// profiler names each step `ProfilerStep#N`.
pub const DEFAULT_STEP_PREFIX: &str = "ProfilerStep#";

/// Which rule found the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Ranges of the annotation named by the prefix.
    Named,
    /// No annotation has the prefix (or the prefix is empty): the outermost annotation
    /// ranges.
    Outermost,
    /// The trace has no annotations: no steps.
    None,
}

/// The steps of one device and how they were found.
#[derive(Clone, Debug, Serialize)]
pub struct StepsUsed {
    /// The rule that found them.
    pub kind: StepKind,
    /// The prefix asked for (`ProfilerStep#` unless `--step` named another).
    pub prefix: String,
    /// What a step is here, in a sentence the report prints.
    pub text: String,
    /// The steps: tag and state range.
    #[serde(skip)]
    pub steps: Vec<Step>,
}

impl StepsUsed {
    /// Whether `tag` is a step's own tag under this rule (`None`: the outermost one is).
    fn is_step_tag(&self, tag: &str) -> bool {
        !self.prefix.is_empty() && tag.starts_with(self.prefix.as_str())
    }
}

/// The steps of `device` by the annotation named `prefix`, falling back as the module docs
/// say.
pub fn find_steps(snapshot: &Snapshot, device: u32, prefix: &str) -> StepsUsed {
    let first_last = |steps: &[Step]| match (steps.first(), steps.last()) {
        (Some(a), Some(b)) => format!("{} .. {}", a.tag, b.tag),
        _ => String::new(),
    };
    if !prefix.is_empty() {
        let steps = steps_by(snapshot, device, |tags| {
            tags.iter().find(|t| t.starts_with(prefix))
        });
        if !steps.is_empty() {
            return StepsUsed {
                kind: StepKind::Named,
                prefix: prefix.to_string(),
                text: format!(
                    "the `{prefix}*` annotation ranges, {} of them ({})",
                    steps.len(),
                    first_last(&steps)
                ),
                steps,
            };
        }
    }
    let steps = steps_by(snapshot, device, |tags| tags.first());
    if steps.is_empty() {
        return StepsUsed {
            kind: StepKind::None,
            prefix: prefix.to_string(),
            text: "none: the trace has no annotations at all, so memory is measured at its start \
                   and its end only"
                .to_string(),
            steps,
        };
    }
    let asked = if prefix.is_empty() {
        "no step annotation named (--step is empty)".to_string()
    } else {
        format!("no `{prefix}*` annotation (--step names the step's annotation)")
    };
    StepsUsed {
        kind: StepKind::Outermost,
        prefix: prefix.to_string(),
        text: format!(
            "{asked}; the outermost annotation ranges instead, {} of them ({})",
            steps.len(),
            first_last(&steps)
        ),
        steps,
    }
}

/// Every context's site inside a step: its tags without the step's own (all tags with the
/// prefix, or with the outermost rule the first tag), else, when no tag is left, the site its
/// frames name, else (no stack either) its own tags after all. Without steps sites are named
/// as everywhere else.
pub struct StepSiteNames<'n> {
    names: &'n SiteNames<'n>,
    /// Index `n` names `ContextId(n)`, 0 none; empty when steps change no name.
    within: Vec<SiteName>,
}

impl<'n> StepSiteNames<'n> {
    /// Names every context of `names`' snapshot inside the steps of `steps`.
    pub fn new(names: &'n SiteNames<'n>, steps: &StepsUsed, view: FrameView) -> StepSiteNames<'n> {
        let snapshot = names.snapshot();
        let within = match steps.kind {
            StepKind::None => Vec::new(),
            kind => {
                let mut within = vec![names.get(ContextId::NONE).clone()];
                within.extend(snapshot.contexts.iter().map(|(id, context)| {
                    let tags: Vec<Arc<str>> = match kind {
                        StepKind::Named => context
                            .tags
                            .iter()
                            .filter(|t| !steps.is_step_tag(t))
                            .cloned()
                            .collect(),
                        _ => context.tags.iter().skip(1).cloned().collect(),
                    };
                    if tags.len() == context.tags.len() {
                        return names.get(id).clone();
                    }
                    let within = site_of(
                        Some(&Context {
                            tags,
                            frames: context.frames.clone(),
                        }),
                        view,
                    );
                    // Only the step's tag and no stack: the tag is all that names it.
                    if within.site == NO_STACK {
                        return names.get(id).clone();
                    }
                    within
                }));
                within
            }
        };
        StepSiteNames { names, within }
    }

    /// The site of `context` inside a step.
    pub fn get(&self, context: ContextId) -> &SiteName {
        self.within
            .get(context.0 as usize)
            .unwrap_or_else(|| self.names.get(context))
    }
}
