"""The run's figures: PNG files drawn without pyplot, so that plotting leaves the caller's
matplotlib as it was (a notebook's backend, its open figures), and the command line starts
without importing matplotlib at all."""
import subprocess
import sys

import numpy as np

from transformer.plots import plot_attention, plot_curves

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG, path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_the_figures_are_whole_pngs_of_their_size_drawn_without_touching_pyplots_state(tmp_path):
    import matplotlib  # noqa: PLC0415
    import matplotlib.pyplot as plt  # noqa: PLC0415

    was = matplotlib.get_backend()
    plt.switch_backend("svg")                   # the caller's own choice, which a plot must not change to Agg
    try:
        figure = plt.figure()                   # and the caller's open figure
        curves = plot_curves(tmp_path / "loss.png", [1, 2, 3], {"train": [3.0, None, 2.0], "dev": [(1, 3.5), (3, 2.5)]},
                             title="loss", ylabel="nats", logy=True)
        weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(6, 4))   # 6 heads: two rows of panels
        heads = plot_attention(tmp_path / "attention.png", weights, list("abcde"), list("wxyz"))
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == [figure.number]
        plt.close(figure)
    finally:
        plt.switch_backend(was)
    assert _png_size(curves) == (720, 480)                                       # 6 x 4 inches at 120 dpi
    assert _png_size(heads)[0] > _png_size(heads)[1] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention.png", "loss.png"]   # no partial file left


def test_the_command_line_starts_without_importing_matplotlib():
    code = "import sys, transformer.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
