//! A model of your own, trained by the same `Trainer` that trains BigBird: the trainer knows no
//! model. Here, a two-parameter linear regression y = w·x + b on synthetic points.
//!
//! ```text
//! cargo run --release --example custom_model
//! ```
use candle_core::{Device, Tensor, Var};
use codon_ascend::train::{BatchSource, Constant, Parameters, Precision, TrainableModel, Trainer, TrainerConfig};

/// y = w·x + b.
struct LinearRegression {
    w: Var,
    b: Var,
}

impl TrainableModel for LinearRegression {
    /// Points (x, y).
    type Batch = Vec<(f32, f32)>;
    fn parameters(&self) -> Parameters {
        Parameters::from(vec![("w".to_string(), self.w.clone()), ("b".to_string(), self.b.clone())])
    }
    fn loss(&self, batch: &Self::Batch, _seed: u64) -> codon_ascend::train::Result<Tensor> {
        let x = Tensor::new(batch.iter().map(|p| p.0).collect::<Vec<_>>(), &Device::Cpu)?;
        let y = Tensor::new(batch.iter().map(|p| p.1).collect::<Vec<_>>(), &Device::Cpu)?;
        let predicted = x.broadcast_mul(self.w.as_tensor())?.broadcast_add(self.b.as_tensor())?;
        Ok((predicted - y)?.sqr()?.mean_all()?)
    }
    fn tokens(&self, batch: &Self::Batch) -> usize {
        batch.len()
    }
}

/// Four batches of eight points on y = 3x - 1.
struct Points;

impl BatchSource for Points {
    type Batch = Vec<(f32, f32)>;
    fn batches_per_epoch(&self) -> usize {
        4
    }
    fn epoch(&self, _epoch: u64) -> Box<dyn Iterator<Item = codon_ascend::train::Result<Self::Batch>> + '_> {
        let batch = |i: usize| (0..8).map(move |j| ((i * 8 + j) as f32 / 32.0, 3.0 * (i * 8 + j) as f32 / 32.0 - 1.0));
        Box::new((0..4).map(move |i| Ok(batch(i).collect())))
    }
}

fn main() -> anyhow::Result<()> {
    let model = LinearRegression { w: Var::new(&[0f32], &Device::Cpu)?, b: Var::new(&[0f32], &Device::Cpu)? };
    let config = TrainerConfig::builder()
        .precision(Precision::F32)
        .max_epochs(50)
        .scheduler(Box::new(Constant(0.1)))
        .quiet(true)
        .build()?;
    let report = Trainer::new(config).fit(&model, &Points, None)?;
    let (w, b) = (model.w.as_tensor().to_vec1::<f32>()?[0], model.b.as_tensor().to_vec1::<f32>()?[0]);
    let (first, last) = (report.steps[0].loss, report.steps[report.steps.len() - 1].loss);
    codon_ascend::outln!(
        "{} steps: loss {first:.3} -> {last:.5}; w = {w:.3}, b = {b:.3} (truth: 3, -1)",
        report.steps.len()
    );
    anyhow::ensure!(last < first / 10.0, "the loss did not go down");
    Ok(())
}
