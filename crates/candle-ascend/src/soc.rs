//! The SoC behind a device, and what it supports: the per-SoC op table `soc/op_support.tsv`
//! (generated into [`AclnnOp`] and its rows by build.rs, and shared with the emulator, which
//! refuses what the table does not list), BF16, and the cubeMathType the backend passes to matmuls.
use std::collections::HashMap;
use std::sync::OnceLock;

use crate::ffi::types::dtype;

/// The families the support table distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SocFamily {
    /// Atlas training series: Ascend910A, Ascend910ProA, Ascend910PremiumA.
    AtlasTraining,
    /// Atlas A2 (Ascend910B1…B4) and A3 (Ascend910_93xx), which share one architecture (DAV_2201).
    AtlasA2,
    /// Anything else (Ascend 950, inference parts, unknown names): no table rows.
    Other,
}

impl SocFamily {
    /// The family of a SoC name as `aclrtGetSocName` reports it (names from torch_npu
    /// `NpuVariables.cpp`).
    pub fn of(name: &str) -> Self {
        if matches!(name, "Ascend910A" | "Ascend910ProA" | "Ascend910PremiumA" | "Ascend910ProB" | "Ascend910B") {
            SocFamily::AtlasTraining
        } else if name.starts_with("Ascend910B") || name.starts_with("Ascend910_93") {
            SocFamily::AtlasA2
        } else {
            SocFamily::Other
        }
    }

    /// The family's key in `soc/op_support.tsv`.
    fn key(self) -> Option<&'static str> {
        match self {
            SocFamily::AtlasTraining => Some("910"),
            SocFamily::AtlasA2 => Some("910b"),
            SocFamily::Other => None,
        }
    }

    /// The family as the vendor's documents name it.
    pub fn description(self) -> &'static str {
        match self {
            SocFamily::AtlasTraining => "Atlas training series",
            SocFamily::AtlasA2 => "Atlas A2/A3 training series",
            SocFamily::Other => "a part without support data",
        }
    }
}

include!(concat!(env!("OUT_DIR"), "/op_support.rs"));

impl std::fmt::Display for AclnnOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One row of the table.
#[derive(Debug)]
struct Row {
    dtypes: u64,
    aicpu: u64,
    dsa: u64,
    source: &'static str,
}

/// The engine a launch runs on, per the vendor's kernel tables (`soc/aclnn_kernels.tsv`,
/// `soc/cann/kernels.tsv`; build.rs decides it for every row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// An AI Core (or cube) kernel.
    AiCore,
    /// An AI CPU kernel, orders of magnitude slower: no AI Core kernel takes the dtype.
    AiCpu,
    /// The DSA engine (random numbers on the Atlas A2 series).
    Dsa,
}

fn table() -> &'static HashMap<(AclnnOp, &'static str), Row> {
    static TABLE: OnceLock<HashMap<(AclnnOp, &'static str), Row>> = OnceLock::new();
    TABLE.get_or_init(|| {
        SUPPORT_ROWS
            .iter()
            .map(|&(op, family, dtypes, aicpu, dsa, source)| ((op, family), Row { dtypes, aicpu, dsa, source }))
            .collect()
    })
}

/// The vendor name of an `aclDataType`, for messages.
pub fn dtype_name(acl: i32) -> &'static str {
    dtype::describe(acl).map_or("UNDEFINED", |(name, _)| name)
}

/// Whether a SoC runs an aclnn op on a dtype, by the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Listed.
    Yes,
    /// The op is not supported on this part at all.
    NoOp {
        /// The vendor document that says so.
        source: &'static str,
    },
    /// The op exists but not for this dtype.
    NoDtype {
        /// The vendor document that lists the dtypes.
        source: &'static str,
    },
    /// The table has no data for this part or op: the toolkit's phase 1 decides.
    Unknown,
}

/// A SoC: its name and family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soc {
    /// `aclrtGetSocName`, e.g. `Ascend910B3`.
    pub name: String,
    /// Its family.
    pub family: SocFamily,
}

/// cubeMathType values (aclnn matmul ops' `int8_t cubeMathType`).
pub mod cube {
    /// Compute in the input dtype.
    pub const KEEP_DTYPE: i8 = 0;
    /// FP32 inputs go through the FP16 cube.
    pub const USE_FP16: i8 = 2;
    /// FP32 inputs go through the HF32 cube.
    pub const USE_HF32: i8 = 3;
}

impl Soc {
    /// The SoC of this name.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_string(), family: SocFamily::of(name) }
    }

    /// BF16 exists from Ascend910B1 on (torch_npu `NpuVariables.cpp`, `IsBF16Supported`).
    pub fn has_bf16(&self) -> bool {
        self.family == SocFamily::AtlasA2
    }

    /// Whether this part runs `op` on `acl_dtype`, per the table.
    pub fn supports(&self, op: AclnnOp, acl_dtype: i32) -> Support {
        let Some(key) = self.family.key() else { return Support::Unknown };
        match table().get(&(op, key)) {
            None => Support::Unknown,
            Some(r) if r.dtypes == 0 => Support::NoOp { source: r.source },
            Some(r) if (0..64).contains(&acl_dtype) && r.dtypes & (1 << acl_dtype) != 0 => Support::Yes,
            Some(r) => Support::NoDtype { source: r.source },
        }
    }

    /// The engine `op` runs on for a `self` of `acl_dtype` (`None` where the table has no data or
    /// the op does not run). An op whose every dtype runs on one engine needs no dtype.
    pub fn engine(&self, op: AclnnOp, acl_dtype: Option<i32>) -> Option<Engine> {
        let r = table().get(&(op, self.family.key()?))?;
        // A dtype of the row decides by its bit; a row on one engine for all its dtypes decides
        // without one (aclnnDropoutGenMaskV2 is keyed by its probability's dtype, not an operand's).
        let on = |mask: u64| match acl_dtype {
            Some(d) if (0..64).contains(&d) && r.dtypes & (1 << d) != 0 => mask & (1 << d) != 0,
            _ => mask != 0 && mask == r.dtypes,
        };
        match () {
            _ if r.dtypes == 0 => None,
            _ if on(r.aicpu) => Some(Engine::AiCpu),
            _ if on(r.dsa) => Some(Engine::Dsa),
            _ => Some(Engine::AiCore),
        }
    }

    /// Whether `op` runs on `acl_dtype` (unknown counts as yes: the toolkit decides).
    pub fn runs(&self, op: AclnnOp, acl_dtype: i32) -> bool {
        matches!(self.supports(op, acl_dtype), Support::Yes | Support::Unknown)
    }

    /// The cubeMathType for a matmul, as torch_npu chooses it (`CalcuOpUtil::GetCubeMathType`):
    /// USE_FP16 on the Atlas training series, whose cube refuses FP32 with KEEP_DTYPE
    /// (ops-nn `cube_util.cpp`); KEEP_DTYPE from 910B on, or USE_HF32 when `allow_hf32`.
    pub fn cube_math_type(&self, allow_hf32: bool) -> i8 {
        match (self.family, allow_hf32) {
            (SocFamily::AtlasTraining, _) => cube::USE_FP16,
            (_, true) => cube::USE_HF32,
            (_, false) => cube::KEEP_DTYPE,
        }
    }
}
