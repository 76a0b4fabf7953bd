//! `e2e-bench call-shapes`: what a call's shape costs a burst (issue 44,
//! point 1).
//!
//! jetcron's target-call p99 at 5,000 fires a second is about that of the
//! *ideal caller* (its own calls built ahead and handed to a client at the
//! instant), and two to three times the *ideal sender*'s (one header, `{}`,
//! no reply). Between the two lie two differences: what a call carries
//! (jetcron's four headers and its JSON body) and that it asks for a reply
//! (the target publishes one per call, which nats-server routes back).
//! This bench measures each on its own: the ideal sender's burst, then
//! bursts of the other shapes, all on one nats-server with the same kind
//! of subscriber (one per burst), one after the other, `--rounds` times. Runs on this machine
//! drift by a factor of two within an hour, so only ratios within a round
//! are compared.
//!
//! `e2e-bench call-shapes --jobs 5000 --seconds 10 --rounds 2`

use jetcron_loadtest::percentile;
use jetcron_testkit::NatsServer;

use crate::{ideal_caller, ideal_sender, lag_cells, CallShape};

#[derive(clap::Args, Clone)]
pub struct CallShapesArgs {
    /// Calls a burst, one burst a second.
    #[arg(long, default_value_t = 5_000)]
    jobs: usize,
    /// Seconds of bursts of each shape.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// How many times every shape is measured.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

/// The shapes measured after the ideal sender, from the leanest to
/// jetcron's own.
const SHAPES: [(&str, CallShape); 5] = [
    (
        "one header, `{}`, no reply",
        CallShape {
            jetcron_headers: false,
            reply: false,
            replies_apart: false,
        },
    ),
    (
        "one header, `{}`, a reply",
        CallShape {
            jetcron_headers: false,
            reply: true,
            replies_apart: false,
        },
    ),
    (
        "jetcron's headers and body, no reply",
        CallShape {
            jetcron_headers: true,
            reply: false,
            replies_apart: false,
        },
    ),
    (
        "jetcron's headers and body, a reply (the ideal caller)",
        CallShape::JETCRON,
    ),
    (
        "jetcron's headers and body, a reply read on a second connection",
        CallShape {
            replies_apart: true,
            ..CallShape::JETCRON
        },
    ),
];

pub async fn measure(args: &CallShapesArgs) -> anyhow::Result<()> {
    let nats = NatsServer::start();
    println!(
        "{} calls at each whole second for {} s a shape, one nats-server, a subscriber per burst\n",
        args.jobs, args.seconds
    );
    println!(
        "| round | sender | received | lag p50 ms | p99 ms | max ms | p99 ÷ ideal sender p99 |"
    );
    println!("|---|---|---|---|---|---|---|");
    let expected = args.jobs as u64 * args.seconds;
    for round in 1..=args.rounds {
        let ideal = ideal_sender(&nats, args.jobs, args.seconds).await?;
        let ideal_p99 = percentile(&ideal, 99.0).max(1);
        let row = |name: &str, lags: &[i64]| print_row(round, name, lags, expected, ideal_p99);
        row("ideal sender: one header, `{}`, no reply", &ideal);
        for (name, shape) in SHAPES {
            let lags = ideal_caller(&nats, args.jobs, args.seconds, shape).await?;
            row(name, &lags);
        }
    }
    Ok(())
}

/// One table row: how many of `expected` calls arrived, their lags
/// (sorted, µs), and their p99 over the ideal sender's of the same round.
fn print_row(round: usize, name: &str, lags: &[i64], expected: u64, ideal_p99: i64) {
    println!(
        "| {round} | {name} | {} of {expected} | {} | {:.2} |",
        lags.len(),
        lag_cells(lags),
        percentile(lags, 99.0) as f64 / ideal_p99 as f64
    );
}
