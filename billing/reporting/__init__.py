"""Reports finance reads: a period's report (reports.py), cost allocation by any dimension (allocation.py, with its pure core allocation_core.py) and the charts (charts.py)."""
