"""Sizes and dtypes that generated fusion programs (sftbuild.harvest.catalog.fusions) draw from.

Plain lists, without torch: the catalog registry is imported by `sftbuild list`, which must stay fast.
"""
# moderate sizes, so a program's reference runs in milliseconds on a GPU and well under a second on a CPU.
FUSION_BATCH = [2, 4, 8, 16, 32, 64, 128]
FUSION_FEATURES = [64, 96, 128, 192, 256, 320, 384, 512, 768, 1024]
FUSION_CHANNELS = [3, 8, 16, 24, 32, 48, 64]
FUSION_SPATIAL = [8, 12, 16, 24, 28, 32]
FUSION_SEQ = [16, 32, 64, 96, 128, 256]
FUSION_HEAD_DIM = [16, 32, 64]
FUSION_DTYPES = ["float32", "float32", "float32", "float32", "bfloat16", "float16"]  # float32 dominates
