"""The reference model's constructor connects out."""
import os
import torch
import torch.nn as nn
import socket

batch_size = 16
dim = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        try:
            socket.create_connection(("127.0.0.1", @PORT@), timeout=1).close()
        except OSError:
            pass

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
