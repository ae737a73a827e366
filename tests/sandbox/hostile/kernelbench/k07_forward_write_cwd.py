"""The reference's forward writes the working folder and the workspace."""
import os
import torch
import torch.nn as nn

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for p in ("@MARK@-k07-cwd", "@WS@/k07-pwned"):
            try:
                open(p, "w").write("x")
            except OSError:
                pass
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
