//! Fine-tune CodonTransformer: upstream `finetune.py`'s flags, on CPU or an Ascend NPU.
//!
//! ```text
//! cargo run --release --example finetune                      # embedded default: demo data, small model, CPU
//! cargo run --release --example finetune -- --dataset_dir train.jsonl --checkpoint_dir ckpt \
//!     --model CodonTransformer-base --batch_size 6 --max_epochs 15 --learning_rate 5e-5 --precision bf16
//! ```
//! Without `--model` it starts from a random initialisation (and says so).

#[path = "common/train_cli.rs"]
mod train_cli;

fn main() {
    codon_ascend::run_main(|| train_cli::run(train_cli::Mode::Finetune));
}
