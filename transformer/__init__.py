"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) on minitensor."""
from . import decoding
from .attention import MultiHeadAttention
from .config import TransformerConfig
from .fused import fuse
from .embedding import PositionalEncoding, ScaledEmbedding, sinusoidal_table
from .layers import DecoderLayer, EncoderLayer, PositionwiseFeedForward, Residual
from .loss import label_smoothed_loss
from .masks import causal_mask, padding_mask, target_mask
from .model import Decoder, Encoder, Transformer
from .schedule import NoamSchedule, noam_lr, paper_adam

__all__ = [
    "TransformerConfig", "Transformer", "Encoder", "Decoder", "EncoderLayer", "DecoderLayer",
    "MultiHeadAttention", "PositionwiseFeedForward", "Residual", "PositionalEncoding", "ScaledEmbedding",
    "sinusoidal_table", "padding_mask", "causal_mask", "target_mask", "label_smoothed_loss",
    "noam_lr", "NoamSchedule", "paper_adam", "decoding", "fuse",
]
