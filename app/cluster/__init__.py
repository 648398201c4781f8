"""The Kubernetes side: API client and credentials, watches (reflectors), the cache and its typed
events, API writes (Bindings, claim allocations), the snapshot loader and the Kueue watch."""
