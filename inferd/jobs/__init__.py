"""Work that outlives a connection: uploaded files, batches of requests and
background responses, kept in SQLite under the data dir and run by one
runner. No engine, no dialect, no HTTP: the server hands the runner a
dispatch function that runs one item, and the dialects shape what is stored."""
