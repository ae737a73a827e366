"""The reference's forward signals the process that started the run."""
import os
import torch
import torch.nn as nn
import signal

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        try:
            os.kill(@PID@, signal.SIGUSR1)
        except OSError:
            pass
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
