//! The one table from candle's backend operations to aclnn: an exhaustive `match`, so a candle
//! operation added upstream fails to compile here until it has a row. `npu_env`'s coverage and
//! the per-SoC documentation are generated from it and from `soc/op_support.tsv`.
use crate::soc::AclnnOp;
use candle_core::custom_backend::{BinaryOpKind, UnaryOpKind};
use candle_core::op::{CmpOp, ReduceOp};

use crate::soc::{Soc, Support};

/// Every operation of candle's `BackendStorage`/`BackendDevice`, with the op kinds spelled out.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CandleOp {
    /// `unary_impl`.
    Unary(UnaryOpKind),
    /// `binary_impl`.
    Binary(BinaryOpKind),
    /// `cmp`.
    Cmp(CmpOp),
    /// `reduce_op`.
    Reduce(ReduceOp),
    /// `affine`.
    Affine,
    /// `powf`.
    Powf,
    /// `elu`.
    Elu,
    /// `to_dtype`.
    ToDtype,
    /// `where_cond`.
    WhereCond,
    /// `matmul`.
    MatMul,
    /// `index_select`.
    IndexSelect,
    /// `index_add`.
    IndexAdd,
    /// `gather`.
    Gather,
    /// `scatter_add_set`.
    ScatterAdd,
    /// `scatter_set`.
    ScatterSet,
    /// `copy_strided_src`, `copy2d`, `try_clone`.
    Copy,
    /// `const_set`.
    ConstSet,
    /// `zeros_impl`.
    Zeros,
    /// `rand_uniform`.
    RandUniform,
    /// `rand_normal`.
    RandNormal,
    /// `conv1d`, `conv_transpose1d`, `conv2d`, `conv_transpose2d`.
    Conv,
    /// `avg_pool2d`, `max_pool2d`.
    Pool,
    /// `upsample_nearest1d`, `upsample_nearest2d`, `upsample_bilinear2d`.
    Upsample,
}

/// How the backend runs a candle operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// One aclnn op of the same meaning.
    Native(AclnnOp),
    /// Several aclnn launches, or one of another meaning (e.g. `sqr` as `Mul(x, x)`).
    Composed(&'static [AclnnOp]),
    /// Not implemented on Ascend: an error naming the op.
    Unavailable,
}

impl Route {
    /// The aclnn ops this route launches.
    pub fn aclnn_ops(self) -> Vec<AclnnOp> {
        match self {
            Route::Native(op) => vec![op],
            Route::Composed(ops) => ops.to_vec(),
            Route::Unavailable => Vec::new(),
        }
    }
}

/// The route of each candle operation.
pub fn route(op: CandleOp) -> Route {
    use Route::{Composed, Native, Unavailable};
    match op {
        CandleOp::Unary(kind) => match kind {
            UnaryOpKind::Exp => Native(AclnnOp::Exp),
            UnaryOpKind::Log => Native(AclnnOp::Log),
            UnaryOpKind::Sin => Native(AclnnOp::Sin),
            UnaryOpKind::Cos => Native(AclnnOp::Cos),
            UnaryOpKind::Tanh => Native(AclnnOp::Tanh),
            UnaryOpKind::Neg => Native(AclnnOp::Neg),
            UnaryOpKind::Recip => Native(AclnnOp::Reciprocal),
            // aclnnSquare runs only on Ascend 950 (ops-math math/square/docs/aclnnSquare.md).
            UnaryOpKind::Sqr => Composed(&[AclnnOp::Mul]),
            UnaryOpKind::Sqrt => Native(AclnnOp::Sqrt),
            UnaryOpKind::Gelu => Native(AclnnOp::GeluV2),
            UnaryOpKind::GeluErf => Native(AclnnOp::GeluV2),
            UnaryOpKind::Erf => Native(AclnnOp::Erf),
            UnaryOpKind::Relu => Native(AclnnOp::Relu),
            UnaryOpKind::Silu => Native(AclnnOp::Silu),
            UnaryOpKind::Abs => Native(AclnnOp::Abs),
            UnaryOpKind::Ceil => Native(AclnnOp::Ceil),
            UnaryOpKind::Floor => Native(AclnnOp::Floor),
            UnaryOpKind::Round => Native(AclnnOp::Round),
            UnaryOpKind::Sign => Native(AclnnOp::Sign),
        },
        CandleOp::Binary(kind) => match kind {
            BinaryOpKind::Add => Native(AclnnOp::Add),
            BinaryOpKind::Sub => Native(AclnnOp::Sub),
            BinaryOpKind::Mul => Native(AclnnOp::Mul),
            BinaryOpKind::Div => Native(AclnnOp::Div),
            BinaryOpKind::Minimum => Native(AclnnOp::Minimum),
            BinaryOpKind::Maximum => Native(AclnnOp::Maximum),
        },
        CandleOp::Cmp(cmp) => match cmp {
            CmpOp::Eq => Native(AclnnOp::EqTensor),
            CmpOp::Ne => Native(AclnnOp::NeTensor),
            CmpOp::Lt => Native(AclnnOp::LtTensor),
            CmpOp::Le => Native(AclnnOp::LeTensor),
            CmpOp::Gt => Native(AclnnOp::GtTensor),
            CmpOp::Ge => Native(AclnnOp::GeTensor),
        },
        CandleOp::Reduce(reduce) => match reduce {
            ReduceOp::Sum => Native(AclnnOp::ReduceSum),
            ReduceOp::Max => Native(AclnnOp::Amax),
            ReduceOp::Min => Native(AclnnOp::Amin),
            // candle wants u32 indices; ArgMax/ArgMin write INT64, then a cast.
            ReduceOp::ArgMax => Composed(&[AclnnOp::ArgMax, AclnnOp::Cast]),
            ReduceOp::ArgMin => Composed(&[AclnnOp::ArgMin, AclnnOp::Cast]),
        },
        CandleOp::Affine => Composed(&[AclnnOp::Muls, AclnnOp::Adds]),
        CandleOp::Powf => Native(AclnnOp::PowTensorScalar),
        CandleOp::ToDtype => Native(AclnnOp::Cast),
        CandleOp::WhereCond => Composed(&[AclnnOp::Cast, AclnnOp::SWhere]),
        CandleOp::MatMul => Native(AclnnOp::BatchMatMul),
        CandleOp::IndexSelect => Native(AclnnOp::IndexSelect),
        CandleOp::IndexAdd => Native(AclnnOp::IndexAdd),
        CandleOp::Gather => Native(AclnnOp::Gather),
        CandleOp::ScatterAdd => Native(AclnnOp::ScatterAdd),
        CandleOp::Copy => Native(AclnnOp::InplaceCopy),
        CandleOp::ConstSet => Native(AclnnOp::InplaceFillScalar),
        CandleOp::Zeros => Native(AclnnOp::InplaceZero),
        CandleOp::RandUniform => Native(AclnnOp::InplaceUniform),
        CandleOp::RandNormal => Native(AclnnOp::InplaceNormal),
        CandleOp::Elu | CandleOp::ScatterSet | CandleOp::Conv | CandleOp::Pool | CandleOp::Upsample => Unavailable,
    }
}

