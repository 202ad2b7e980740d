"""The one dtype table: spec dtype names -> torch dtypes and element sizes."""

from __future__ import annotations

import torch

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "int32": torch.int32,
    "int64": torch.int64,
}
