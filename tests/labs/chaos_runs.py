"""The notebook 90's chaos runs, made as the notebook makes them, for the tests that judge
them (one place, so the tests and the notebook cannot drift apart): `labs.scenes.ch90`
makes them, and keeps the notebook's pair once per process (`ch90.notebook_runs`), which
the exercise registry's context of `90.invariant` reads too."""

from __future__ import annotations

from labs.scenes.ch90 import chaos_run, notebook_runs

__all__ = ["chaos_run", "notebook_runs"]
