"""shardlab core: the Strategy interface, the preset registry and the typed run config."""
