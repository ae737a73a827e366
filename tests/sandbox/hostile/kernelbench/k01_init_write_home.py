"""The reference model's constructor writes the user's home."""
import os
import torch
import torch.nn as nn

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        open("@HOME@/k01-pwned", "w").write("x")

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
