"""Small, realistic JAX functions for the pytest-jaxport demo."""

from demo_models.attention import init_attention, multi_head_attention
from demo_models.convnet import convnet, init_convnet
from demo_models.features import feature_layer, init_features
from demo_models.fft_filter import lowpass_filter
from demo_models.linalg import ridge_lstsq, solve
from demo_models.mlp import init_mlp, mlp
from demo_models.pallas_kernel import bias_gelu_reference, fused_bias_gelu
from demo_models.quantized import fp8_matmul, quantize

__all__ = [
    "bias_gelu_reference",
    "convnet",
    "feature_layer",
    "fp8_matmul",
    "fused_bias_gelu",
    "init_attention",
    "init_convnet",
    "init_features",
    "init_mlp",
    "lowpass_filter",
    "mlp",
    "multi_head_attention",
    "quantize",
    "ridge_lstsq",
    "solve",
]
