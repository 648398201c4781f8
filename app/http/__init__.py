"""The HTTP front: the extender verbs' server, serving (uvicorn, TLS reload) and the wire models."""
