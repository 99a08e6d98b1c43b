"""llama-server's native routes: /completion, /infill, /tokenize, /detokenize,
/apply-template, /slots and /props, in its field names and shapes."""
