//! Which body runs each fused op, on each device, in each dtype: the table of every op's row
//! (`crate::selection`: each op declares its row beside its bodies and asks it), for callers
//! outside the ops, `codon npu env` and the self-test. [`choose`] answers with the reason:
//! the op's own body for the device (a CPU kernel, this crate's CUDA kernels, the Ascend fused
//! operators), the composed reference (candle's tensor ops), or refused (the device has no such
//! dtype).
//!
//! The Ascend answers come from the part's support table (`candle_ascend::soc`: every operator a
//! body launches must run in the dtype); without the `ascend` feature no device has an Ascend
//! body, and the ops take their composed references there.
#[cfg(feature = "ascend")]
use candle_ascend::soc::AclnnOp;
use candle_core::{DType, Device};

use crate::selection::Row;
pub use crate::selection::{Body, Choice, FusedOp, Reason};

/// The row of `op`: each op module declares its own.
fn row(op: FusedOp) -> &'static Row {
    use crate::{activation, attention, cross_entropy, dropout, embedding, layer_norm, linear, optim};
    match op {
        FusedOp::Softmax => &activation::SOFTMAX_ROW,
        FusedOp::SoftmaxGrad => &activation::SOFTMAX_GRAD_ROW,
        FusedOp::Gelu => &activation::GELU_ROW,
        FusedOp::LayerNorm => &layer_norm::ROW,
        FusedOp::AddLayerNorm => &layer_norm::ADD_ROW,
        FusedOp::Linear => &linear::ROW,
        FusedOp::LinearGradAccumulate => &linear::GRAD_ACCUMULATE_ROW,
        FusedOp::CrossEntropy => &cross_entropy::ROW,
        FusedOp::Embedding => &embedding::ROW,
        FusedOp::Dropout => &dropout::ROW,
        FusedOp::Attention => &attention::ROW,
        FusedOp::BlockGather => &attention::BLOCK_GATHER_ROW,
        FusedOp::AdamW => &optim::ADAMW_ROW,
        FusedOp::SumOfSquares => &optim::SUM_OF_SQUARES_ROW,
        FusedOp::AllFinite => &optim::ALL_FINITE_ROW,
        FusedOp::Cast => &optim::CAST_ROW,
    }
}

/// Which body runs `op` on `device` in `dtype`, and why: the one place that decides.
pub fn choose(op: FusedOp, device: &Device, dtype: DType) -> Choice {
    row(op).choose(device, dtype)
}

/// Which body runs `op` on `device` in `dtype`.
pub fn body(op: FusedOp, device: &Device, dtype: DType) -> Body {
    choose(op, device, dtype).body
}

/// The body `op` runs on `device` in `dtype` (never [`Body::Refused`]: a refusal is an error
/// that says why).
pub fn select(op: FusedOp, device: &Device, dtype: DType) -> candle_core::Result<Body> {
    row(op).select(device, dtype)
}

/// The aclnn operators behind `op`'s Ascend body, as `candle_ascend::soc` names them.
#[cfg(feature = "ascend")]
pub fn ascend_operators(op: FusedOp) -> &'static [AclnnOp] {
    row(op).ascend
}

