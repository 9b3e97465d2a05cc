//! Numeric precision of training, and f16's dynamic loss scaling.

use candle_core::DType;
use serde::{Deserialize, Serialize};

use crate::error::{Result, TrainError};

/// Numeric precision of training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precision {
    /// Everything in f32.
    F32,
    /// bf16 compute, f32 master weights and moments.
    Bf16,
    /// f16 compute with dynamic loss scaling, f32 master weights and moments.
    F16,
}

impl Precision {
    /// The compute dtype.
    pub fn dtype(self) -> DType {
        match self {
            Precision::F32 => DType::F32,
            Precision::Bf16 => DType::BF16,
            Precision::F16 => DType::F16,
        }
    }

    /// The precision whose compute dtype is `dtype`, if one is.
    pub fn of_dtype(dtype: DType) -> Option<Self> {
        [Precision::F32, Precision::Bf16, Precision::F16].into_iter().find(|p| p.dtype() == dtype)
    }

    /// What `--precision auto` means on `device`: f32 on the CPU, bf16 where the device has it,
    /// otherwise f16 with dynamic loss scaling (an Ascend 910A has no BF16).
    pub fn auto(device: &candle_core::Device) -> Self {
        if device.is_cpu() {
            Precision::F32
        } else if device.supports_bf16() {
            Precision::Bf16
        } else {
            Precision::F16
        }
    }

    /// Refuse bf16 on an accelerator without BF16, before anything runs (the CPU emulates it).
    pub fn check_device(self, device: &candle_core::Device) -> Result<()> {
        if self == Precision::Bf16 && !device.is_cpu() && !device.supports_bf16() {
            return Err(TrainError::Config(format!(
                "bf16 precision on {}, which has no BF16: use f16 (dynamic loss scaling) or f32",
                device.location()
            )));
        }
        Ok(())
    }
}

/// f16 dynamic loss scaling (torch GradScaler's defaults).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub(crate) struct LossScaler {
    pub scale: f64,
    pub good_steps: usize,
}

impl LossScaler {
    const GROWTH_INTERVAL: usize = 2000;
    pub(crate) fn new() -> Self {
        Self { scale: 65536.0, good_steps: 0 }
    }
    /// Whether a saved scaler is one that [`Self::update`] could have left: a finite positive
    /// scale, and fewer good steps than the growth interval.
    pub(crate) fn is_reachable(&self) -> bool {
        self.scale.is_finite() && self.scale > 0.0 && self.good_steps < Self::GROWTH_INTERVAL
    }
    /// Halve the scale after an overflow; double it after 2,000 finite steps in a row.
    pub(crate) fn update(&mut self, finite: bool) {
        if finite {
            self.good_steps += 1;
            if self.good_steps == Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.good_steps = 0;
            }
        } else {
            self.scale *= 0.5;
            self.good_steps = 0;
        }
    }
}
