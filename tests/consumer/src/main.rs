//! A model of its own, trained by `codon_train::Trainer` on the CPU and on an emulated Ascend NPU.
use codon_train::candle::{Device, Tensor, Var};
use codon_train::{Constant, Parameters, Precision, SameBatch, TrainableModel, Trainer, TrainerConfig};

/// y = w·x + b, fitted to points (x, y).
struct Line(Var, Var, Device);

impl TrainableModel for Line {
    type Batch = (Vec<f32>, Vec<f32>);
    fn parameters(&self) -> Parameters {
        Parameters::from(vec![("w".to_string(), self.0.clone()), ("b".to_string(), self.1.clone())])
    }
    fn loss(&self, (x, y): &Self::Batch, _seed: u64) -> codon_train::Result<Tensor> {
        let (x, y) = (Tensor::new(x.as_slice(), &self.2)?, Tensor::new(y.as_slice(), &self.2)?);
        Ok((x.broadcast_mul(self.0.as_tensor())?.broadcast_add(self.1.as_tensor())? - y)?.sqr()?.mean_all()?)
    }
    fn tokens(&self, (x, _): &Self::Batch) -> usize {
        x.len()
    }
}

fn main() -> anyhow::Result<()> {
    let x: Vec<f32> = (0..16).map(|i| i as f32 / 16.0).collect();
    let points = SameBatch((x.clone(), x.iter().map(|x| 3.0 * x - 1.0).collect::<Vec<f32>>()));
    for device in [Device::Cpu, candle_ascend::parse_device("npu-sim:0")?] {
        let line = Line(Var::new(&[0f32], &device)?, Var::new(&[0f32], &device)?, device.clone());
        let config = TrainerConfig::builder().precision(Precision::F32).max_epochs(100);
        let config = config.scheduler(Box::new(Constant(0.1))).quiet(true).build()?;
        let steps = Trainer::new(config).fit(&line, &points, None)?.steps;
        let (first, last) = (steps[0].loss, steps[steps.len() - 1].loss);
        println!("{}: {} steps, loss {first:.3} -> {last:.5}", device.location(), steps.len());
        anyhow::ensure!(last < first / 10.0, "{}: the loss did not go down", device.location());
    }
    Ok(())
}
