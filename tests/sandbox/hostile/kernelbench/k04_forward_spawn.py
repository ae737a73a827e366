"""The reference's forward starts a shell, then computes."""
import os
import torch
import torch.nn as nn

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        try:
            os.system("touch @HOME@/k04-spawned")
        except OSError:
            pass
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
