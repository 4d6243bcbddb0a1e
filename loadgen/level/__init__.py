"""One measured level: its record (``result``), the fields declared once (``declared``), the server's own
gauges (``server_sample``), the parts it breaks down into (``breakdown``), whether the client could keep up
(``client_health``), and the means read across levels (``aggregates``)."""
