//! The error type of `codon-train`.

use std::path::PathBuf;

/// Everything that can stop training.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A watched device reported a fault: the run stopped before its next step, and saved
    /// nothing after the fault appeared.
    #[error("{fault}; training stopped after step {after_step}, saving nothing since the fault")]
    DeviceFault {
        /// The last step that ran (0: none).
        after_step: usize,
        /// The device and its vendor error codes.
        fault: String,
    },
    /// An invalid setting.
    #[error("invalid training configuration: {0}")]
    Config(String),
    /// A tensor operation failed.
    #[error("{op}: {source}")]
    Tensor {
        /// What the trainer was doing.
        op: String,
        /// candle's error.
        source: candle_core::Error,
    },
    /// The model failed (its crate's error: `codon_model::CodonError` for BigBird).
    #[error(transparent)]
    Model(Box<dyn std::error::Error + Send + Sync>),
    /// The batch source failed (its crate's error: `codon_data::DataError` for the masked-LM
    /// loader).
    #[error(transparent)]
    Data(Box<dyn std::error::Error + Send + Sync>),
    /// A file of the run could not be written.
    #[error(transparent)]
    Files(#[from] codon_files::FilesError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A checkpoint that cannot be resumed from.
    #[error("checkpoint {path} cannot be used: {reason}")]
    Checkpoint {
        /// The checkpoint folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An output of the run that would replace one of its inputs, or write inside an input folder.
    #[error("{what} {output} would replace the run's input {input} (or write inside it); choose another path")]
    OutputIsInput {
        /// Which output.
        what: String,
        /// The output path.
        output: PathBuf,
        /// The input it would touch.
        input: PathBuf,
    },
    /// The checkpoint folder holds another run's checkpoints.
    #[error("{dir} holds another run's checkpoints ({}): resume one of them, choose another checkpoint folder, or allow overwriting them (--overwrite)", list_some(.names))]
    ForeignCheckpoints {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Its step folders (and state-dict file) that this run did not write.
        names: Vec<String>,
    },
    /// Overwriting another run's checkpoint would remove one of this run's inputs.
    #[error("overwriting {path} would remove the run's input {input}; nothing was removed")]
    OverwriteWouldRemoveInput {
        /// The step folder or file to remove.
        path: PathBuf,
        /// The input inside it.
        input: PathBuf,
    },
    /// A checkpoint folder that cannot take a checkpoint, found before the first step.
    #[error("checkpoint folder {dir} {reason}")]
    CheckpointFolder {
        /// The folder.
        dir: PathBuf,
        /// Why it cannot.
        reason: String,
    },
    /// A non-finite loss or gradient under the abort policy.
    #[error("non-finite {what} at optimizer step {step}{}", if .parameters.is_empty() { String::new() } else { format!("; non-finite gradients in: {}", .parameters.join(", ")) })]
    NonFinite {
        /// Optimizer step, from 1.
        step: usize,
        /// `loss` or `gradients`.
        what: String,
        /// Parameters whose gradients are not finite.
        parameters: Vec<String>,
    },
    /// Weights that are no longer finite: nothing is saved from them.
    #[error("the weights are not finite after optimizer step {step} (in {}); no checkpoint was written", list_some(.parameters))]
    NonFiniteWeights {
        /// Optimizer steps taken.
        step: usize,
        /// Parameters with a NaN or infinite value.
        parameters: Vec<String>,
    },
    /// Too many optimizer steps in a row were skipped for non-finite values.
    #[error("{skipped} optimizer steps in a row (up to step {step}) had a non-finite loss or gradients; training stopped (the limit is max_skipped_steps)")]
    TooManySkippedSteps {
        /// Consecutive skipped steps.
        skipped: usize,
        /// The last of them, from 1.
        step: usize,
    },
    /// Other ranks of a data-parallel run failed (each reports its own error); this one
    /// stopped with them at the step they reported it in.
    #[error("stopped at step {step} because rank(s) {failed:?} failed (their own error says why)")]
    PeersFailed {
        /// The ranks that failed.
        failed: Vec<usize>,
        /// The step, from 1.
        step: usize,
    },
    /// A rank's thread of a data-parallel run panicked (a bug: its message went to stderr).
    #[error("rank {rank}'s training thread panicked")]
    RankPanicked {
        /// The rank.
        rank: usize,
    },
    /// A step's metrics could not be written as a JSON line.
    #[error("{path}: step {step}'s metrics cannot be written as JSON: {source}")]
    Metrics {
        /// The metrics file.
        path: PathBuf,
        /// The step, from 1.
        step: usize,
        /// serde_json's error.
        source: serde_json::Error,
    },
    /// One rank of a data-parallel run failed.
    #[error("rank {rank} of {ranks}: {source}")]
    Rank {
        /// The rank that failed.
        rank: usize,
        /// The number of ranks.
        ranks: usize,
        /// Its error.
        source: Box<TrainError>,
    },
}

/// The first few names and how many more there are.
fn list_some(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

impl From<candle_core::Error> for TrainError {
    fn from(source: candle_core::Error) -> Self {
        TrainError::Tensor { op: "tensor operation".into(), source }
    }
}

impl TrainError {
    /// Wrap an I/O error with its file.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TrainError::Io { path: path.into(), source }
    }
}

/// Result with [`TrainError`].
pub type Result<T, E = TrainError> = std::result::Result<T, E>;
