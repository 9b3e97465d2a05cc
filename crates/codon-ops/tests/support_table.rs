//! codon-ops' support table on the emulated part CI runs (an Ascend910B3 by default, an
//! Ascend910A under `CANDLE_ASCEND_SIM_SOC=Ascend910A`): which body runs each fused op in f32,
//! f16 and bf16. The expected tables are written by hand from `soc/op_support.tsv`: the A2 runs
//! every operator of every Ascend body in all three dtypes; the Atlas training series has no
//! aclnnAddLayerNorm, no flash attention and no aclnnApplyAdamWV2, and no BF16 at all. The
//! block gather, Σ g² and the finiteness check have no Ascend body. (The CPU and CUDA columns
//! are listed by the table's own unit test.)
use candle_core::DType;
use codon_ops::support::{select, table, FusedOp};

const A2: &str = "
op                      npu f32   npu f16   npu bf16
softmax                 ascend    ascend    ascend
softmax_grad            ascend    ascend    ascend
gelu                    ascend    ascend    ascend
layer_norm              ascend    ascend    ascend
add_layer_norm          ascend    ascend    ascend
linear                  ascend    ascend    ascend
linear_grad_accumulate  ascend    ascend    ascend
cross_entropy           ascend    ascend    ascend
embedding               ascend    ascend    ascend
dropout                 ascend    ascend    ascend
attention               ascend    ascend    ascend
block_gather            composed  composed  composed
adamw                   ascend    ascend    ascend
sum_of_squares          composed  composed  composed
all_finite              composed  composed  composed
cast                    ascend    ascend    ascend";

const TRAINING_SERIES: &str = "
op                      npu f32   npu f16   npu bf16
softmax                 ascend    ascend    refused
softmax_grad            ascend    ascend    refused
gelu                    ascend    ascend    refused
layer_norm              ascend    ascend    refused
add_layer_norm          composed  composed  refused
linear                  ascend    ascend    refused
linear_grad_accumulate  ascend    ascend    refused
cross_entropy           ascend    ascend    refused
embedding               ascend    ascend    refused
dropout                 ascend    ascend    refused
attention               composed  composed  refused
block_gather            composed  composed  refused
adamw                   composed  composed  refused
sum_of_squares          composed  composed  refused
all_finite              composed  composed  refused
cast                    ascend    ascend    refused";

/// The table's lines with their spacing evened out.
fn words(table: &str) -> Vec<String> {
    table.trim().lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

#[test]
fn each_fused_op_runs_the_body_its_part_has() {
    let device = candle_ascend::parse_device("npu-sim:0").expect("the emulator opens");
    let soc = &candle_ascend::ascend_device(&device).expect("an Ascend device").soc().name;
    let mut expected = if soc.starts_with("Ascend910B") {
        words(A2)
    } else if soc.starts_with("Ascend910A") || soc.starts_with("Ascend910Pro") {
        words(TRAINING_SERIES)
    } else {
        panic!("no expected table for {soc}")
    };
    if !cfg!(feature = "ascend") {
        // Without the `ascend` feature no device has an Ascend body, and none refuses.
        expected = expected.iter().map(|l| l.replace("ascend", "composed").replace("refused", "composed")).collect();
    }
    let got = table(&[("npu", &device)], &[DType::F32, DType::F16, DType::BF16]);
    assert_eq!(words(&got), expected, "on {soc}:\n{got}");
}

/// A refused body is an error that names the op, the dtype and why, not a silent composed path.
#[test]
fn a_refused_dtype_is_an_error_that_says_why() {
    let device = candle_ascend::parse_device("npu-sim:0").expect("the emulator opens");
    let soc = &candle_ascend::ascend_device(&device).expect("an Ascend device").soc().name;
    let refused = select(FusedOp::LayerNorm, &device, DType::BF16);
    if cfg!(feature = "ascend") && soc.starts_with("Ascend910A") {
        let message = refused.expect_err("bf16 on the training series is refused").to_string();
        assert!(message.contains("layer_norm in bf16 is refused") && message.contains("no BF16"), "{message}");
        assert!(message.contains(soc.as_str()), "the part is named: {message}");
    } else {
        assert!(refused.is_ok(), "{soc} runs bf16");
    }
}
