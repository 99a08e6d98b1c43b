"""`inferd bench`: load an OpenAI-compatible server and report its latency and throughput."""
