"""State the server keeps on disk between runs."""
