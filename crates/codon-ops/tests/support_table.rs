//! codon-ops' support table on the emulated part CI runs (an Ascend910B3 by default, an
//! Ascend910A under `CANDLE_ASCEND_SIM_SOC=Ascend910A`): which body runs each fused op in f32,
//! f16 and bf16. The expected rows are written by hand from `soc/op_support.tsv`: the A2 runs
//! every operator of every body in all three dtypes; the Atlas training series has no
//! aclnnAddLayerNorm, no flash attention and no aclnnApplyAdamWV2, and no BF16 at all.
use candle_core::DType;
use codon_ops::support::{body, Body, FusedOp};

#[test]
fn each_fused_op_runs_the_body_its_part_has() {
    let device = candle_ascend::parse_device("npu-sim:0").expect("the emulator opens");
    let soc = &candle_ascend::ascend_device(&device).expect("an Ascend device").soc().name;
    let a2 = soc.starts_with("Ascend910B");
    assert!(a2 || soc.starts_with("Ascend910A") || soc.starts_with("Ascend910Pro"), "no expected rows for {soc}");
    let training_series_lacks = [FusedOp::AddLayerNorm, FusedOp::Attention, FusedOp::AdamW];
    for op in FusedOp::ALL {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let expected = match () {
                // Without the `ascend` feature no device has an Ascend body.
                _ if !cfg!(feature = "ascend") => Body::Composed,
                _ if a2 => Body::Native,
                _ if dtype == DType::BF16 => Body::Refused,
                _ if training_series_lacks.contains(&op) => Body::Composed,
                _ => Body::Native,
            };
            assert_eq!(body(op, &device, dtype), expected, "{} in {dtype:?} on {soc}", op.name());
        }
    }
}
