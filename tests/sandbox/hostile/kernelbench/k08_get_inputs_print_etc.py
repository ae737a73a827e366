"""get_inputs prints the /etc-like shadow file."""
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
    print(open("@ETC@/shadow").read())
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
