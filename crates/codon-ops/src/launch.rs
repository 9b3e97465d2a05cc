//! Launch plumbing the Ascend bodies share: the state a forward launch keeps for its backward,
//! and a backward launch on tensors' storages outside the graph.
/// What a backend launch keeps for a later launch (row statistics, a dropout mask), opaque to
/// the ops that hold it: only the backend's launches make and read one, so without the
/// `ascend` feature none exists.
#[derive(Clone)]
pub(crate) struct LaunchState(std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl LaunchState {
    /// Keep `state`.
    #[cfg(feature = "ascend")]
    pub(crate) fn new<T: Send + Sync + 'static>(state: T) -> Self {
        Self(std::sync::Arc::new(state))
    }

    /// The kept state as the `T` its launch made; `op` names the op in the error.
    #[cfg(feature = "ascend")]
    pub(crate) fn get<T: 'static>(&self, op: &str) -> candle_core::Result<&T> {
        self.0
            .downcast_ref()
            .ok_or_else(|| candle_core::Error::msg(format!("{op}: the kept state is another launch's")))
    }

    /// The kept state itself, when nothing else holds it.
    #[cfg(feature = "ascend")]
    pub(crate) fn into_inner<T: Send + Sync + 'static>(self, op: &str) -> candle_core::Result<T> {
        let kept = self
            .0
            .downcast::<T>()
            .map_err(|_| candle_core::Error::msg(format!("{op}: the kept state is another launch's")))?;
        std::sync::Arc::try_unwrap(kept).map_err(|_| candle_core::Error::msg(format!("{op}: the kept state is shared")))
    }
}

/// A backend launch on the storages of `inputs`, outside the graph: the backward step of an op
/// whose forward launch kept [`LaunchState`] (so no CPU body can exist for it), returned as a
/// tensor that tracks nothing. Every input must live on the Ascend device.
#[cfg(feature = "ascend")]
pub(crate) fn ascend_launch<const N: usize>(
    op: &str,
    inputs: [&candle_core::Tensor; N],
    launch: impl FnOnce(
        [(&dyn candle_core::custom_backend::DynBackendStorage, &candle_core::Layout); N],
    ) -> candle_core::Result<(candle_core::custom_backend::BoxStorage, candle_core::Shape)>,
) -> candle_core::Result<candle_core::Tensor> {
    use candle_core::Storage;
    let held = inputs.map(|t| t.storage_and_layout());
    let mut operands = Vec::with_capacity(N);
    for (storage, layout) in &held {
        let Storage::Custom(storage) = &**storage else {
            candle_core::bail!("{op}: the backward launch takes operands on the Ascend device only")
        };
        operands.push((storage.as_ref(), *layout));
    }
    let operands: [_; N] = operands.try_into().map_err(|_| candle_core::Error::msg(format!("{op}: operands")))?;
    let (out, shape) = launch(operands)?;
    Ok(candle_core::Tensor::from_storage(Storage::Custom(out), shape, candle_core::op::BackpropOp::none(), false))
}
