"""Trace replay: real GPU-cluster traces through the admission engine, per policy."""
