//! Where an allocation was made (its *site*) and how much the allocator tracks about live
//! allocations ([`LeakTracking`]).
//!
//! The site is the source location of the call that allocated, taken with `#[track_caller]`
//! (a pointer to a `'static` [`Location`], so taking it costs nothing). When context capture is
//! on, the site also carries the thread's [`annotate`](crate::annotate) tags, and with call
//! stacks the function that made the call. Its label, the key reports group by, is
//! `file:line:column`, `tags @ file:line:column` with tags (joined by `/`, outermost first),
//! and `... in function` with call stacks, when a frame of the stack resolves to that very
//! line (that needs debug info; without it the label stays the location):
//! `step/forward @ src/train.rs:42:17 in my_app::train_step`.

use crate::event::Context;
use std::fmt::Write as _;
use std::panic::Location;

/// How much the allocator records about each live allocation, for leak scopes, live
/// snapshots and the teardown report ([`CachingAllocator::set_leak_tracking`]).
///
/// [`CachingAllocator::set_leak_tracking`]: crate::CachingAllocator::set_leak_tracking
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LeakTracking {
    /// Nothing: no live table, so scopes, snapshots and the teardown report see nothing.
    Off,
    /// The default: allocation id, sizes, device, stream, source location and name of every
    /// live allocation, kept in a per-device table under the device's lock. Costs a few
    /// stores per allocation and a check per free; no clock read, no context.
    #[default]
    Sites,
    /// [`Sites`](Self::Sites) plus the creation time (one clock read) and the thread's
    /// annotation tags, which then become part of the site.
    Context,
    /// [`Context`](Self::Context) plus the call stack (slow: a backtrace per allocation); the
    /// site then names the calling function.
    Backtraces,
}

impl LeakTracking {
    const ALL: [LeakTracking; 4] = [
        LeakTracking::Off,
        LeakTracking::Sites,
        LeakTracking::Context,
        LeakTracking::Backtraces,
    ];

    /// Its index in declaration order, as the allocator keeps it in an atomic.
    pub(crate) const fn index(self) -> u8 {
        self as u8
    }

    /// The setting of index `index` ([`LeakTracking::index`]); out of range reads `Sites`.
    pub(crate) fn from_index(index: u8) -> LeakTracking {
        Self::ALL
            .get(usize::from(index))
            .copied()
            .unwrap_or_default()
    }
}

/// The label of a site: the source location, after the annotation tags of `context` and
/// followed by the function of the frame at that location when `context` has one (module
/// docs).
pub fn site_label(location: &Location<'_>, context: Option<&Context>) -> String {
    let mut label = String::new();
    if let Some(context) = context.filter(|c| !c.tags.is_empty()) {
        for (i, tag) in context.tags.iter().enumerate() {
            if i > 0 {
                label.push('/');
            }
            label.push_str(tag);
        }
        label.push_str(" @ ");
    }
    // Writing to a String cannot fail.
    let _ = write!(
        label,
        "{}:{}:{}",
        location.file(),
        location.line(),
        location.column()
    );
    let at_site = |frame: &&crate::event::Frame| {
        frame.line == location.line() && frame.filename.ends_with(location.file())
    };
    if let Some(frame) = context.and_then(|c| c.frames.iter().find(at_site)) {
        label.push_str(" in ");
        label.push_str(&frame.name);
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Frame;
    use std::sync::Arc;

    #[test]
    fn label_puts_tags_before_and_the_function_after_the_location() {
        let here = Location::caller();
        let plain = site_label(here, None);
        assert_eq!(
            plain,
            format!("{}:{}:{}", here.file(), here.line(), here.column())
        );
        let empty = Context::default();
        assert_eq!(
            site_label(here, Some(&empty)),
            plain,
            "no tags, no frames: the location"
        );
        let context = Context {
            tags: vec![Arc::from("step"), Arc::from("forward")],
            frames: vec![
                Frame {
                    name: "core::ops::function::FnOnce::call_once".into(),
                    filename: "".into(),
                    line: 0,
                },
                Frame {
                    name: "my_app::train_step".into(),
                    filename: format!("/home/me/{}", here.file()).into(),
                    line: here.line(),
                },
            ],
        };
        assert_eq!(
            site_label(here, Some(&context)),
            format!("step/forward @ {plain} in my_app::train_step")
        );
    }
}
