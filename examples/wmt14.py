"""WMT 2014 English -> German with the paper's settings, from files you provide.

    python examples/wmt14.py --preset wmt14-base \\
        --train-src europarl-v7.de-en.en,commoncrawl.de-en.en,news-commentary-v9.de-en.en \\
        --train-tgt europarl-v7.de-en.de,commoncrawl.de-en.de,news-commentary-v9.de-en.de \\
        --valid-src newstest2013.en --valid-tgt newstest2013.de \\
        --test-src newstest2014-deen-src.en.sgm --test-tgt newstest2014-deen-ref.de.sgm

wmt14-base: joint BPE of 37000, ~25k source + ~25k target tokens per update (6250 padded
tokens x 4 accumulated batches), 100k updates, warm-up 4000, then the last 5 checkpoints
averaged and decoded with beam 4, alpha 0.6 (Sections 5 and 6.1). wmt14-big: d_model 1024,
16 heads, dropout 0.3, 300k updates, last 20 averaged. Both expect a GPU (--device cuda).
"""
import argparse

from transformer.cli import main
from transformer.presets import PRESETS


def run(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="wmt14-base", choices=["wmt14-base", "wmt14-big"])
    p.add_argument("--run-dir", default=None, help="default: runs/<preset>")
    for side in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            p.add_argument(f"--{side}-{lang}", required=side != "test")
    p.add_argument("--device", default="cuda")
    p.add_argument("--resume", action="store_true")
    a = p.parse_args(argv)
    run_dir = a.run_dir or f"runs/{a.preset}"
    files = ["--train-src", a.train_src, "--train-tgt", a.train_tgt, "--valid-src", a.valid_src,
             "--valid-tgt", a.valid_tgt]
    main(["train", "--preset", a.preset, "--run-dir", run_dir, "--device", a.device, *files,
          *(["--resume"] if a.resume else [])])
    if a.test_src and a.test_tgt:
        return main(["evaluate", "--run-dir", run_dir, "--src", a.test_src, "--ref", a.test_tgt, "--device", a.device,
                     "--average", str(PRESETS[a.preset]["average_last"])])
    return {}


if __name__ == "__main__":
    run()
