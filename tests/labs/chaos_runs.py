"""The notebook 90's two chaos runs, made as the notebook makes them, for the tests that
judge them (one place, so the tests and the notebook cannot drift apart)."""

from __future__ import annotations

from labs.chaos import ChaosConfig, ChaosReport, private_restarter, run_chaos
from labs.lab import Lab
from labs.scenes import ch90


async def chaos_run(config: ChaosConfig, name: str, settings) -> ChaosReport:
    """One chaos run with `config` in a lab world of its own."""
    async with Lab.open(name, settings=settings, seed=False, private_redis=True) as lab:
        return await run_chaos(lab.settings, config, out=lambda line: None,
                               keep_logs=False, redis=private_restarter(lab.private_redis))


async def cx_run(name: str, settings) -> ChaosReport:
    """The counterexample's run as the notebook makes it (`ch90.counterexample_run`)."""
    async with Lab.open(name, settings=settings, seed=False, private_redis=True) as lab:
        _, report, _ = await ch90.counterexample_run(lab, ch90.CX_CONFIG)
        return report
