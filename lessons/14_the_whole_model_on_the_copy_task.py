# %% [markdown]
# # Lesson 14 — The whole model on the copy task (Sections 3, 3.4, 5.4)
#
# Everything so far, assembled (the paper's Figure 1): token ids become vectors through an
# embedding scaled by $\sqrt{d_{\text{model}}}$, positions are added (lesson 10), the encoder
# (lesson 11) reads the source; the decoder (lesson 12) reads the target shifted right by one
# position and attends to the encoder's output; a last linear map turns its states into one
# logit per token of the vocabulary. `transformer.Transformer` is that model. This lesson
# looks at the two things the assembly adds, weight sharing and where the dropouts sit, and
# then trains it on a task that only a working encoder-decoder can solve: copying.
#
# **Teaches:** `Transformer`, `share_embeddings`, `generator`, `encode`, `decode`, `new_cache`,
# `greedy_decode`, `make_batch`, `CopyTaskSettings`, `PAD`, `BOS`, `EOS`, `score`, `evaluate`, `plot_curves`,
# `plot_attention`; the whole model, weight tying, embedding dropout, teacher forcing, the
# copy task, greedy decoding, exact match.
#
# **Uses:** the encoder layer, the decoder layer, causal masking, incremental decoding with a
# cache, positional encodings, embeddings times the square root of the model width, dropout,
# cross-entropy, padding, Adam.

# %%
import numpy as np

import minitensor as mt
from minitensor import nn, optim
from transformer import Transformer, TransformerConfig, label_smoothed_loss, padding_mask
from transformer.copytask import BOS, EOS, PAD, CopyTaskSettings, evaluate, make_batch, score
from transformer.decoding import greedy_decode
from transformer.plots import plot_attention, plot_curves
from lessonkit import Results, checks, figure_dir, show_saved, smoke

results = Results("14")

# %% [markdown]
# ## One matrix, three uses
#
# Section 3.4: "we share the same weight matrix between the two embedding layers and the
# pre-softmax linear transformation" (following Press and Wolf, 2016). With a joint subword
# vocabulary of $V$ tokens for both languages (lesson 20), the source embedding, the target
# embedding and the output projection can all be one $V \times d_{\text{model}}$ matrix $E$:
# the logits are $h E^\top$ (`model.generator`). This implementation ties the target
# embedding to the projection always, and `share_embeddings` decides whether the source
# embedding is the same matrix too. The base configuration with the paper's 37,000-token
# vocabulary, counted three ways: all three shared, the source apart
# (`share_embeddings=False`), and all three apart, for which we add a separate projection
# matrix to the second count.

# %%
V = 2000 if smoke() else 37000
counts = {}
for share in (True, False):
    mt.manual_seed(0)
    m = Transformer(TransformerConfig(V, share_embeddings=share))
    counts["all three shared" if share else "source apart"] = m.num_parameters()
    print(f"share_embeddings={share}: {m.num_parameters():,} weights | the source embedding is the target's:",
          m.src_embed is m.tgt_embed)
    h = np.random.default_rng(0).standard_normal((2, 512)).astype(np.float32)
    checks.agree(m.generator(mt.tensor(h)).numpy(), h @ m.tgt_embed.weight.numpy().T,
                 "the pre-softmax projection vs h Eᵀ with the target embedding E", atol=1e-4)
    del m
projection = nn.Linear(512, V, bias=False)       # what an untied pre-softmax projection would add
counts["all three apart"] = counts["source apart"] + projection.num_parameters()
for name, c in counts.items():
    print(f"{name:>16}: {c:,} weights")
checks.agree(counts["source apart"] - counts["all three shared"], V * 512,
             "weights saved by sharing the source embedding with the target's", atol=0)
checks.agree(counts["all three apart"] - counts["all three shared"], 2 * V * 512,
             "weights saved by sharing all three uses", atol=0)
results["base_weights"] = counts
# smoke mode's V is smaller, and the shared count holds one V × d_model matrix: grow it to 37,000 rows
paper = ("the paper's Table 3 lists 65M for base" if V == 37000 else
         f"a smoke-mode vocabulary: with the paper's 37,000 tokens the first count is "
         f"{counts['all three shared'] + (37000 - V) * 512:,}, which Table 3 lists as 65M")
results.finding(f"the base configuration with a {V:,}-token vocabulary has {counts['all three shared']:,} weights "
                f"with one matrix in all three places, {counts['source apart']:,} with the source embedding apart and "
                f"{counts['all three apart']:,} with all three apart: sharing saves V·d_model = {V * 512:,} weights "
                f"per use ({paper}).")

