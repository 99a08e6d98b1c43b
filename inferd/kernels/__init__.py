"""Native CPU kernels, compiled on first use: the quantized decode matmuls,
decode attention over the paged KV cache, RMSNorm and the MLP's gated
activation."""


def prepare() -> None:
    """Build (or load from the cache) every kernel now, so that the first
    request does not wait for a compiler."""
    from inferd.kernels import decode_attention, gated_activation, quant_gemv, rms_norm

    for module in (quant_gemv, decode_attention, rms_norm, gated_activation):
        module.library()
