"""The adapter around the pure packages: HTTP wire, config, watch-fed cache, API writes, operator surface."""