# %% [markdown]
# Nothing in the model's code adds the three gradients of the shared matrix together: autograd
# does, as it adds the contributions of every place a tensor is used (lesson 1).
#
# ## Where the dropouts are
#
# Section 5.4 applies dropout to the output of each sub-layer (lesson 11) and "to the sums of
# the embeddings and the positional encodings in both the encoder and decoder stacks". We
# count how often each dropout runs in one forward pass in training mode: a sub-layer's dropout
# is the `dropout` module of its `Residual` (LayerNorm(x + Dropout(Sublayer(x))), lesson 11); the
# embeddings' dropout is a module of its own. With sinusoidal positions one
# `PositionalEncoding` module serves both stacks (`model.tgt_pos is model.src_pos`), so its
# dropout runs twice: once on the encoder's input, once on the decoder's.

# %%
mt.manual_seed(0)
cfg = TransformerConfig(30, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2, dropout=0.1)
model = Transformer(cfg)
calls = {}
for name, mod in model.named_modules():
    if isinstance(mod, nn.Dropout) and mod.p > 0:
        kind = "residual dropouts (Residual.dropout)" if name.endswith(("sub1.dropout", "sub2.dropout", "sub3.dropout")) \
            else name

        def counted(x, kind=kind, inner=mod.forward):
            calls[kind] = calls.get(kind, 0) + 1
            return inner(x)
        mod.forward = counted                      # count the calls, then restore below
src, tgt = np.random.default_rng(0).integers(3, 30, (2, 6)), np.random.default_rng(1).integers(3, 30, (2, 5))
model.train()
model(src, tgt)
for name, mod in model.named_modules():
    mod.__dict__.pop("forward", None)
for name, n in calls.items():
    print(f"  {name}: {n} call{'s' if n > 1 else ''}")
residual = calls["residual dropouts (Residual.dropout)"]
checks.agree(residual, 2 * 2 + 3 * 2, "residual dropouts run: 2 per encoder layer, 3 per decoder layer", atol=0)
checks.agree(calls["src_pos.dropout"], 2, "runs of the embedding dropout: the encoder's input and the decoder's",
             atol=0)
print("tgt_pos is src_pos:", model.tgt_pos is model.src_pos)

# %% [markdown]
# ## The data: source, shifted target, target
#
# The copy task: the target is the source. Token ids: 0 is padding, 1 begins a sentence
# (`<s>`), 2 ends it (`</s>`), 3–12 are the ten symbols. For a source $x$, the decoder reads
# `tgt_in` = `<s>` $x$ and must predict `tgt_out` = $x$ `</s>`: at every position the next
# token. That one-position shift is the offset of lesson 12: position $i$ sees `tgt_in` up to
# $i$, which holds the outputs before $i$. Feeding the true previous tokens this way, rather
# than the model's own guesses, is called *teacher forcing*; it is what lets one forward pass
# train every position at once.

# %%
task = CopyTaskSettings(vocab=13, min_length=4, max_length=6, batch=64) if smoke() else \
    CopyTaskSettings(vocab=13, min_length=10, max_length=10, batch=128)
src, tgt_in, tgt_out = make_batch(np.random.default_rng(0), 2, task)
for name, a in (("src", src), ("tgt_in", tgt_in), ("tgt_out", tgt_out)):
    print(f"{name:>8} {a.tolist()}")
checks.target_is_shifted(tgt_in, tgt_out, BOS, PAD)

# %% [markdown]
# ## Greedy decoding
#
# At test time there is no target to feed. The decoder starts from `<s>` alone, the most
# likely token is appended (padding and `<s>` are never outputs), and the longer prefix goes
# in again, until `</s>`. Each step uses
# the cache of lesson 12, so it computes only the new position. That is `greedy_decode`;
# written out with the model's three stages (`encode`, `decode`, `generator`):

# %%
def greedy(model, src, max_len):
    src_mask = padding_mask(mt.tensor(src), PAD)
    memory = model.encode(src, src_mask)
    cache, ys = model.new_cache(), np.full((len(src), 1), BOS)
    for _ in range(max_len):
        h = model.decode(ys[:, -1:], memory, src_mask, cache=cache)  # only the newest token goes in
        logits = model.generator(h[:, -1]).numpy()
        logits[:, [PAD, BOS]] = -np.inf                               # never an output
        ys = np.concatenate([ys, logits.argmax(-1)[:, None]], axis=1)
    return ys[:, 1:]


