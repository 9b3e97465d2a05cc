//! Pre-train CodonTransformer from scratch; the same flags as `finetune`.
//!
//! ```text
//! cargo run --release --example pretrain -- --dataset_dir train.jsonl --checkpoint_dir ckpt --max_epochs 5
//! ```

#[path = "common/train_cli.rs"]
mod train_cli;

fn main() {
    codon_ascend::run_main(|| train_cli::run(train_cli::Mode::Pretrain));
}
