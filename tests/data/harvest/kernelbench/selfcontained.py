import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.add(x, 1)


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
