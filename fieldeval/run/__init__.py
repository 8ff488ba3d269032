"""One pytest session's run: session state, options, gates, progress, signals, run files, shards."""
