# %% [markdown]
# # Lesson 12 — The whole model on the copy task
#
# Everything so far, assembled: embeddings × √d_model (3.4) + positions (3.5) → encoder;
# target shifted right → decoder → logits through the shared embedding matrix. The copy task
# (target = source) can only be solved by looking the right source position up through
# encoder-decoder attention, so when it trains, the architecture works end to end.
# `examples/copy_task.py` runs the same thing with progress bars and plots; here the loop is
# written out. Three details of the model are taken on trust here and measured later: why
# its weights start where they do, why the embeddings are multiplied by √d_model and shared,
# and where dropout goes (lesson 20); lesson 23 shows what to check when a loop like this one
# does not train.

# %%
import numpy as np

import minitensor as mt
from transformer import NoamSchedule, Transformer, TransformerConfig, checks, label_smoothed_loss, paper_adam
from transformer.copytask import BOS, EOS, PAD, CopyTaskSettings, make_batch, score
from transformer.decoding import greedy_decode
from transformer.lesson import Results, figure_dir, smoke
from transformer.plots import plot_attention, plot_curves

results = Results("12")

# %% [markdown]
# ## The data: source, shifted target, target
#
# Token ids: 0 is padding, 1 begins a sentence (`<s>`), 2 ends it (`</s>`), 3–12 are the ten
# symbols. For a source x, the decoder reads `tgt_in` = `<s>` x and must predict
# `tgt_out` = x `</s>`: at every position the next token. That one-token shift is what makes
# the causal mask of lesson 11 sufficient: position i sees `tgt_in` up to i, which holds the
# outputs before i.

# %%
task = CopyTaskSettings(vocab=13, min_length=4, max_length=6, batch=64) if smoke() else \
    CopyTaskSettings(vocab=13, min_length=10, max_length=10, batch=128)
src, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 2, task)
for name, a in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
    print(f"{name:>8} {a.tolist()}")
checks.target_is_shifted(tgt_in, tgt_out, BOS, PAD)

# %% [markdown]
# ## The model and the loop
#
# Adam with the paper's settings and its learning-rate schedule (`paper_adam`, `NoamSchedule`:
# a warm-up, then a slow decay; lesson 15 is about it). Each update: a fresh batch, the loss
# per real target token (lesson 5), backward, one step. Every 50 updates we decode a validation
# set greedily (one token at a time, the most likely each time: lesson 13) and stop once it is
# copied exactly.

# %%
d_model, layers, steps = (32, 1, 300) if smoke() else (64, 2, 1500)
mt.manual_seed(0)
cfg = TransformerConfig(task.vocab, d_model=d_model, n_heads=4, d_ff=2 * d_model, n_encoder_layers=layers,
                        n_decoder_layers=layers, dropout=0.0, max_len=task.max_length + 2)
model = Transformer(cfg)
print(f"{model.num_parameters():,} weights; source and target embeddings are one matrix:",
      model.src_embed.weight is model.tgt_embed.weight)
opt = paper_adam(model.parameters())
sched = NoamSchedule(opt, d_model, warmup=100, factor=0.5 if not smoke() else 1.0)
rng = np.random.default_rng(0)
val = make_batch(np.random.default_rng(1), 200, task)
losses = []
for step in range(1, steps + 1):
    src, tgt_in, tgt_out = make_batch(rng, task.batch, task)
    logits = model(src, tgt_in)                                  # (batch, target length, vocabulary)
    loss = label_smoothed_loss(logits, mt.tensor(tgt_out), PAD, smoothing=0.0)
    opt.zero_grad()
    loss.backward()
    sched.step()
    opt.step()
    losses.append(loss.item())
    if step % 50 == 0:
        exact, tokens = score(greedy_decode(model, val[0], max_len=val[2].shape[1]), val[2])
        model.train()
        print(f"update {step:4d}: loss {loss.item():.4f}, validation exact match {exact:.0%}, tokens {tokens:.0%}")
        if exact == 1.0:
            break

# %% [markdown]
# ## On sequences it has never seen

# %%
test = make_batch(np.random.default_rng(12345), 100, task)
pred = greedy_decode(model, test[0], max_len=test[2].shape[1])
exact, tokens = checks.copies(model, test[0], test[2], at_least=0.5 if smoke() else 0.99, exact=not smoke())
results["updates"] = step
results["test_exact_match"] = exact
results["test_token_accuracy"] = tokens
for i in range(3):
    out = pred[i].tolist()
    print("source", test[0][i].tolist(), "-> output", out[:out.index(EOS)] if EOS in out else out)
results.finding(f"d_model {d_model}, {layers}+{layers} layers: greedy decoding copies {exact:.0%} of 100 fresh "
                f"sequences exactly ({tokens:.1%} of tokens) after {step} updates.")

# %%
out = figure_dir("12")
plot_curves(out / "loss.png", list(range(1, len(losses) + 1)), {"training loss": losses},
            title="copy task: training loss", ylabel="loss per target token", logy=True)
model.eval()
model.store_attention(True)
with mt.no_grad():
    model(test[0][:1], test[1][:1])
weights = model.decoder.layers[-1].cross_attn.attention.numpy()[0]
names = {PAD: "<pad>", BOS: "<s>", EOS: "</s>"}
plot_attention(out / "attention.png", weights, [names.get(int(t), str(int(t))) for t in test[0][0]],
               [names.get(int(t), str(int(t))) for t in test[1][0]],
               title="last decoder layer: encoder-decoder attention (rows: target so far)")
print("saved", out / "loss.png", "and", out / "attention.png")
