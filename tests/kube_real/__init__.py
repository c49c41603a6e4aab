"""The real Kubernetes control plane in the test suite: one per run (``plane.py``), an
administrator's view of it for seeding and checking (``cluster.py``), fixtures
(``fixtures.py``). Tests that use it join the xdist group ``real-cluster``, so they run on
one worker, one after another, and never race for a namespace."""
