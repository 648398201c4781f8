"""A small in-process fake Kubernetes API server for tests."""

from .server import FakeAPIServer

__all__ = ["FakeAPIServer"]
