//! Progress on stderr (indicatif) for work that takes more than a second: loading a pool,
//! a run, torture's cells, a sweep's points. indicatif draws only when stderr is a terminal;
//! `--quiet` turns it off there too. Nothing goes to stdout, so `--json` is unaffected.

use indicatif::{ProgressBar, ProgressStyle};
use std::time::Duration;

/// A spinner with `msg` and the time elapsed, for work whose length is not known.
pub fn spinner(show: bool, msg: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        pb.set_style(style);
    }
    pb.set_message(msg);
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

/// A bar of `len` steps, with a message (`{msg}`) after the count.
pub fn bar(show: bool, len: u64) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {bar:30} {pos}/{len} {msg} [{elapsed}]")
    {
        pb.set_style(style);
    }
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
