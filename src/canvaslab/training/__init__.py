"""Training the `mini` reference models: data generators, tokenizer, objective, training loop.

The layer sits above ``studies`` (it scores held-out answers with the commit-order scorers) and below
``reports``/``cli``.
"""
