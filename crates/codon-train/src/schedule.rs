//! Learning-rate schedules, stepped once per optimizer step.

use crate::error::{Result, TrainError};

/// A schedule: the learning rate (and optionally Adam's β1) that optimizer step `step`
/// (counted from 0) uses. Implement it for custom schedules.
pub trait Scheduler: Send + Sync {
    /// Learning rate of step `step`.
    fn lr(&self, step: usize) -> f64;
    /// β1 of step `step`, when the schedule cycles momentum.
    fn beta1(&self, _step: usize) -> Option<f64> {
        None
    }
}

fn cos_anneal(start: f64, end: f64, pct: f64) -> f64 {
    end + (start - end) / 2.0 * ((std::f64::consts::PI * pct).cos() + 1.0)
}

/// torch's `OneCycleLR` with its defaults: two phases, cosine annealing, div_factor 25,
/// final_div_factor 1e4, and β1 cycled 0.95 → 0.85 → 0.95.
#[derive(Debug, Clone, PartialEq)]
pub struct OneCycleLr {
    max_lr: f64,
    initial_lr: f64,
    min_lr: f64,
    phase1_end: f64,
    phase2_end: f64,
    base_momentum: f64,
    max_momentum: f64,
}

impl OneCycleLr {
    /// `OneCycleLR(max_lr, total_steps, pct_start)`. Fails where torch fails: no steps, a
    /// `pct_start` outside [0, 1], or a first phase of length exactly 1 (torch divides 0 by 0).
    pub fn new(max_lr: f64, total_steps: usize, pct_start: f64) -> Result<Self> {
        if total_steps == 0 {
            return Err(TrainError::Config("OneCycleLR needs at least one step (total_steps = 0)".into()));
        }
        if !(0.0..=1.0).contains(&pct_start) {
            return Err(TrainError::Config(format!("pct_start (warmup fraction) {pct_start} is not in [0, 1]")));
        }
        if !(max_lr.is_finite() && max_lr > 0.0) {
            return Err(TrainError::Config(format!("learning rate {max_lr} must be positive")));
        }
        let phase1_end = pct_start * total_steps as f64 - 1.0;
        if phase1_end == 0.0 {
            // Settings next to these that work, for the message.
            let works = |pct: f64, steps: usize| steps > 0 && pct * steps as f64 - 1.0 != 0.0;
            let steps: Vec<String> = [total_steps.saturating_sub(1), total_steps + 1]
                .into_iter()
                .filter(|&t| works(pct_start, t))
                .map(|t| t.to_string())
                .collect();
            let fraction = [2.0 / total_steps as f64, 0.5, 0.0]
                .into_iter()
                .find(|&f| (0.0..=1.0).contains(&f) && works(f, total_steps))
                .unwrap_or(0.0);
            return Err(TrainError::Config(format!(
                "warmup_fraction × total_steps = {pct_start} × {total_steps} = 1: the warm-up phase would have zero \
                 length (torch's OneCycleLR raises ZeroDivisionError here); train {} steps (max_steps) instead, or \
                 keep {total_steps} steps with another warmup_fraction, such as {fraction}",
                steps.join(" or ")
            )));
        }
        let initial_lr = max_lr / 25.0;
        Ok(Self {
            max_lr,
            initial_lr,
            min_lr: initial_lr / 1e4,
            phase1_end,
            phase2_end: (total_steps - 1) as f64,
            base_momentum: 0.85,
            max_momentum: 0.95,
        })
    }

    fn phase(&self, step: usize) -> (f64, bool) {
        let s = step as f64;
        if s <= self.phase1_end {
            (s / self.phase1_end, true)
        } else {
            let span = self.phase2_end - self.phase1_end;
            ((s - self.phase1_end) / span, false)
        }
    }
}

impl Scheduler for OneCycleLr {
    fn lr(&self, step: usize) -> f64 {
        match self.phase(step) {
            (p, true) => cos_anneal(self.initial_lr, self.max_lr, p),
            (p, false) => cos_anneal(self.max_lr, self.min_lr, p),
        }
    }

    fn beta1(&self, step: usize) -> Option<f64> {
        Some(match self.phase(step) {
            (p, true) => cos_anneal(self.max_momentum, self.base_momentum, p),
            (p, false) => cos_anneal(self.base_momentum, self.max_momentum, p),
        })
    }
}

/// How a warm-up schedule decays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decay {
    /// Linearly to 0 at the last step.
    Linear,
    /// Half a cosine to 0 at the last step.
    Cosine,
}

/// Linear warm-up from 0 to `max_lr` over `warmup_steps`, then linear or cosine decay.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupDecay {
    /// Peak learning rate.
    pub max_lr: f64,
    /// Warm-up steps.
    pub warmup_steps: usize,
    /// Total steps.
    pub total_steps: usize,
    /// Decay shape.
    pub decay: Decay,
}

impl Scheduler for WarmupDecay {
    fn lr(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.max_lr * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let span = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
        let p = ((step - self.warmup_steps) as f64 / span).min(1.0);
        match self.decay {
            Decay::Linear => self.max_lr * (1.0 - p),
            Decay::Cosine => self.max_lr * 0.5 * (1.0 + (std::f64::consts::PI * p).cos()),
        }
    }
}

/// A constant learning rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Constant(pub f64);

impl Scheduler for Constant {
    fn lr(&self, _step: usize) -> f64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_and_constant() {
        let s = WarmupDecay { max_lr: 1.0, warmup_steps: 4, total_steps: 14, decay: Decay::Linear };
        assert_eq!((s.lr(0), s.lr(3), s.lr(4), s.lr(9), s.lr(14)), (0.25, 1.0, 1.0, 0.5, 0.0));
        let c = WarmupDecay { decay: Decay::Cosine, ..s };
        assert!((c.lr(9) - 0.5).abs() < 1e-12);
        assert_eq!(Constant(3e-4).lr(100), 3e-4);
        assert_eq!(Constant(3e-4).beta1(0), None);
    }

    #[test]
    fn invalid_one_cycle_settings() {
        assert!(OneCycleLr::new(1e-3, 0, 0.1).is_err());
        assert!(OneCycleLr::new(1e-3, 10, 1.5).is_err());
        assert!(OneCycleLr::new(-1.0, 10, 0.1).is_err());
        let err = OneCycleLr::new(0.001, 10, 0.1).unwrap_err().to_string();
        assert!(err.contains("zero length") && err.contains("train 9 or 11 steps"), "{err}");
        assert!(err.ends_with("such as 0.2"), "{err}");
        for (steps, fraction) in [(9, 0.1), (11, 0.1), (10, 0.2)] {
            assert!(OneCycleLr::new(0.001, steps, fraction).is_ok(), "the suggestion {steps} × {fraction} works");
        }
        let err = OneCycleLr::new(0.001, 1, 1.0).unwrap_err().to_string();
        assert!(err.contains("train 2 steps") && err.ends_with("such as 0.5"), "{err}");
    }
}
