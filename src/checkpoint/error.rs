//! Why a chain, a planner's settings or a schedule was refused.

/// A checkpointing input that cannot be planned or simulated. None of these is an
/// out-of-memory condition: each names the input to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The chain has no stages.
    #[error("a chain needs at least one stage; this one has none")]
    NoStages,
    /// A sum of the chain's rounded byte counts does not fit in a `usize`.
    #[error("the chain's byte counts overflow when added up; check the declared sizes")]
    BytesOverflow,
    /// A sum of the chain's times does not fit in a `u64`.
    #[error("the chain's times overflow when added up; use a coarser time unit")]
    TimeOverflow,
    /// `Revolve` was asked for zero slots; one slot is needed for the chain's input.
    #[error("Revolve needs at least 1 slot (the one holding the chain's input); got 0")]
    ZeroSlots,
    /// Revolve's schedule would need more forward calls than a `u64` counts.
    #[error("Revolve needs more than 2^64 forward calls for {stages} stages with {slots} slots; give it more slots")]
    TooManyForwardCalls {
        /// The chain's stage count.
        stages: usize,
        /// The slots asked for.
        slots: usize,
    },
    /// `Uniform` was asked for a segment count outside `1..=stages`.
    #[error("Uniform needs between 1 and {stages} segments for a chain of {stages} stages; got {segments}")]
    BadSegments {
        /// The segment count asked for.
        segments: usize,
        /// The chain's stage count.
        stages: usize,
    },
    /// No schedule of the memory model fits the budget given to `Budget`.
    #[error("a budget of {budget} bytes is too small for this chain: the smallest that fits is {minimum} bytes")]
    BudgetTooSmall {
        /// The budget asked for.
        budget: usize,
        /// The smallest budget any schedule fits (of those `Budget` searches: every schedule
        /// for chains of up to 16 stages, persistent ones above).
        minimum: usize,
    },
    /// `Budget` was given a chain longer than it plans ([`Budget::MAX_STAGES`]): its tables
    /// grow with the square of the stages and its search with the cube.
    ///
    /// [`Budget::MAX_STAGES`]: super::Budget::MAX_STAGES
    #[error("Budget plans chains of at most {max} stages; this one has {stages}: merge consecutive stages into blocks (or use Revolve or Uniform, which take any length)")]
    TooManyStages {
        /// The chain's stage count.
        stages: usize,
        /// The most `Budget` plans.
        max: usize,
    },
    /// A schedule broke a rule of the memory model; the plan that holds it is not valid.
    #[error("invalid schedule at operation {position}: {reason}")]
    InvalidSchedule {
        /// Index of the offending operation in the schedule (the schedule's length when the
        /// problem is at its end).
        position: usize,
        /// The rule it broke.
        reason: ScheduleError,
    },
}

/// The rule of the memory model a schedule broke (see the [module docs](super)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    /// An operation names a stage the chain does not have.
    #[error("stage {stage} does not exist in a chain of {stages} stages")]
    NoSuchStage {
        /// The stage named.
        stage: usize,
        /// The chain's stage count.
        stages: usize,
    },
    /// An operation names an activation the chain does not have outside backward steps
    /// (`x_0` to `x_{n-1}`; the output `x_n` exists only inside the last backward step).
    #[error("activation x_{activation} does not exist outside backward steps (x_0..x_{last})")]
    NoSuchActivation {
        /// The activation named.
        activation: usize,
        /// The last activation a schedule may name.
        last: usize,
    },
    /// A stage ran, or a backward step ran, while its input activation was not alive.
    #[error("activation x_{activation} is needed but not alive")]
    InputNotAlive {
        /// The activation needed.
        activation: usize,
    },
    /// A forward step would produce an activation that is already alive.
    #[error("activation x_{activation} is already alive")]
    AlreadyAlive {
        /// The activation.
        activation: usize,
    },
    /// `Drop` or `Store` of an activation that is not alive, or `Drop` of the caller's input.
    #[error("activation x_{activation} cannot be dropped or stored: it is not alive, or it is the caller's input x_0")]
    NotDroppable {
        /// The activation.
        activation: usize,
    },
    /// `Store` of an activation that is already a snapshot.
    #[error("activation x_{activation} is already stored")]
    AlreadyStored {
        /// The activation.
        activation: usize,
    },
    /// A backward step out of order: they run once each, from the last stage to the first.
    #[error("backward of stage {stage} out of order: stage {expected} is next")]
    BackwardOutOfOrder {
        /// The stage whose backward was asked for.
        stage: usize,
        /// The stage whose backward is next.
        expected: usize,
    },
    /// A forward step after every backward step has run, or past the stages still to reverse.
    #[error("forward of stage {stage} is not needed: only stages before {reversed_from} remain to reverse")]
    ForwardNotNeeded {
        /// The stage asked for.
        stage: usize,
        /// The first stage already reversed.
        reversed_from: usize,
    },
    /// The schedule ended before every backward step ran.
    #[error("the schedule ends with stage {next}'s backward not run")]
    Unfinished {
        /// The next backward step that never ran.
        next: usize,
    },
    /// The schedule ended with activations other than the caller's input still alive.
    #[error("the schedule ends with activation x_{activation} still alive")]
    LeftAlive {
        /// The lowest such activation.
        activation: usize,
    },
    /// A sum of live bytes or of times overflowed.
    #[error("live bytes or time overflow")]
    Overflow,
}