/// The table for `devices` (name and device) in `dtypes`: a row per op, a column per device and
/// dtype, for `codon npu env` and the self-test.
pub fn table(devices: &[(&str, &Device)], dtypes: &[DType]) -> String {
    let mut header = vec!["op".to_string()];
    for (name, _) in devices {
        header.extend(dtypes.iter().map(|d| format!("{name} {}", d.as_str())));
    }
    let mut rows = vec![header];
    for op in FusedOp::ALL {
        let mut cells = vec![op.name().to_string()];
        for (_, device) in devices {
            cells.extend(dtypes.iter().map(|&d| body(op, device, d).name().to_string()));
        }
        rows.push(cells);
    }
    let widths: Vec<usize> = (0..rows[0].len()).map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why each op runs the body it does on `device` in `dtype`, a line per op.
pub fn reasons(device: &Device, dtype: DType) -> String {
    FusedOp::ALL
        .iter()
        .map(|&op| {
            let c = choose(op, device, dtype);
            format!("{:<22} {:<8} {}", op.name(), c.body.name(), c.reason)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selection::{decide, OnCpu, OnCuda, Target};

    /// Every op on the CPU and on a CUDA GPU (no GPU needed: the CUDA column is decided from the
    /// rows alone), in each dtype, written out by hand from the ops' bodies: an op whose body
    /// moves changes a line here.
    #[test]
    fn every_op_on_the_cpu_and_on_cuda_in_every_dtype() {
        let expected = "\
op                      cpu f32   cpu bf16  cpu f16   cpu f64   cuda f32  cuda bf16  cuda f16  cuda f64
softmax                 cpu       cpu       cpu       cpu       cuda      cuda       cuda      composed
softmax_grad            cpu       cpu       cpu       cpu       cuda      cuda       cuda      composed
gelu                    cpu       cpu       cpu       cpu       cuda      cuda       cuda      composed
layer_norm              cpu       cpu       cpu       cpu       cuda      cuda       cuda      composed
add_layer_norm          composed  composed  composed  composed  composed  composed   composed  composed
linear                  cpu       cpu       cpu       cpu       cuda      cuda       cuda      composed
linear_grad_accumulate  composed  composed  composed  composed  composed  composed   composed  composed
cross_entropy           cpu       cpu       cpu       cpu       composed  composed   composed  composed
embedding               cpu       cpu       cpu       cpu       cuda      cuda       cuda      cuda
dropout                 composed  composed  composed  composed  cuda      cuda       cuda      composed
attention               cpu       cpu       cpu       cpu       composed  composed   composed  composed
block_gather            composed  composed  composed  composed  cuda      cuda       cuda      composed
adamw                   cpu       cpu       cpu       cpu       cuda      composed   composed  composed
sum_of_squares          cpu       cpu       cpu       cpu       cuda      cuda       cuda      composed
all_finite              cpu       cpu       cpu       cpu       composed  composed   composed  composed
cast                    composed  composed  composed  composed  composed  composed   composed  composed";
        let dtypes = [DType::F32, DType::BF16, DType::F16, DType::F64];
        let mut lines = vec![format!(
            "{:<22}  {}",
            "op",
            ["cpu", "cuda"]
                .iter()
                .flat_map(|d| dtypes.iter().map(move |t| format!("{d} {}", t.as_str())))
                .map(|h| format!("{h:<8}"))
                .collect::<Vec<_>>()
                .join("  ")
        )];
        for op in FusedOp::ALL {
            let cells: Vec<String> = [Target::Cpu, Target::Cuda]
                .iter()
                .flat_map(|&t| dtypes.iter().map(move |&d| decide(row(op), t, d).body.name()))
                .map(|b| format!("{b:<8}"))
                .collect();
            lines.push(format!("{:<22}  {}", op.name(), cells.join("  ")));
        }
        let got: Vec<String> = lines.iter().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        let want: Vec<String> = expected.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        assert_eq!(got, want);
    }

    /// Attention's flash body on CUDA waits behind its switch, and says so.
    #[test]
    fn the_cuda_attention_switch_is_a_row_of_the_table() {
        let off = decide(row(FusedOp::Attention), Target::Cuda, DType::BF16);
        assert_eq!(off.body, Body::Composed);
        assert!(off.reason.to_string().contains("CODON_CUDA_ATTENTION=fused"), "{}", off.reason);
        let on = Row {
            op: FusedOp::Attention,
            cpu: OnCpu::Kernel,
            cuda: OnCuda::OptIn { var: "V", value: "on", on: || true },
            #[cfg(feature = "ascend")]
            ascend: &[],
        };
        assert_eq!(decide(&on, Target::Cuda, DType::BF16).body, Body::Cuda);
        assert_eq!(decide(&on, Target::Cuda, DType::F64).body, Body::Composed);
    }

    /// The CPU never refuses; the reasons name themselves.
    #[test]
    fn the_cpu_never_refuses_and_every_answer_has_a_reason() {
        for op in FusedOp::ALL {
            for dtype in [DType::F32, DType::BF16, DType::F16] {
                let c = choose(op, &Device::Cpu, dtype);
                assert_ne!(c.body, Body::Refused);
                assert!(!c.reason.to_string().is_empty());
                assert!(select(op, &Device::Cpu, dtype).is_ok());
            }
        }
    }
}
