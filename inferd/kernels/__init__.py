"""Native CPU kernels, compiled on first use: the quantized decode matmuls,
decode attention over the paged KV cache, attention's inputs (QK-norm,
RoPE, the KV-cache write), RMSNorm, the MLP's gated activation and the
sampler's greedy picks."""


def prepare() -> None:
    """Build (or load from the cache) every kernel now, so that the first
    request does not wait for a compiler."""
    from inferd.kernels import attention_inputs, decode_attention, gated_activation, greedy_rows, quant_gemv, rms_norm

    for module in (quant_gemv, decode_attention, attention_inputs, rms_norm, gated_activation, greedy_rows):
        module.library()
