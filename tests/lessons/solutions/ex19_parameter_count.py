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
    # >>> exercise: write parameter_count
    linear = lambda n_in, n_out: n_in * n_out + n_out   # noqa: E731
    attention = 4 * linear(d_model, d_model)
    ffn = linear(d_model, d_ff) + linear(d_ff, d_model)
    norm = 2 * d_model
    encoder = attention + ffn + 2 * norm
    decoder = 2 * attention + ffn + 3 * norm
    return vocab * d_model + n_layers * (encoder + decoder)
    # <<<
