"""Exercise 19 (lesson 19) — the size of a model, from its settings (Table 3's "params").

Table 3 lists each variant's parameters (65 million for the base model). Write
``parameter_count(vocab, d_model, d_ff, n_layers)``: the number (an int) of parameters of the
Transformer of exercise 14 (one shared embedding table, sinusoidal positions that are not
parameters, n_layers encoder and n_layers decoder layers, every Linear with its bias, every
LayerNorm with its γ and β; the number of heads does not matter). Check it against
``len`` of your own model's parameters, summed over their sizes.

Check it with:  python lessons/check.py 19
"""


def parameter_count(vocab, d_model, d_ff, n_layers):
    raise NotImplementedError("exercise 19: write parameter_count")
