"""Native CPU kernels, compiled on first use: the quantized decode matmuls."""
