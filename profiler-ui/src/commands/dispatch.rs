//! From a parsed command line to the command that runs it: [`run`] turns each subcommand's
//! arguments into the options its module takes (`--at` / `--peak` into a [`Point`]) and calls
//! it; `demo --serve` runs the demo and then the viewer on the trace it wrote. Every command
//! that ends is [`Status::Done`] but `diff` with a failed `--fail-if` rule.

use super::{
    convert, demo, diff, doctor, explain, info, leaks, plan, rank_summary, replay, segments, serve,
    streams, summary, timeline, top, tune,
};
use crate::analysis::frames::FrameView;
use crate::analysis::timeline::Point;
use crate::analysis::tree::TreeLimits;
use crate::cli::Command;
use crate::output::Output;
use crate::serve::Limits;

/// How a command that ran to its end came out, for the exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It did what was asked: exit status 0.
    Done,
    /// `diff --fail-if`: a rule failed, each said on standard error: exit status 1.
    GateFailed,
}

/// Runs `command`, writing its report to `out`.
pub fn run(command: Command, out: &mut Output) -> anyhow::Result<Status> {
    match command {
        Command::Info { file, json } => info::run(&file, json, out),
        Command::Summary {
            files,
            all_frames,
            full_stack,
            json,
        } => match files.as_slice() {
            [file] if !rank_summary::is_several(&files) => summary::run(
                file,
                FrameView::from_flag(all_frames),
                full_stack,
                json,
                out,
            ),
            _ => rank_summary::run(&files, json, out),
        },
        Command::Leaks {
            file,
            all_frames,
            device,
            step,
            growth_steps,
            warmup_steps,
            json,
        } => {
            let options = crate::analysis::leaks::LeakOptions {
                view: FrameView::from_flag(all_frames),
                step_prefix: step,
                min_growth_steps: growth_steps,
                warmup_steps,
            };
            leaks::run(&file, device, &options, json, out)
        }
        Command::Top {
            file,
            at,
            device,
            sort,
            limit,
            all_frames,
            tree,
            depth,
            min_share,
            json,
        } => {
            let options = top::TopOptions {
                device,
                point: Point::from_options(at.at, at.peak),
                order: sort,
                limit,
                view: FrameView::from_flag(all_frames),
                tree: tree.then_some(TreeLimits {
                    depth,
                    min_share: min_share / 100.0,
                }),
                json,
            };
            top::run(&file, options, out)
        }
        Command::Streams {
            file,
            device,
            config,
            no_replay,
            json,
        } => streams::run(&file, device, config.as_ref(), !no_replay, json, out),
        Command::Segments {
            file,
            all_frames,
            at,
            device,
            json,
        } => segments::run(
            &file,
            device,
            Point::from_options(at.at, at.peak),
            FrameView::from_flag(all_frames),
            json,
            out,
        ),
        Command::Timeline {
            file,
            out: svg,
            device,
        } => timeline::run(&file, &svg, device, out),
        Command::Diff {
            a,
            b,
            device,
            device_a,
            device_b,
            all_frames,
            fail_if,
            json,
            markdown,
            limit,
        } => {
            let options = diff::DiffOptions {
                devices: (device_a.or(device), device_b.or(device)),
                view: FrameView::from_flag(all_frames),
                rules: fail_if,
                format: match (json, markdown) {
                    (true, _) => diff::Format::Json,
                    (_, true) => diff::Format::Markdown,
                    _ => diff::Format::Text,
                },
                limit,
            };
            return diff::run(&a, &b, &options, out);
        }
        Command::Convert { input, output, to } => convert::run(&input, &output, to, out),
        Command::Demo {
            out: trace,
            serve: then_serve,
            port,
            open,
        } => {
            demo::run(&trace, out)?;
            if then_serve || open {
                out.write("\n")?;
                serve::run(&[trace], port, open, Limits::default(), out)?;
            }
            Ok(())
        }
        Command::Doctor { json } => doctor::run(json, out),
        Command::Replay(args) => replay::run(args, out),
        Command::Tune(args) => tune::run(args, out),
        Command::Explain(args) => explain::run(args, out),
        Command::Plan(args) => plan::run(&args, out),
        Command::Serve(args) => {
            let limits = Limits {
                max_connections: args.max_connections,
                idle_timeout: args.idle_timeout,
                request_timeout: args.request_timeout,
            };
            serve::run(&args.files, args.port, args.open, limits, out)
        }
    }?;
    Ok(Status::Done)
}
