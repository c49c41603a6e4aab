"""What-if and savings on a cluster's own history (docs/what-if.md).

- ``records``: the typed params and results a run keeps (one parse, one dump each).
- ``search``: the pure savings search (static slices at growing capacity, then bisection)
  and its price per month from the rate card.
- ``services``: create a run (validated), execute it with progress, fail stalled runs.
- ``api`` and ``portal``: the platform admins' API and page; everyone else gets 404.
"""
