//! Ctrl-C and a scheduler's SIGTERM (how cluster jobs end) stop a training run with one line
//! that says where it stood, "interrupted at step N; last checkpoint DIR/step-M", and the
//! shell's status for the signal: 130 for SIGINT, 143 for SIGTERM. Exiting mid-step or mid-save
//! is safe: checkpoints are renamed into place whole, and the next run tidies what a save left.

use std::path::PathBuf;
use std::sync::Arc;

use codon_train::RunStatus;

/// Watch for SIGINT and SIGTERM on a thread of their own; on either, print where `status`
/// stands and exit. `checkpoint_dir` is `None` when the run saves nothing.
#[cfg(unix)]
pub fn exit_on_interrupt(status: Arc<RunStatus>, checkpoint_dir: Option<PathBuf>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new().name("interrupt".into()).spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let last = match (status.last_checkpoint(), &checkpoint_dir) {
                (Some(step), _) => format!("last checkpoint {}", step.display()),
                (None, Some(dir)) => format!("no checkpoint in {} yet", dir.display()),
                (None, None) => "nothing was saved (no --checkpoint_dir)".to_string(),
            };
            crate::errln!("interrupted at step {}; {last}", status.step());
            std::process::exit(128 + signal);
        }
    })?;
    Ok(())
}

/// Elsewhere the platform's default handling stays.
#[cfg(not(unix))]
pub fn exit_on_interrupt(_status: Arc<RunStatus>, _checkpoint_dir: Option<PathBuf>) -> std::io::Result<()> {
    Ok(())
}