mt.manual_seed(0)
untrained = Transformer(TransformerConfig(task.vocab, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1,
                                          n_decoder_layers=1, dropout=0.0, max_len=task.max_length + 2)).eval()
with mt.no_grad():
    mine = greedy(untrained, src, 5)
theirs = greedy_decode(untrained, src, max_len=5)
keep = np.cumsum(mine == EOS, axis=1) - (mine == EOS) == 0       # greedy_decode pads after </s> and stops
checks.agree(np.where(keep, mine, PAD)[:, :theirs.shape[1]], theirs, "the loop above vs greedy_decode (an untrained model)",
             atol=0)
print("the loop above gives greedy_decode's output:", theirs.tolist())

# %% [markdown]
# ## The model and the loop
#
# Each update: a fresh batch, the loss per real target token (lesson 4), backward, one Adam
# step at a constant learning rate of $10^{-3}$ (the paper's schedule is lesson 16's subject).
# Every 50 updates we decode a validation set greedily and `score` it: the share of sequences
# copied exactly, and of tokens; we stop once every validation sequence is copied.

# %%
d_model, layers, steps = (32, 1, 400) if smoke() else (64, 2, 1500)
mt.manual_seed(0)
cfg = TransformerConfig(task.vocab, d_model=d_model, n_heads=4, d_ff=2 * d_model, n_encoder_layers=layers,
                        n_decoder_layers=layers, dropout=0.0, max_len=task.max_length + 2)
model = Transformer(cfg)
print(f"{model.num_parameters():,} weights")
opt = optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
rng = np.random.default_rng(0)
val = make_batch(np.random.default_rng(1), 200, task)
losses = []
for step in range(1, steps + 1):
    src, tgt_in, tgt_out = make_batch(rng, task.batch, task)
    logits = model(src, tgt_in)                                  # (batch, target length, vocabulary)
    loss = label_smoothed_loss(logits, mt.tensor(tgt_out), PAD, smoothing=0.0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if step % 50 == 0:
        exact, tokens = score(greedy_decode(model, val[0], max_len=val[2].shape[1]), val[2])
        model.train()                                            # greedy_decode switched to eval()
        print(f"update {step:4d}: loss {loss.item():.4f}, validation exact match {exact:.1%}, tokens {tokens:.1%}")
        if exact == 1.0:
            break

# %% [markdown]
# ## On sequences it has never seen
#
# (`evaluate(model, batch, settings)` from `transformer.copytask` does the decoding and the
# scoring in one call.)

# %%
test = make_batch(np.random.default_rng(12345), 100, task)
pred = greedy_decode(model, test[0], max_len=test[2].shape[1])
exact, tokens = checks.copies(model, test[0], test[2], at_least=0.5 if smoke() else 0.99, exact=not smoke())
checks.agree(evaluate(model, test, task)[:2], (exact, tokens), "evaluate vs greedy_decode and score", atol=0)
results["updates"] = step
results["test_exact_match"] = exact
results["test_token_accuracy"] = tokens
for i in range(3):
    out = pred[i].tolist()
    print("source", test[0][i].tolist(), "-> output", out[:out.index(EOS)] if EOS in out else out)
results.finding(f"d_model {d_model}, {layers}+{layers} layers, Adam at a constant rate of 1e-3: greedy decoding copies "
                f"{exact:.0%} of 100 fresh sequences exactly ({tokens:.1%} of tokens) after {step} updates.")

# %% tags=["fold"]
out = figure_dir("14")
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
show_saved(out / "loss.png")
show_saved(out / "attention.png")

# %% [markdown]
# In the attention map each row is a target position, each column a source position: to
# write the symbol at target position $i$, the last decoder layer looks mostly at source
# position $i$, the diagonal, with some rows shared between neighbouring positions.
#
# The loss curve (log scale) falls by orders of magnitude, and it may jump up once it is near
# zero, then fall again, with the validation exact match dipping meanwhile (the log above
# shows whether this run did). The quick start's copy task, with the paper's schedule instead
# of a constant rate, shows such jumps too: `benchmarks/copy_task_loss_jump.py` measured them
# over six seeds, where gradient clipping removed them but needed more updates and a larger
# Adam $\epsilon$ made them rarer (`docs/performance.md`).
#
# ## Exercise
#
# Exercise 14 of the track, `lessons/exercises/ex14_transformer.py`, asks for the masks and your
# whole `Transformer`, with one embedding table shared by source, target and output.
# `python lessons/check.py 14` grades it and, at the first case it gets wrong, shows the input,
# what it expected and what it got.
