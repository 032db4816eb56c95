//! Thin glue over below-view: the live and replay TUIs.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;
use std::time::SystemTime;

use anyhow::anyhow;
use anyhow::bail;
use anyhow::Context;
use anyhow::Result;
use below_common::logutil;
use model::Model;
use slog::error;
use store::advance::new_advance_local;
use view::View;
use view::ViewMode;
use view::ViewState;

/// Runs the live TUI. `make` builds the model source on the collector
/// thread (BPF handles need not be `Send`); each call of the source gives
/// the next model. `store_dir` backs pause mode, as in below.
pub fn run_live<F, S>(
    logger: slog::Logger,
    store_dir: PathBuf,
    interval: Duration,
    make: F,
) -> Result<()>
where
    F: FnOnce() -> Result<S> + Send + 'static,
    S: FnMut() -> Result<Model>,
{
    let (first_tx, first_rx) = mpsc::channel::<Result<Model>>();
    let (sink_tx, sink_rx) = mpsc::channel::<cursive::CbSink>();
    let thread_logger = logger.clone();
    std::thread::Builder::new()
        .name("live_collector".into())
        .spawn(move || {
            let mut source = match make() {
                Ok(s) => s,
                Err(e) => {
                    let _ = first_tx.send(Err(e));
                    return;
                }
            };
            if first_tx.send(source()).is_err() {
                return;
            }
            let Ok(sink) = sink_rx.recv() else { return };
            loop {
                std::thread::sleep(interval);
                match source() {
                    Ok(model) => {
                        let update = Box::new(move |c: &mut cursive::Cursive| {
                            let state = c.user_data::<ViewState>().expect("view state");
                            if !state.is_paused() {
                                state.update(model);
                            }
                        });
                        if sink.send(update).is_err() {
                            return;
                        }
                    }
                    Err(e) => error!(thread_logger, "{:#}", e),
                }
            }
        })
        .context("Failed to spawn the collector thread")?;
    let first = first_rx
        .recv()
        .map_err(|_| anyhow!("collector thread exited"))??;
    let mut adv = new_advance_local(logger, store_dir, SystemTime::now());
    adv.initialize();
    let mut view = View::new_with_advance(first, ViewMode::Live(Rc::new(RefCell::new(adv))));
    logutil::set_current_log_target(logutil::TargetLog::File);
    sink_tx
        .send(view.cb_sink().clone())
        .map_err(|_| anyhow!("collector thread exited"))?;
    view.run()
}

/// Replays a store from `time` (below's date syntax; `days` is its `-r`).
/// `source` names where its samples came from in errors (`store_dir` may
/// be a temporary copy).
pub fn run_replay(
    logger: slog::Logger,
    store_dir: PathBuf,
    source: &std::path::Path,
    time: &str,
    days: Option<&str>,
) -> Result<()> {
    let ts = below_common::cliutil::system_time_from_date_and_adjuster(time, days)?;
    let mut adv = new_advance_local(logger, store_dir, ts);
    adv.initialize();
    let Some(model) = adv.jump_sample_to(ts) else {
        bail!(
            "No sample found at or after {} in {}: the time may be in the future or nothing was recorded then",
            time,
            source.display()
        );
    };
    below_common::cliutil::check_initial_sample_time_with_requested_time(model.timestamp, ts);
    let mut view = View::new_with_advance(model, ViewMode::Replay(Rc::new(RefCell::new(adv))));
    logutil::set_current_log_target(logutil::TargetLog::File);
    view.run()
}
