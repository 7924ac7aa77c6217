"""Neural-network building blocks: ``from minitensor import nn``."""
from . import init
from .layers import Dropout, Embedding, LayerNorm, Linear, ReLU
from .module import Module, ModuleList, Parameter, Sequential

__all__ = ["Module", "Parameter", "ModuleList", "Sequential", "Linear", "Embedding", "LayerNorm", "Dropout", "ReLU", "init"]
