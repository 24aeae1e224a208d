"""Effects around the core: the engine loop, attempt runner, file watcher, store, processes."""
