"""The demo: a simulated cluster seeded with tenants, quotas and work (seed.py), the
shipped Philly trace slice made into demo work (trace.py, replay.py: pure), and the
clock that replays it in virtual time so the queue visibly lends and reclaims
(clock.py). Used by ``make demo`` (config.settings.demo) only."""
