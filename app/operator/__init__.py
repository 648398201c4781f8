"""What operators read: /debug views, Prometheus metrics, structured logs."""
