# %% [markdown]
# # Lesson 12 — The whole model on the copy task
#
# Everything so far, assembled: embeddings × √d_model (3.4) + positions (3.5) → encoder;
# target shifted right → decoder → logits through the shared embedding matrix. The copy task
# (target = source) can only be solved by looking the right source position up through
# encoder-decoder attention, so when it trains, the architecture works end to end.
# This is `examples/copy_task.py` in a few lines.

# %%
import json



from transformer.copytask import CopyTaskSettings, train_copy_task
from transformer.lesson import figure_dir, smoke

out = figure_dir("12")
s = CopyTaskSettings(run_dir=str(out), show_progress=False,
                     **(dict(d_model=32, d_ff=64, layers=1, steps=150, eval_every=50, vocab=10, min_length=4,
                             max_length=6, batch=64, lr_factor=1.0, warmup=50) if smoke() else {}))
summary, model = train_copy_task(s, return_model=True)
print(json.dumps({k: summary[k] for k in ("exact_match", "token_accuracy", "train_seconds", "steps")}, indent=2))
print((out / "examples.txt").read_text())
if not smoke():
    assert summary["exact_match"] >= 0.99
else:
    assert summary["token_accuracy"] > 0.5
print("figures:", sorted(p.name for p in out.glob("*.png")))
print("the model has", model.num_parameters(), "weights;", "shared embedding:",
      model.src_embed.weight is model.tgt_embed.weight)

