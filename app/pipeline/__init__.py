"""The verbs' scheduling pipeline: a framework of extension points (``framework``) run over the
participants the configuration switches on (``build``): resource fit (``fit``), DRA claims
(``claims`` over ``dynamicresources``) and queues (``queues`` over ``fairness``)."""
