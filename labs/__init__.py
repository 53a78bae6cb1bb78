"""The lab harness: drives and observes `teamdesk` through its public functions and probes.

It holds no product logic. `gates` pauses executors at probe points; more tools (lab
worlds, faults, tables, histories) build on it.
"""
