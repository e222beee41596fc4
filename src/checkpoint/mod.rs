//! Checkpointing: trading recompute for memory in the backward pass of a chain of stages.
//!
//! Deep networks run out of memory because every stage's input waits for the backward pass.
//! Checkpointing keeps only some of them and recomputes the rest from the nearest kept one. This
//! module describes a chain by its costs ([`ChainCosts`]), plans what to keep with a
//! [`Planner`], and checks every plan with one simulator of the memory model below, so a plan's
//! [`Plan::forward_calls`], [`Plan::total_time`] and [`Plan::peak_bytes`] mean the same for
//! every planner and for a schedule written by hand ([`Plan::from_schedule`]).
//!
//! Planners: [`StoreAll`] (no recompute), [`Uniform`] (PyTorch's `checkpoint_sequential`
//! split, or a balanced one), [`Sqrt`] (Chen et al. 2016) [`Revolve`] (binomial
//! checkpointing, optimal for uniform chains, with its closed form [`Revolve::forward_calls`])
//! and [`Budget`] (the fastest schedule of a heterogeneous chain within a byte budget: over
//! every schedule for chains of up to 16 stages, over persistent ones above).
//!
//! Running: the user's stages implement [`Stage`] over their own tensor type (the chain's end
//! is a [`Loss`]); an [`Executor`] runs them under any plan, allocating through the caching
//! allocator, and returns the input gradient with the allocator's measured peak beside the
//! plan's prediction ([`Run`]), locating the first operation where they differ
//! ([`Divergence`]). Recomputed forwards draw the same random numbers ([`StageRng`], keyed by
//! step and stage), so every plan gives store-all's gradients bit for bit.
//! [`Executor::measure`] runs a chain once to find its [`ChainCosts`].
//!
//! ```
//! use blockpool::checkpoint::{ChainCosts, Planner, Revolve, StoreAll, Uniform};
//!
//! let chain = ChainCosts::uniform(32, 1 << 20)?; // 32 stages, 1 MiB activations
//! let all = StoreAll.plan(&chain)?;
//! let four = Uniform::pytorch(4).plan(&chain)?;
//! let revolve = Revolve { slots: 4 }.plan(&chain)?;
//! assert_eq!(all.forward_calls(), 31);
//! assert_eq!(four.forward_calls(), 31 + 3 * 7); // three segments of 8 recomputed
//! assert_eq!(revolve.forward_calls(), Revolve::forward_calls(32, 4).unwrap());
//! assert!(revolve.peak_bytes() < four.peak_bytes() && four.peak_bytes() < all.peak_bytes());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The memory model
//!
//! A chain has `n` stages; stage `i` maps activation `x_i` to `x_{i+1}`. `x_0` is the chain's
//! input, `x_n` its output, which the loss reads. `g_i` is the gradient of `x_i` and has its
//! size. Every size is rounded as the allocator rounds it ([`ChainCosts`]); a buffer of zero
//! bytes is no buffer. Parameters and their gradients belong to the caller, are alive
//! throughout and are not counted. A schedule is a sequence of [`Op`]s; the live set starts as
//! `{x_0}` (a snapshot: it fills one of Revolve's slots), and:
//!
//! - **Forward step** `Forward { stage: i }` (needs `x_i` alive, `x_{i+1}` not alive, and
//!   stage `i + 1`'s backward not yet run, so `i + 1 < n`): alive during it are the live set, `x_{i+1}` and stage
//!   `i`'s forward workspace; after it, the live set plus `x_{i+1}`. It is one forward call.
//! - **Store** / **Drop** `x_i`: a store marks an alive activation as a snapshot and changes no
//!   bytes; a drop frees it (`x_0` is never dropped: the caller owns it). Peak: the live set.
//! - **Backward step** `Backward { stage: i }` (stages run in order `n-1, ..., 0`, once each;
//!   needs `x_i` alive): stage `i`'s backward takes `x_i` and `g_{i+1}` and re-runs whatever
//!   of its forward it needs itself (that is in its backward time and workspace; it is not a
//!   forward call). Alive during it: the live set (with `g_{i+1}`), `g_i` and the backward
//!   workspace; after it `g_{i+1}` is freed and `g_i` stays (`g_0`, the input's gradient, stays
//!   to the end).
//! - **The loss**, at the start of the last stage's backward step (`i = n - 1`): the step first
//!   runs stage `n-1`'s forward (alive: the live set, `x_n` and the forward workspace), then the
//!   loss gradient (alive: the live set, `x_n` and `g_n`; the loss's own scratch memory is
//!   not modelled), then frees `x_n`, then the backward
//!   proper as above with `g_{i+1} = g_n`. This forward is inside a backward step and is not a
//!   forward call; its time is in [`Plan::total_time`].
//!
//! [`Plan::peak_bytes`] is the largest of these sums over the schedule; [`Plan::memory`] lists
//! them per operation. A valid schedule ends with every backward step run and only `x_0` (and
//! `g_0`) alive. The model counts exactly the buffers a stage's `forward` and `backward`
//! allocate through the caching allocator, so the allocator's `allocated_bytes` peak for a
//! run of the plan equals the prediction when the declared sizes are true and nothing else is
//! allocated meanwhile.
//!
//! | file | what lives there |
//! |---|---|
//! | `chain.rs` | [`StageCost`], [`ChainCosts`]: validated, rounded costs |
//! | `schedule.rs` | [`Op`], [`OpMemory`] and the simulator of the memory model |
//! | `plan.rs` | [`Plan`]: a schedule and what the simulator says of it |
//! | `planner.rs` | the [`Planner`] trait and [`StoreAll`] |
//! | `uniform.rs` | [`Uniform`], [`Split`] and [`Sqrt`] |
//! | `budget.rs` | [`Budget`]: the fastest schedule within a byte budget, [`Budget::fit`] |
//! | `budget/search.rs` | the exact search over every schedule of a short chain |
//! | `budget/segments.rs` | Rotor's segment recursion for longer chains: least peaks, time table, groups |
//! | `revolve.rs` | [`Revolve`] and its closed form |
//! | `stage.rs` | [`Stage`], [`Loss`], [`StageContext`]: the user's side of a run |
//! | `rng.rs` | [`StageRng`]: the (step, stage) counter-based random stream |
//! | `executor.rs` | [`Executor`]: runs a plan, measures the allocator's peak, [`Executor::measure`] |
//! | `error.rs` | [`CheckpointError`], [`ScheduleError`] |

mod budget;
#[cfg(test)]
mod budget_tests;
mod chain;
mod error;
mod executor;
#[cfg(test)]
mod fit_tests;
mod plan;
mod planner;
#[cfg(test)]
mod random_chain_tests;
mod revolve;
mod rng;
mod schedule;
mod stage;
mod uniform;

pub use budget::Budget;
pub use chain::{ChainCosts, StageCost};
pub use error::{CheckpointError, ScheduleError};
pub use executor::{Divergence, ExecError, Executor, Pass, Run};
pub use plan::Plan;
pub use planner::{Planner, StoreAll};
pub use revolve::Revolve;
pub use rng::StageRng;
pub use schedule::{Op, OpMemory};
pub use stage::{Loss, Stage, StageContext, StageError};
pub use uniform::{Split, Sqrt, Uniform};
