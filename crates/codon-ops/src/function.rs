//! An op whose forward pass is a sequence of tensor ops and whose backward pass is written by
//! hand (torch's `autograd.Function`): composed ops get candle's generic backward, which for
//! gathers, narrows and concatenations fills zeros and copies; a hand-written one launches only
//! what the gradient needs.
use std::sync::Mutex;

#[cfg(feature = "ascend")]
use candle_ascend::fused;
#[cfg(feature = "ascend")]
use candle_core::custom_backend::{BoxStorage, DynBackendStorage};
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

/// The gradients of three inputs from the saved state, the inputs (detached) and the output's
/// gradient. The graph keeps the inputs anyway, so the state need not copy them.
pub type Backward3<S> =
    fn(&S, [&Tensor; 3], &Tensor) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)>;

/// `forward(a, b, c)` on detached inputs, recorded in the graph as one op of `a`, `b` and `c`
/// whose backward pass is `backward(saved, [a, b, c], grad)`. `forward` returns the value and what the
/// backward pass keeps.
pub fn function3<S: Send + Sync + 'static>(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    forward: impl FnOnce(&Tensor, &Tensor, &Tensor) -> candle_core::Result<(Tensor, S)>,
    backward: Backward3<S>,
) -> candle_core::Result<Tensor> {
    let (value, saved) = forward(&a.detach(), &b.detach(), &c.detach())?;
    a.apply_op3(b, c, Function3 { value: Mutex::new(Some(value)), saved, backward })
}

struct Function3<S> {
    /// The forward value, handed over (as a contiguous copy) when the op runs.
    value: Mutex<Option<Tensor>>,
    saved: S,
    backward: Backward3<S>,
}

impl<S> Function3<S> {
    fn value(&self) -> candle_core::Result<Tensor> {
        let value = self.value.lock().unwrap_or_else(|p| p.into_inner()).take();
        value.ok_or_else(|| candle_core::Error::msg("function3: the op ran twice"))
    }
}

impl<S: Send + Sync> CustomOp3 for Function3<S> {
    fn name(&self) -> &'static str {
        "function3"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        // A fresh copy, so the storage is exactly the value.
        let value = self.value()?.copy()?;
        let (storage, layout) = value.storage_and_layout();
        match &*storage {
            candle_core::Storage::Cpu(s) => Ok((s.clone(), layout.shape().clone())),
            _ => candle_core::bail!("function3: the forward value is not a CPU tensor"),
        }
    }

    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::{BackendDevice, BackendStorage};
        let value = self.value()?;
        let (storage, layout) = value.storage_and_layout();
        match &*storage {
            // A device copy of exactly the value's elements (the value may view a larger buffer).
            candle_core::Storage::Cuda(s) => {
                let mut out = s.device().zeros_impl(layout.shape(), value.dtype())?;
                s.copy_strided_src(&mut out, 0, layout)?;
                Ok((out, layout.shape().clone()))
            }
            _ => candle_core::bail!("function3: the forward value is not a CUDA tensor"),
        }
    }

    #[cfg(feature = "ascend")]
    fn custom_fwd(
        &self,
        _: &dyn DynBackendStorage,
        _: &Layout,
        _: &dyn DynBackendStorage,
        _: &Layout,
        _: &dyn DynBackendStorage,
        _: &Layout,
    ) -> candle_core::Result<(BoxStorage, Shape)> {
        let mut value = self.value()?;
        // The value's own storage when nothing else holds it and it is laid out as an op's
        // result; a copy otherwise.
        if value.is_contiguous() && value.layout().start_offset() == 0 {
            match value.into_storage() {
                Ok((candle_core::Storage::Custom(storage), layout)) => return Ok((storage, layout.shape().clone())),
                Ok(_) => candle_core::bail!("function3: the forward value is not on the op's device"),
                Err(shared) => value = shared,
            }
        }
        fused::materialize(&value)
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        (self.backward)(&self.saved, [&a.detach(), &b.detach(), &c.detach()], grad)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    /// A tensor hands over its storage only when nothing else holds it: a clone or a view
    /// sharing the storage keeps it, and the tensor comes back whole.
    #[test]
    fn into_storage_moves_only_an_unshared_storage() {
        let t = Tensor::arange(0f32, 6.0, &Device::Cpu).unwrap();
        let clone = t.clone();
        let t = t.into_storage().expect_err("a clone holds the tensor");
        drop(clone);
        let view = t.narrow(0, 1, 2).unwrap();
        let t = t.into_storage().expect_err("a view shares the storage");
        assert_eq!(t.to_vec1::<f32>().unwrap(), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        drop(view);
        let (storage, layout) = t.into_storage().expect("nothing else holds it");
        assert_eq!(layout.dims(), [6]);
        match storage {
            candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => assert_eq!(v, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]),
            _ => panic!("not the f32 CPU storage"),
        }
    }
}
