"""Figures, drawn to PNG files, never to windows.

matplotlib's object-oriented ``Figure`` draws without pyplot, so plotting neither picks nor
changes the caller's backend (a notebook keeps its own), and it is imported at the first
figure: the command line starts without it."""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from .files import write_file


def _figure(**kwargs):
    from matplotlib.figure import Figure  # noqa: PLC0415 (here, not at the top: the command line starts without it)

    return Figure(**kwargs)


def _save(fig, path: str | Path) -> Path:
    """The figure as a PNG, renamed into place once whole (a crash never leaves half an image)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return write_file(path, buffer.getvalue())


def plot_curves(path: str | Path, steps: Sequence[int], series: dict, title: str = "", ylabel: str = "",
                logy: bool = False) -> Path:
    """One line per entry of ``series``: name -> values (one per step), or name -> (step, value) pairs;
    a value of None (a skipped update's loss, JSON null) leaves a gap in its line."""
    fig = _figure(figsize=(6, 4), dpi=120)
    ax = fig.subplots()
    for name, values in series.items():
        if len(values) == 0:
            continue
        if isinstance(values[0], tuple):
            xs, ys = [s for s, _ in values], [v for _, v in values]
        else:
            xs, ys = steps, values
        ys = [math.nan if v is None else v for v in ys]
        ax.plot(xs, ys, label=name, marker="o" if len(xs) < 30 else None, markersize=3)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_attention(path: str | Path, weights: np.ndarray, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                   title: str = "encoder-decoder attention") -> Path:
    """Heatmaps of attention weights (heads, Tq, Tk): one panel per head, four to a row, queries
    (the decoder's input so far) down, source keys across, one colour scale for all."""
    weights = np.asarray(weights)
    if weights.ndim == 2:
        weights = weights[None]
    h = weights.shape[0]
    cols = min(h, 4)
    rows = (h + cols - 1) // cols
    ticks = 8 if max(len(src_tokens), len(tgt_tokens)) <= 24 else 6    # every token named, still legible
    fig = _figure(figsize=(2.9 * cols + 0.9, 2.9 * rows + 0.5), dpi=120, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.axis("off")
            continue
        im = ax.imshow(weights[i], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(src_tokens)), src_tokens, fontsize=ticks, rotation=90)
        ax.set_yticks(range(len(tgt_tokens)), tgt_tokens, fontsize=ticks)
        ax.set_title(f"head {i}", fontsize=10)
        if i >= h - cols:
            ax.set_xlabel("source", fontsize=9)
        if i % cols == 0:
            ax.set_ylabel("decoder input", fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.colorbar(im, ax=axes, label="attention weight", shrink=0.8)
    return _save(fig, path)