/// Every candle operation, for coverage reports.
pub fn all_ops() -> Vec<CandleOp> {
    let mut ops: Vec<CandleOp> = UnaryOpKind::ALL.iter().map(|&k| CandleOp::Unary(k)).collect();
    ops.extend(BinaryOpKind::ALL.iter().map(|&k| CandleOp::Binary(k)));
    ops.extend([CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge].map(CandleOp::Cmp));
    ops.extend([ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin].map(CandleOp::Reduce));
    ops.extend([
        CandleOp::Affine,
        CandleOp::Powf,
        CandleOp::Elu,
        CandleOp::ToDtype,
        CandleOp::WhereCond,
        CandleOp::MatMul,
        CandleOp::IndexSelect,
        CandleOp::IndexAdd,
        CandleOp::Gather,
        CandleOp::ScatterAdd,
        CandleOp::ScatterSet,
        CandleOp::Copy,
        CandleOp::ConstSet,
        CandleOp::Zeros,
        CandleOp::RandUniform,
        CandleOp::RandNormal,
        CandleOp::Conv,
        CandleOp::Pool,
        CandleOp::Upsample,
    ]);
    ops
}

impl std::fmt::Display for CandleOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            CandleOp::Unary(k) => k.name(),
            CandleOp::Binary(k) => k.name(),
            CandleOp::Cmp(c) => match c {
                CmpOp::Eq => "eq",
                CmpOp::Ne => "ne",
                CmpOp::Lt => "lt",
                CmpOp::Le => "le",
                CmpOp::Gt => "gt",
                CmpOp::Ge => "ge",
            },
            CandleOp::Reduce(r) => match r {
                ReduceOp::Sum => "sum",
                ReduceOp::Max => "max",
                ReduceOp::Min => "min",
                ReduceOp::ArgMax => "argmax",
                ReduceOp::ArgMin => "argmin",
            },
            CandleOp::Affine => "affine",
            CandleOp::Powf => "powf",
            CandleOp::Elu => "elu",
            CandleOp::ToDtype => "to_dtype",
            CandleOp::WhereCond => "where_cond",
            CandleOp::MatMul => "matmul",
            CandleOp::IndexSelect => "index_select",
            CandleOp::IndexAdd => "index_add",
            CandleOp::Gather => "gather",
            CandleOp::ScatterAdd => "scatter_add",
            CandleOp::ScatterSet => "scatter_set",
            CandleOp::Copy => "copy",
            CandleOp::ConstSet => "const_set",
            CandleOp::Zeros => "zeros",
            CandleOp::RandUniform => "rand_uniform",
            CandleOp::RandNormal => "rand_normal",
            CandleOp::Conv => "conv",
            CandleOp::Pool => "pool",
            CandleOp::Upsample => "upsample",
        };
        f.write_str(name)
    }
}

impl std::fmt::Debug for CandleOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// How a candle operation runs on a SoC for one dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// One aclnn op the part supports.
    Native(AclnnOp),
    /// aclnn ops the part supports, composed.
    Composed(Vec<AclnnOp>),
    /// Not available; the reason names the refused op and its vendor document.
    Unavailable(String),
}

/// The coverage of `op` on `soc` for tensors of `acl_dtype`.
pub fn coverage(op: CandleOp, soc: &Soc, acl_dtype: i32) -> Coverage {
    let r = route(op);
    if r == Route::Unavailable {
        return Coverage::Unavailable("not implemented by the Ascend backend".into());
    }
    for aclnn in r.aclnn_ops() {
        match soc.supports(aclnn, acl_dtype) {
            Support::Yes | Support::Unknown => {}
            Support::NoOp { source } => return Coverage::Unavailable(format!("{aclnn} is not supported ({source})")),
            Support::NoDtype { source } => {
                return Coverage::Unavailable(format!(
                    "{aclnn} has no {} ({source})",
                    crate::soc::dtype_name(acl_dtype)
                ))
            }
        }
    }
    match r {
        Route::Native(op) => Coverage::Native(op),
        _ => Coverage::Composed(r.aclnn_ops()),
    }
}
