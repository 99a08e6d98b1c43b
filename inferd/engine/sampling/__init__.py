"""From a step's logits to its tokens. `sampler.Sampler` is the entry point
and its module docstring states the order of every stage."""
